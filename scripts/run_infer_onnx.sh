#!/bin/bash
# Runs an exported ONNX model in ONNX Runtime (CPU) over a validation folder and reports its accuracy:
#   preprocess.py (the eval transform of src/data) -> src.deploy.infer_cpu --onnx_path (ONNX
#   Runtime) -> postprocess.py -> acc.log
# The same flow, .bin files and result files as run_infer_cpu.sh and run_infer_310.sh.
# Needs ONNX Runtime: pip install -r requirements-onnx.txt.
#
#   bash scripts/run_infer_onnx.sh [ONNX_PATH] [DATASET_NAME] [DATASET_PATH] [DEVICE_ID(optional)]
#
# ONNX_PATH: export.py --file_format ONNX (with --dynamic_batch any --batch_size of the .bin files
# runs; without, NFNET_CONFIG's export_batch_size must match it). DATASET_NAME (imagenet | digits)
# selects the config (src/configs/dm_nfnet_f0.yaml | dm_nfnet_nano_digits.yaml; NFNET_CONFIG=<yaml>
# overrides it). DATASET_PATH is the validation folder of class folders (or a dataset root holding
# val/). DEVICE_ID is accepted for symmetry and not used. Results go to the current folder:
# preprocess_Result/, result_Files/, time_Result/, acc.log, acc.json. PYTHON selects the
# interpreter (default: the repository's .venv, else python3).
set -euo pipefail
# shellcheck source=scripts/script_help.sh
source "$(dirname "${BASH_SOURCE[0]}")/script_help.sh"
show_help_if_asked "${BASH_SOURCE[0]}" "$@"

MODEL_LABEL=ONNX_PATH
# shellcheck source=scripts/infer_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/infer_common.sh"

echo "onnx: $MINDIR_PATH"
echo "dataset: $DATASET_NAME $DATASET_PATH (config $CONFIG)"
if [ $# -eq 4 ]; then
  echo "note: DEVICE_ID $DEVICE_ID is not used by ONNX Runtime on CPU"
fi
python_flow --onnx_path
