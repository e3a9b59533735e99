#!/bin/bash
# Runs an exported MINDIR on CPU over a validation folder and reports its accuracy:
#   preprocess.py (the eval transform of src/data) -> src.deploy.infer_cpu (mindspore.load +
#   nn.GraphCell) -> postprocess.py -> acc.log
# The same flow and files as run_infer_310.sh, with MindSpore's Python API instead of the C++ app.
#
#   bash scripts/run_infer_cpu.sh [MINDIR_PATH] [DATASET_NAME] [DATASET_PATH] [DEVICE_ID(optional)]
#
# DATASET_NAME (imagenet | digits) selects the config (src/configs/dm_nfnet_f0.yaml |
# dm_nfnet_nano_digits.yaml; NFNET_CONFIG=<yaml> overrides it, e.g. for F1-F6). DATASET_PATH is
# the validation folder of class folders (or a dataset root holding val/). DEVICE_ID is accepted
# for symmetry with run_infer_310.sh and not used on CPU. Results go to the current folder:
# preprocess_Result/, result_Files/, time_Result/, acc.log, acc.json. PYTHON selects the
# interpreter (default: the repository's .venv, else python3).
set -euo pipefail
# shellcheck source=scripts/script_help.sh
source "$(dirname "${BASH_SOURCE[0]}")/script_help.sh"
show_help_if_asked "${BASH_SOURCE[0]}" "$@"

# shellcheck source=scripts/infer_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/infer_common.sh"

echo "mindir: $MINDIR_PATH"
echo "dataset: $DATASET_NAME $DATASET_PATH (config $CONFIG)"
if [ $# -eq 4 ]; then
  echo "note: DEVICE_ID $DEVICE_ID is not used on CPU"
fi

rm -rf "$OUT_DIR/preprocess_Result" "$OUT_DIR/result_Files" "$OUT_DIR/time_Result"
step preprocess "$OUT_DIR/preprocess.log" \
  "$PYTHON" "$ROOT/preprocess.py" --config "$CONFIG" --data_path "$DATASET_PATH" \
  --output_path "$OUT_DIR/preprocess_Result"
step inference "$OUT_DIR/infer.log" \
  env PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m src.deploy.infer_cpu \
  --mindir_path "$MINDIR_PATH" --input_path "$OUT_DIR/preprocess_Result/images" \
  --result_path "$OUT_DIR/result_Files" --time_path "$OUT_DIR/time_Result" --device_target CPU
step postprocess "$OUT_DIR/acc.log" \
  "$PYTHON" "$ROOT/postprocess.py" --result_path "$OUT_DIR/result_Files" \
  --label_path "$OUT_DIR/preprocess_Result/labels.json" --output "$OUT_DIR/acc.json"
cat "$OUT_DIR/time_Result/test_perform_static.txt"
cat "$OUT_DIR/acc.log"
