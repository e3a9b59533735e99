#!/bin/bash
# Shared by run_infer_310.sh and run_infer_cpu.sh (sourced, not run): checks and resolves
# [MINDIR_PATH] [DATASET_NAME] [DATASET_PATH] [DEVICE_ID(optional)] into absolute
# MINDIR_PATH, DATASET_PATH and CONFIG, DEVICE_ID, ROOT, OUT_DIR and PYTHON, before any cd;
# prints the usage and exits 1 on a wrong argument. Defines step() for the pipeline's steps.
# shellcheck disable=SC2034  # the variables are used by the scripts that source this file

usage() {
  echo "Usage: bash $0 [MINDIR_PATH] [DATASET_NAME] [DATASET_PATH] [DEVICE_ID(optional)]" >&2
  echo "  DATASET_NAME: imagenet | digits" >&2
}

if [ $# -lt 3 ] || [ $# -gt 4 ]; then
  usage
  exit 1
fi

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT_DIR="$(pwd)"

absolute() {  # absolute <file|dir> <path> <what>: the absolute path, or a usage error if it is missing
  if { [ "$1" = file ] && [ ! -f "$2" ]; } || { [ "$1" = dir ] && [ ! -d "$2" ]; }; then
    echo "error: $3 not found: $2" >&2
    usage
    exit 1
  fi
  realpath -- "$2"
}

MINDIR_PATH="$(absolute file "$1" MINDIR_PATH)"
DATASET_NAME="$2"
DATASET_PATH="$(absolute dir "$3" DATASET_PATH)"
DEVICE_ID="${4:-0}"
case "$DATASET_NAME" in
  imagenet) CONFIG="$ROOT/src/configs/dm_nfnet_f0.yaml" ;;
  digits) CONFIG="$ROOT/src/configs/dm_nfnet_nano_digits.yaml" ;;
  *) echo "error: DATASET_NAME must be imagenet or digits, got '$DATASET_NAME'" >&2; usage; exit 1 ;;
esac
CONFIG="$(absolute file "${NFNET_CONFIG:-$CONFIG}" config)"
if ! [[ "$DEVICE_ID" =~ ^[0-9]+$ ]]; then
  echo "error: DEVICE_ID must be a non-negative integer, got '$DEVICE_ID'" >&2
  usage
  exit 1
fi
if [ -z "${PYTHON:-}" ]; then
  if [ -x "$ROOT/.venv/bin/python" ]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi

step() {  # step <name> <log> <command...>: run, log, and stop with a pointer to the log on failure
  local name="$1" log="$2"
  shift 2
  echo "== $name (log: $log)"
  if ! "$@" > "$log" 2>&1; then
    tail -n 5 "$log" >&2
    echo "error: $name failed, see $log" >&2
    exit 1
  fi
}

