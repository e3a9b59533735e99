#!/bin/bash
# Data-parallel training on Ascend with an hccl rank table: one train.py process per device of
# this server, each with RANK_TABLE_FILE, RANK_SIZE, RANK_ID and DEVICE_ID exported (train.py
# detects the launch from RANK_SIZE) and bound to its own slice of the CPU cores.
#
#   bash scripts/run_distribute_train_ascend.sh [RANK_TABLE_FILE] [CONFIG_PATH] [--key value ...]
#
# RANK_TABLE_FILE: hccl json (e.g. from hccl_tools.py); RANK_SIZE is the number of devices
# over all servers, and this server's devices take their device_id / rank_id from it.
# SERVER_ID (default 0) selects this server's entry of server_list on a multi-server table.
# Writes RUN_DIR/logs/train_rank<r>.log (one per process) and RUN_DIR/output (train.py's run
# directory); RUN_DIR defaults to ./runs/train_ascend_<n>p-<date>-<time> (see launch_common.sh).
set -euo pipefail
# shellcheck source=scripts/script_help.sh
source "$(dirname "${BASH_SOURCE[0]}")/script_help.sh"
show_help_if_asked "${BASH_SOURCE[0]}" "$@"

usage() {
  print_usage "[RANK_TABLE_FILE] [CONFIG_PATH] [--key value ...]"
  echo "  environment: SERVER_ID (index in the rank table's server_list, default 0)" >&2
}
if [ $# -lt 2 ]; then
  usage
  exit 1
fi
# shellcheck source=scripts/launch_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/launch_common.sh"

RANK_TABLE_FILE="$(existing_file "$1" RANK_TABLE_FILE)"
CONFIG_PATH="$(existing_file "$2" CONFIG_PATH)"
shift 2
SERVER_ID="$(non_negative_int "${SERVER_ID:-0}" SERVER_ID)"

# "<rank size> <device_id>:<rank_id> ..." of this server
if ! DEVICES="$("$PYTHON" - "$RANK_TABLE_FILE" "$SERVER_ID" 2>&1 <<'PY'
import json, sys
table, server = json.load(open(sys.argv[1])), int(sys.argv[2])
servers = table["server_list"]
size = sum(len(s["device"]) for s in servers)
mine = servers[server]["device"]
print(size, " ".join(f"{int(d['device_id'])}:{int(d['rank_id'])}" for d in mine))
PY
)"; then
  bad_argument "RANK_TABLE_FILE $RANK_TABLE_FILE is not an hccl rank table with server $SERVER_ID: ${DEVICES##*$'\n'}"
fi
read -r RANK_SIZE PAIRS <<< "$DEVICES"
read -r -a PAIRS <<< "$PAIRS"
LOCAL_NUM="${#PAIRS[@]}"
refuse_other_device Ascend run_distribute_train_msrun.sh "$@"
require_ascend run_distribute_train_msrun.sh
make_run_dir "train_ascend_${RANK_SIZE}p"

CORES="$(nproc)"
PER_PROCESS=$(( CORES / LOCAL_NUM > 0 ? CORES / LOCAL_NUM : 1 ))
PIDS=()
for index in "${!PAIRS[@]}"; do
  DEVICE_ID="${PAIRS[$index]%%:*}"
  RANK_ID="${PAIRS[$index]##*:}"
  FIRST=$(( (index * PER_PROCESS) % CORES ))
  LAST=$(( FIRST + PER_PROCESS - 1 ))
  echo "rank $RANK_ID: device $DEVICE_ID, cores $FIRST-$LAST, log $RUN_DIR/logs/train_rank$RANK_ID.log"
  env RANK_TABLE_FILE="$RANK_TABLE_FILE" RANK_SIZE="$RANK_SIZE" RANK_ID="$RANK_ID" DEVICE_ID="$DEVICE_ID" \
    taskset -c "$FIRST-$LAST" "$PYTHON" "$ROOT/train.py" --config "$CONFIG_PATH" --device_target Ascend \
    --device_id "$DEVICE_ID" --output_dir "$RUN_DIR/output" "$@" > "$RUN_DIR/logs/train_rank$RANK_ID.log" 2>&1 &
  PIDS+=("$!")
done
STATUS=0 FAILED_RANK=""
for index in "${!PIDS[@]}"; do
  CODE=0
  wait "${PIDS[$index]}" || CODE=$?
  if [ "$CODE" -ne 0 ] && [ -z "$FAILED_RANK" ]; then
    STATUS="$CODE" FAILED_RANK="${PAIRS[$index]##*:}"
  fi
done
if [ "$STATUS" -ne 0 ]; then
  FAILED_LOG="$RUN_DIR/logs/train_rank$FAILED_RANK.log"
  grep '^error: ' "$FAILED_LOG" | tail -n 1 >&2 || true  # the failing rank's own line
  echo "error: rank $FAILED_RANK failed (exit status $STATUS), see $FAILED_LOG" >&2
  exit "$STATUS"
fi
echo "done: $RUN_DIR"
