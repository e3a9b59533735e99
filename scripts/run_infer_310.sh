#!/bin/bash
# Runs an exported MINDIR on Ascend 310 over a validation folder and reports its accuracy:
#   preprocess.py (the eval transform of src/data) -> ascend310_infer/build.sh -> the C++ app
#   -> postprocess.py -> acc.log
# run_infer_cpu.sh is the same flow on CPU; both score the same .bin files the same way.
#
#   bash scripts/run_infer_310.sh [MINDIR_PATH] [DATASET_NAME] [DATASET_PATH] [DEVICE_ID(optional)]
#
# DATASET_NAME (imagenet | digits) selects the config (src/configs/dm_nfnet_f0.yaml |
# dm_nfnet_nano_digits.yaml; NFNET_CONFIG=<yaml> overrides it, e.g. for F1-F6). DATASET_PATH is
# the validation folder of class folders (or a dataset root holding val/). DEVICE_ID defaults
# to 0. Results go to the current folder: preprocess_Result/, result_Files/, time_Result/,
# acc.log, acc.json. INFER_APP=<built app> skips the build; DEVICE_TYPE=GPU|CPU runs the app on
# another MindSpore backend; PYTHON selects the interpreter (default: the repository's .venv,
# else python3).
set -euo pipefail
# shellcheck source=scripts/script_help.sh
source "$(dirname "${BASH_SOURCE[0]}")/script_help.sh"
show_help_if_asked "${BASH_SOURCE[0]}" "$@"

# shellcheck source=scripts/infer_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/infer_common.sh"
if [ -n "${INFER_APP:-}" ]; then
  INFER_APP="$(absolute file "$INFER_APP" INFER_APP)"
fi
DEVICE_TYPE="${DEVICE_TYPE:-Ascend}"

echo "mindir: $MINDIR_PATH"
echo "dataset: $DATASET_NAME $DATASET_PATH (config $CONFIG)"
echo "device: $DEVICE_TYPE $DEVICE_ID"

rm -rf "$OUT_DIR/preprocess_Result" "$OUT_DIR/result_Files" "$OUT_DIR/time_Result"
step preprocess "$OUT_DIR/preprocess.log" \
  "$PYTHON" "$ROOT/preprocess.py" --config "$CONFIG" --data_path "$DATASET_PATH" \
  --output_path "$OUT_DIR/preprocess_Result"
if [ -z "${INFER_APP:-}" ]; then
  step build "$OUT_DIR/build.log" env PYTHON="$PYTHON" bash "$ROOT/ascend310_infer/build.sh"
  INFER_APP="$ROOT/ascend310_infer/out/main"
fi
step inference "$OUT_DIR/infer.log" \
  "$INFER_APP" --mindir_path="$MINDIR_PATH" --input_path="$OUT_DIR/preprocess_Result/images" \
  --result_path="$OUT_DIR/result_Files" --time_path="$OUT_DIR/time_Result" \
  --device_type="$DEVICE_TYPE" --device_id="$DEVICE_ID"
step postprocess "$OUT_DIR/acc.log" \
  "$PYTHON" "$ROOT/postprocess.py" --result_path "$OUT_DIR/result_Files" \
  --label_path "$OUT_DIR/preprocess_Result/labels.json" --output "$OUT_DIR/acc.json"
cat "$OUT_DIR/time_Result/test_perform_static.txt"
cat "$OUT_DIR/acc.log"
