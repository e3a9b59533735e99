#!/bin/bash
# Trains an NFNet on one GPU device: train.py with CONFIG_PATH, --device_target GPU --device_id DEVICE_ID
# and any further --key value overrides.
#
#   bash scripts/run_standalone_train_gpu.sh [DEVICE_ID] [CONFIG_PATH] [--key value ...]
#
# Writes RUN_DIR/logs/train.log (the console) and RUN_DIR/output (train.py's run directory);
# RUN_DIR defaults to ./runs/train_gpu-<date>-<time> (see scripts/launch_common.sh).
set -euo pipefail
# shellcheck source=scripts/script_help.sh
source "$(dirname "${BASH_SOURCE[0]}")/script_help.sh"
show_help_if_asked "${BASH_SOURCE[0]}" "$@"

usage() {
  print_usage "[DEVICE_ID] [CONFIG_PATH] [--key value ...]"
}
if [ $# -lt 2 ]; then
  usage
  exit 1
fi
# shellcheck source=scripts/launch_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/launch_common.sh"

DEVICE_ID="$(non_negative_int "$1" DEVICE_ID)"
CONFIG_PATH="$(existing_file "$2" CONFIG_PATH)"
shift 2
refuse_other_device GPU run_standalone_train_cpu.sh "$@"
make_run_dir train_gpu
run_logged "$RUN_DIR/logs/train.log" \
  "$PYTHON" "$ROOT/train.py" --config "$CONFIG_PATH" --device_target GPU --device_id "$DEVICE_ID" \
  --output_dir "$RUN_DIR/output" "$@"
