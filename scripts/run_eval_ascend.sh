#!/bin/bash
# Evaluates CHECKPOINT_PATH on the validation split on one Ascend device: eval.py with CONFIG_PATH,
# --device_target Ascend --device_id DEVICE_ID and any further --key value overrides.
#
#   bash scripts/run_eval_ascend.sh [DEVICE_ID] [CONFIG_PATH] [CHECKPOINT_PATH] [--key value ...]
#
# Writes RUN_DIR/logs/eval.log (the console) and RUN_DIR/eval.json (the metrics);
# RUN_DIR defaults to ./runs/eval_ascend-<date>-<time> (see scripts/launch_common.sh).
set -euo pipefail
# shellcheck source=scripts/script_help.sh
source "$(dirname "${BASH_SOURCE[0]}")/script_help.sh"
show_help_if_asked "${BASH_SOURCE[0]}" "$@"

usage() {
  print_usage "[DEVICE_ID] [CONFIG_PATH] [CHECKPOINT_PATH] [--key value ...]"
}
if [ $# -lt 3 ]; then
  usage
  exit 1
fi
# shellcheck source=scripts/launch_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/launch_common.sh"

DEVICE_ID="$(non_negative_int "$1" DEVICE_ID)"
CONFIG_PATH="$(existing_file "$2" CONFIG_PATH)"
CHECKPOINT_PATH="$(existing_file "$3" CHECKPOINT_PATH)"
shift 3
refuse_other_device Ascend run_eval_cpu.sh "$@"
require_ascend run_eval_cpu.sh
make_run_dir eval_ascend
run_logged "$RUN_DIR/logs/eval.log" \
  "$PYTHON" "$ROOT/eval.py" --config "$CONFIG_PATH" --device_target Ascend --device_id "$DEVICE_ID" \
  --checkpoint "$CHECKPOINT_PATH" --output "$RUN_DIR/eval.json" "$@"
