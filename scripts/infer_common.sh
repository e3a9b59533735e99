#!/bin/bash
# Shared by run_infer_310.sh, run_infer_cpu.sh and run_infer_onnx.sh (sourced, not run): checks
# and resolves [OPTIONS] [MODEL_PATH] [DATASET_NAME] [DATASET_PATH] [DEVICE_ID(optional)] into
# absolute MINDIR_PATH (the model, whatever its format), DATASET_PATH and CONFIG, DEVICE_ID, ROOT,
# OUT_DIR and PYTHON, before any cd; prints the usage and exits 1 on a wrong argument.
# OPTIONS are --name=value (or --name value) for the names in $INFER_OPTIONS, set by the sourcing
# script (e.g. "device_type precision_mode"); each sets the upper-case variable of its name.
# MODEL_LABEL (default MINDIR_PATH) names the model argument in messages. Defines step(),
# count_images(), model_value() and check_labels() for the pipeline's steps.
# shellcheck disable=SC2034  # the variables are used by the scripts that source this file

MODEL_LABEL="${MODEL_LABEL:-MINDIR_PATH}"
INFER_OPTIONS="${INFER_OPTIONS:-}"

usage() {
  local options="" name
  for name in $INFER_OPTIONS; do
    options+="[--$name=<value>] "
  done
  print_usage "${options}[$MODEL_LABEL] [DATASET_NAME] [DATASET_PATH] [DEVICE_ID(optional)]"
  echo "  DATASET_NAME: imagenet (or the seed's imagenet2012) | digits: the config of the data's defaults;" \
       "the model's <model>.json (export.py) gives its class count and transform" >&2
}

while [ $# -gt 0 ] && [[ "$1" == --* ]]; do
  option="${1#--}" value=""
  if [[ "$option" == *=* ]]; then
    value="${option#*=}" option="${option%%=*}"
  elif [ $# -ge 2 ]; then
    value="$2"
    shift
  fi
  if [[ " $INFER_OPTIONS " != *" $option "* ]]; then
    echo "error: unknown option --$option${INFER_OPTIONS:+ (options: $INFER_OPTIONS)}" >&2
    usage
    exit 1
  fi
  if [ -z "$value" ]; then
    echo "error: --$option needs a value" >&2
    usage
    exit 1
  fi
  printf -v "${option^^}" '%s' "$value"
  shift
done

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

MINDIR_PATH="$(absolute file "$1" "$MODEL_LABEL")"
DATASET_NAME="$2"
DATASET_PATH="$(absolute dir "$3" DATASET_PATH)"
DEVICE_ID="${4:-0}"
case "$DATASET_NAME" in
  imagenet | imagenet2012) CONFIG="$ROOT/src/configs/dm_nfnet_f0.yaml" ;;
  digits) CONFIG="$ROOT/src/configs/dm_nfnet_nano_digits.yaml" ;;
  *) echo "error: DATASET_NAME must be imagenet (or imagenet2012) or digits, got '$DATASET_NAME'" >&2; usage; exit 1 ;;
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

step() {  # step <name> <log> <command...>: run, log, and stop with the cause and a pointer to the log on failure
  local name="$1" log="$2"
  shift 2
  echo "== $name (log: $log)"
  if ! "$@" > "$log" 2>&1; then
    # the cause: the step's own `error:` lines (a runtime's log lines can bury them), else the log's end
    grep '^error: ' "$log" >&2 || tail -n 5 "$log" >&2
    echo "error: $name failed, see $log" >&2
    exit 1
  fi
}

count_images() {  # count_images <labels.json>: the real images preprocess.py wrote (padding excluded)
  "$PYTHON" -c 'import json, sys
labels = json.load(open(sys.argv[1], encoding="utf-8"))
print(sum(len(v) if isinstance(v, list) else 1 for v in labels.values()))' "$1"
}

model_value() {  # model_value <key>: <key> of the model: its <model>.json (export.py's record), else $CONFIG's
  PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -c 'import sys
from src.deploy.cli import print_model_value
from src.errors import run_cli
run_cli(print_model_value, *sys.argv[1:])' "$CONFIG" "$MINDIR_PATH" "$1"
}

check_labels() {  # check_labels <labels.json> <num_classes>: refuse, before inference, labels the model cannot score
  PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -c 'import sys
from src.deploy.cli import check_label_range
from src.errors import run_cli
run_cli(check_label_range, *sys.argv[1:])' "$1" "$2" "$MINDIR_PATH"
}

python_flow() {  # python_flow <--mindir_path|--onnx_path>: preprocess -> src.deploy.infer_cpu -> postprocess
  local num_classes
  num_classes="$(model_value num_classes)" || exit 1
  rm -rf "$OUT_DIR/preprocess_Result" "$OUT_DIR/result_Files" "$OUT_DIR/time_Result" "$OUT_DIR/acc.json"
  local settings=()  # the data settings export.py wrote beside the model (src/data/data_settings.py)
  [ -f "$MINDIR_PATH.json" ] && settings=(--model "$MINDIR_PATH")
  step preprocess "$OUT_DIR/preprocess.log" \
    "$PYTHON" "$ROOT/preprocess.py" --config "$CONFIG" "${settings[@]}" --data_path "$DATASET_PATH" \
    --output_path "$OUT_DIR/preprocess_Result"
  check_labels "$OUT_DIR/preprocess_Result/labels.json" "$num_classes" || exit 1
  step inference "$OUT_DIR/infer.log" \
    env PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m src.deploy.infer_cpu \
    "$1" "$MINDIR_PATH" --input_path "$OUT_DIR/preprocess_Result/images" \
    --result_path "$OUT_DIR/result_Files" --time_path "$OUT_DIR/time_Result" \
    --num_images "$(count_images "$OUT_DIR/preprocess_Result/labels.json")"
  step postprocess "$OUT_DIR/acc.log" \
    "$PYTHON" "$ROOT/postprocess.py" --result_path "$OUT_DIR/result_Files" \
    --label_path "$OUT_DIR/preprocess_Result/labels.json" --output "$OUT_DIR/acc.json" --num_classes "$num_classes"
  cat "$OUT_DIR/time_Result/test_perform_static.txt"
  cat "$OUT_DIR/acc.log"
}
