#!/bin/bash
# Runs an exported MINDIR with the C++ app (ascend310_infer/) over a validation folder and reports
# its accuracy:
#   preprocess.py (the eval transform of src/data) -> ascend310_infer/build.sh -> the C++ app
#   -> postprocess.py -> acc.log
# run_infer_cpu.sh and run_infer_onnx.sh are the same flow in Python; all score the same .bin
# files the same way.
#
#   bash scripts/run_infer_310.sh [--device_type=Ascend310] [--precision_mode=preferred_fp32] \
#       [MINDIR_PATH] [DATASET_NAME] [DATASET_PATH] [DEVICE_ID(optional)]
#
# --device_type: Ascend (default), Ascend310, Ascend310P, Ascend910 (all through AscendDeviceInfo),
# GPU, or CPU (MindSpore Lite's CPUDeviceInfo: the same app on a CPU server). --precision_mode
# (Ascend only, AscendDeviceInfo::SetPrecisionMode): preferred_fp32 (default: float32 wherever the
# chip has a float32 kernel, the closest to eval.py), enforce_fp32, enforce_origin,
# preferred_optimal, enforce_fp16 (fastest; the 310's own default); docs/deployment.md gives the
# cost of each. DATASET_NAME (imagenet or the seed's imagenet2012 | digits) selects the config of the
# data's defaults (src/configs/dm_nfnet_f0.yaml | dm_nfnet_nano_digits.yaml; NFNET_CONFIG=<yaml>
# overrides it); the model's <model>.json (export.py) gives its class count and transform. DATASET_PATH is the
# validation folder of class folders (or a dataset root holding val/). DEVICE_ID defaults to 0.
# Results go to the current folder: preprocess_Result/, result_Files/, time_Result/, acc.log,
# acc.json. INFER_APP=<built app> skips the build; otherwise build.sh builds it into
# BUILD_DIR (default ascend310_infer/out), finding MindSpore Lite through LITE_HOME or
# MINDSPORE_PATH, or as the mindspore_lite package of LITE_PYTHON (an interpreter with
# `pip install mindspore-lite`; default: PYTHON). PYTHON selects the interpreter of the Python
# steps (default: the repository's .venv, else python3). The app finds the runtime's libraries by
# its RPATH (no LD_LIBRARY_PATH needed). A MINDIR from a newer MindSpore than the runtime stops
# with one error line naming both and the ONNX -> converter_lite route (docs/deployment.md).
set -euo pipefail
# shellcheck source=scripts/script_help.sh
source "$(dirname "${BASH_SOURCE[0]}")/script_help.sh"
show_help_if_asked "${BASH_SOURCE[0]}" "$@"

INFER_OPTIONS="device_type precision_mode"
DEVICE_TYPE="${DEVICE_TYPE:-Ascend}"
PRECISION_MODE="${PRECISION_MODE:-preferred_fp32}"
# shellcheck source=scripts/infer_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/infer_common.sh"
if [ -n "${INFER_APP:-}" ]; then
  INFER_APP="$(absolute file "$INFER_APP" INFER_APP)"
fi
case "$DEVICE_TYPE" in
  Ascend | Ascend310 | Ascend310P | Ascend910 | GPU | CPU) ;;
  *) echo "error: --device_type must be Ascend, Ascend310, Ascend310P, Ascend910, GPU or CPU, got '$DEVICE_TYPE'" >&2
     exit 1 ;;
esac
case "$PRECISION_MODE" in
  preferred_fp32 | enforce_fp32 | enforce_origin | preferred_optimal | enforce_fp16) ;;
  *) echo "error: --precision_mode must be preferred_fp32, enforce_fp32, enforce_origin, preferred_optimal or" \
          "enforce_fp16, got '$PRECISION_MODE'" >&2
     exit 1 ;;
esac

echo "mindir: $MINDIR_PATH"
echo "dataset: $DATASET_NAME $DATASET_PATH (config $CONFIG)"
if [[ "$DEVICE_TYPE" == Ascend* ]]; then
  echo "device: $DEVICE_TYPE $DEVICE_ID, precision_mode $PRECISION_MODE"
else
  echo "device: $DEVICE_TYPE $DEVICE_ID"
fi
NUM_CLASSES="$(model_value num_classes)" || exit 1

# the app first: a machine without the MindSpore C++ API learns it before the whole split is preprocessed
if [ -z "${INFER_APP:-}" ]; then
  BUILD_DIR="${BUILD_DIR:-$ROOT/ascend310_infer/out}"
  step build "$OUT_DIR/build.log" env PYTHON="${LITE_PYTHON:-$PYTHON}" BUILD_DIR="$BUILD_DIR" \
    bash "$ROOT/ascend310_infer/build.sh"
  INFER_APP="$BUILD_DIR/main"
fi
rm -rf "$OUT_DIR/preprocess_Result" "$OUT_DIR/result_Files" "$OUT_DIR/time_Result" "$OUT_DIR/acc.json"
settings=()  # the data settings export.py wrote beside the model (src/data/data_settings.py)
[ -f "$MINDIR_PATH.json" ] && settings=(--model "$MINDIR_PATH")
step preprocess "$OUT_DIR/preprocess.log" \
  "$PYTHON" "$ROOT/preprocess.py" --config "$CONFIG" "${settings[@]}" --data_path "$DATASET_PATH" \
  --output_path "$OUT_DIR/preprocess_Result"
check_labels "$OUT_DIR/preprocess_Result/labels.json" "$NUM_CLASSES" || exit 1
step inference "$OUT_DIR/infer.log" \
  "$INFER_APP" --mindir_path="$MINDIR_PATH" --input_path="$OUT_DIR/preprocess_Result/images" \
  --result_path="$OUT_DIR/result_Files" --time_path="$OUT_DIR/time_Result" \
  --device_type="$DEVICE_TYPE" --device_id="$DEVICE_ID" --precision_mode="$PRECISION_MODE" \
  --num_classes="$NUM_CLASSES" --num_images="$(count_images "$OUT_DIR/preprocess_Result/labels.json")"
step postprocess "$OUT_DIR/acc.log" \
  "$PYTHON" "$ROOT/postprocess.py" --result_path "$OUT_DIR/result_Files" \
  --label_path "$OUT_DIR/preprocess_Result/labels.json" --output "$OUT_DIR/acc.json" --num_classes "$NUM_CLASSES"
cat "$OUT_DIR/time_Result/test_perform_static.txt"
cat "$OUT_DIR/acc.log"
