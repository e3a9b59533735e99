#!/bin/bash
# Trains an NFNet on the CPU in one process: train.py with CONFIG_PATH, --device_target CPU and any
# further --key value overrides.
#
#   bash scripts/run_standalone_train_cpu.sh [CONFIG_PATH] [--key value ...]
#
# Writes RUN_DIR/logs/train.log (the console) and RUN_DIR/output (train.py's run directory);
# RUN_DIR defaults to ./runs/train_cpu-<date>-<time> (see scripts/launch_common.sh).
set -euo pipefail
# shellcheck source=scripts/script_help.sh
source "$(dirname "${BASH_SOURCE[0]}")/script_help.sh"
show_help_if_asked "${BASH_SOURCE[0]}" "$@"

usage() {
  print_usage "[CONFIG_PATH] [--key value ...]"
}
if [ $# -lt 1 ]; then
  usage
  exit 1
fi
# shellcheck source=scripts/launch_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/launch_common.sh"

CONFIG_PATH="$(existing_file "$1" CONFIG_PATH)"
shift
make_run_dir train_cpu
run_logged "$RUN_DIR/logs/train.log" \
  "$PYTHON" "$ROOT/train.py" --config "$CONFIG_PATH" --device_target CPU --output_dir "$RUN_DIR/output" "$@"
