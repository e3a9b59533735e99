#!/bin/bash
# Data-parallel training on GPUs with OpenMPI: mpirun starts DEVICE_NUM train.py processes with
# CONFIG_PATH, --device_target GPU and the further --key value overrides (train.py detects the
# launch from OMPI_COMM_WORLD_SIZE; NCCL all-reduces the gradients).
#
#   bash scripts/run_distribute_train_gpu.sh [DEVICE_NUM] [CONFIG_PATH] [--key value ...]
#
# Environment: CUDA_VISIBLE_DEVICES selects the GPUs; HOSTFILE (an OpenMPI hostfile) spreads
# DEVICE_NUM processes over several machines.
# Writes RUN_DIR/logs/mpirun.log (the launcher), RUN_DIR/logs/mpirun/ (one log per rank) and
# RUN_DIR/output (train.py's run directory); RUN_DIR defaults to ./runs/train_gpu_<n>p-<date>-<time>.
set -euo pipefail
# shellcheck source=scripts/script_help.sh
source "$(dirname "${BASH_SOURCE[0]}")/script_help.sh"
show_help_if_asked "${BASH_SOURCE[0]}" "$@"

usage() {
  print_usage "[DEVICE_NUM] [CONFIG_PATH] [--key value ...]"
  echo "  environment: CUDA_VISIBLE_DEVICES, HOSTFILE" >&2
}
if [ $# -lt 2 ]; then
  usage
  exit 1
fi
# shellcheck source=scripts/launch_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/launch_common.sh"

DEVICE_NUM="$(positive_int "$1" DEVICE_NUM)"
CONFIG_PATH="$(existing_file "$2" CONFIG_PATH)"
shift 2
HOST_ARGS=()
if [ -n "${HOSTFILE:-}" ]; then
  HOST_ARGS=(--hostfile "$(existing_file "$HOSTFILE" HOSTFILE)")
fi
refuse_other_device GPU run_distribute_train_msrun.sh "$@"
command -v mpirun > /dev/null || bad_argument "mpirun not found: install OpenMPI"
make_run_dir "train_gpu_${DEVICE_NUM}p"

run_logged "$RUN_DIR/logs/mpirun.log" \
  mpirun -n "$DEVICE_NUM" --allow-run-as-root "${HOST_ARGS[@]}" --output-filename "$RUN_DIR/logs/mpirun" \
  --merge-stderr-to-stdout -x PATH \
  "$PYTHON" "$ROOT/train.py" --config "$CONFIG_PATH" --device_target GPU --output_dir "$RUN_DIR/output" "$@"
