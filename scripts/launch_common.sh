#!/bin/bash
# Shared by the run_standalone_train_*, run_distribute_train_* and run_eval_* scripts (sourced,
# not run). The sourcing script defines usage() and checks its argument count first; this file
# resolves ROOT and PYTHON and offers checks: a bad argument prints the usage and exits 1
# (bad_argument), a bad environment setting one `error:` line naming it and exits 2 (bad_setting),
# both before any process starts.
#
#   RUN_DIR  run directory (default: ./runs/<kind>-<JOB_ID>, or ./runs/<kind>-<date>-<time>
#            without a JOB_ID): logs/ holds the launcher's logs, output/ is train.py's output_dir
#            (checkpoints, train.log, metrics, curves). train.py's rank 0 decides on it for every
#            rank: an output/ left by an earlier run with the same RUN_DIR is continued with
#            --resume auto, else output-1/ is used
#   JOB_ID   a name all nodes of one job share (default: $SLURM_JOB_ID when set), so that they
#            agree on the run directory's name without a shared clock
#   PYTHON   interpreter (default: the repository's .venv, else python3)
# shellcheck disable=SC2034  # ROOT, PYTHON and RUN_DIR are used by the scripts that source this file

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ -z "${PYTHON:-}" ]; then
  if [ -x "$ROOT/.venv/bin/python" ]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi

bad_argument() {  # bad_argument <message>: the message, the usage, exit 1
  echo "error: $1" >&2
  usage
  exit 1
}

bad_setting() {  # bad_setting <message>: one error line (an environment setting), exit 2
  echo "error: $1" >&2
  exit 2
}

int_setting() {  # int_setting <value> <name> <min> <max>: the value (decimal) when an integer in [min, max]
  if ! [[ "$1" =~ ^[0-9]{1,9}$ ]] || [ "$((10#$1))" -lt "$3" ] || [ "$((10#$1))" -gt "$4" ]; then
    bad_setting "$2 must be an integer in [$3, $4], got '$1'"
  fi
  echo "$((10#$1))"
}

existing_file() {  # existing_file <path> <name>: its absolute path
  [ -f "$1" ] || bad_argument "$2 not found: $1"
  realpath -- "$1"
}

non_negative_int() {  # non_negative_int <value> <name>
  [[ "$1" =~ ^[0-9]+$ ]] || bad_argument "$2 must be a non-negative integer, got '$1'"
  echo "$1"
}

positive_int() {  # positive_int <value> <name>
  [[ "$1" =~ ^[1-9][0-9]*$ ]] || bad_argument "$2 must be a positive integer, got '$1'"
  echo "$1"
}

arg_value() {  # arg_value <--flag> <args...>: the value of the last <--flag> among args (--flag v or --flag=v), or ""
  local flag="$1" previous="" arg value=""
  shift
  for arg in "$@"; do
    case "$arg" in
      "$flag"=*) value="${arg#*=}" ;;
      *) if [ "$previous" = "$flag" ]; then value="$arg"; fi ;;
    esac
    previous="$arg"
  done
  printf '%s' "$value"
}

config_value() {  # config_value <config> <key>: the YAML's value of <key>, or one error line and exit 2
  "$PYTHON" -c 'import sys; sys.path.insert(0, sys.argv[1])
from src.config import UserError, load_config
try:
    print(getattr(load_config(sys.argv[2]), sys.argv[3]))
except UserError as exc:
    sys.exit(f"error: {exc}")' "$ROOT" "$1" "$2" || exit 2
}

refuse_other_device() {  # refuse_other_device <device> <launcher for CPU> <args...>: the overrides may not move
  # this launcher's run to another device (it passes --device_target <device>; a later one would win)
  local device="$1" cpu_launcher="$2" previous="" arg value
  shift 2
  for arg in "$@"; do
    value=""
    case "$arg" in
      --device_target=*) value="${arg#*=}" ;;
      *) if [ "$previous" = --device_target ]; then value="$arg"; fi ;;
    esac
    if [ -n "$value" ] && [ "$value" != "$device" ]; then
      bad_setting "$(basename "$0") runs on $device, not --device_target $value: on the CPU use scripts/$cpu_launcher"
    fi
    previous="$arg"
  done
}

require_ascend() {  # require_ascend <launcher for CPU>: stop before any process or folder when no Ascend driver is here
  # /dev/davinci_manager: the node the Ascend driver creates on the host (and maps into containers)
  if [ ! -e "${ASCEND_DEVICE_NODE:-/dev/davinci_manager}" ]; then
    bad_setting "no Ascend device on this machine (${ASCEND_DEVICE_NODE:-/dev/davinci_manager} is missing: no Ascend driver): $(basename "$0") runs train.py on Ascend devices; on the CPU use scripts/$1"
  fi
}

make_run_dir() {  # make_run_dir <kind>: sets RUN_DIR (absolute) and creates RUN_DIR/logs
  local job="${JOB_ID:-${SLURM_JOB_ID:-}}"
  if [ -z "${RUN_DIR:-}" ]; then RUNS_PARENT="$(pwd)/runs"; fi
  RUN_DIR="${RUN_DIR:-$(pwd)/runs/$1-${job:-$(date +%Y%m%d-%H%M%S)}}"
  if [ ! -e "$RUN_DIR" ]; then RUN_DIR_CREATED=1; fi
  mkdir -p "$RUN_DIR/logs"
  RUN_DIR="$(realpath -- "$RUN_DIR")"
  echo "run directory: $RUN_DIR"
}

console_lines() {  # stdin to stdout without MindSpore's report of dataset workers ended by a SIGTERM / Ctrl-C
  # (the stop train.py asked for: it writes a checkpoint and says so); other signals (Killed: the OOM killer,
  # a segfault) and every other line pass. The logs keep everything.
  grep --line-buffered -v -E '^\[(ERROR|WARNING)\] MD\(.*SIGCHLDHandler\] (Dataset worker process [0-9]+ was killed by signal: (Terminated|Interrupt)|Main process may not respond to the SIGTERM signal)' || true
}

run_logged() {  # run_logged <log> <command...>: run with its output on the console (console_lines) and in <log>
  local log="$1" status=0
  shift
  echo "log: $log"
  "$@" 2>&1 | tee "$log" | console_lines || status=${PIPESTATUS[0]}
  if [ "$status" -ne 0 ]; then
    if [ -n "${RUNS_PARENT:-}" ] && [ "${RUN_DIR_CREATED:-0}" = 1 ] && [ "$(find "$RUN_DIR" -mindepth 1 | wc -l)" -le 2 ]; then
      # a default run directory refused before anything was written (its one line is above): not left behind
      # (a RUN_DIR the user named keeps its log)
      rm -rf "$RUN_DIR"
      if [ -n "${RUNS_PARENT:-}" ]; then rmdir "$RUNS_PARENT" 2> /dev/null || true; fi  # ./runs, if now empty
      echo "error: exit status $status (nothing was written; $RUN_DIR removed)" >&2
      exit "$status"
    fi
    echo "error: exit status $status, see $log" >&2
    exit "$status"
  fi
  echo "done: $log"
}
