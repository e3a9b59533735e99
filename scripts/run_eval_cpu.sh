#!/bin/bash
# Evaluates CHECKPOINT_PATH on the validation split on the CPU: eval.py with CONFIG_PATH,
# --device_target CPU and any further --key value overrides.
#
#   bash scripts/run_eval_cpu.sh [CONFIG_PATH] [CHECKPOINT_PATH] [--key value ...]
#
# Writes RUN_DIR/logs/eval.log (the console) and RUN_DIR/eval.json (the metrics);
# RUN_DIR defaults to ./runs/eval_cpu-<date>-<time> (see scripts/launch_common.sh).
set -euo pipefail
# shellcheck source=scripts/script_help.sh
source "$(dirname "${BASH_SOURCE[0]}")/script_help.sh"
show_help_if_asked "${BASH_SOURCE[0]}" "$@"

usage() {
  print_usage "[CONFIG_PATH] [CHECKPOINT_PATH] [--key value ...]"
}
if [ $# -lt 2 ]; then
  usage
  exit 1
fi
# shellcheck source=scripts/launch_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/launch_common.sh"

CONFIG_PATH="$(existing_file "$1" CONFIG_PATH)"
CHECKPOINT_PATH="$(existing_file "$2" CHECKPOINT_PATH)"
shift 2
make_run_dir eval_cpu
run_logged "$RUN_DIR/logs/eval.log" \
  "$PYTHON" "$ROOT/eval.py" --config "$CONFIG_PATH" --device_target CPU \
  --checkpoint "$CHECKPOINT_PATH" --output "$RUN_DIR/eval.json" "$@"
