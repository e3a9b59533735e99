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
python_flow --mindir_path
