#!/bin/bash
# Data-parallel training with MindSpore's msrun (dynamic cluster) on any device target:
# WORKER_NUM processes run train.py with CONFIG_PATH and the further --key value overrides
# (e.g. --device_target CPU); train.py detects the launch (MS_WORKER_NUM), shards the data by
# rank and averages the gradients over all workers.
#
#   bash scripts/run_distribute_train_msrun.sh [WORKER_NUM] [CONFIG_PATH] [--key value ...]
#
# WORKER_NUM is the total over all nodes. Environment (defaults for one node):
#   LOCAL_WORKER_NUM  workers started on this node (default WORKER_NUM)
#   MASTER_ADDR       address of the node that runs the scheduler (default 127.0.0.1)
#   MASTER_PORT       scheduler port, the same on every node (default 8118)
#   NODE_RANK         index of this node (default: unset, ranks assigned in join order)
#   CLUSTER_TIMEOUT   seconds to wait for all workers to join (default 600)
#   ENTRY_SCRIPT      the Python script each worker runs (default train.py; eval.py with
#                     --checkpoint PATH evaluates a checkpoint sharded over the workers)
# Multi-node: run the same command on every node with the same WORKER_NUM, MASTER_ADDR and
# MASTER_PORT, and LOCAL_WORKER_NUM / NODE_RANK set per node.
# A worker that fails (killed, or exiting non-zero) ends the job at once: msrun kills the other workers,
# this script stops msrun's scheduler and prints one line naming the worker, its exit status or signal,
# its last `error:` line and its log; the exit status is the worker's (128 + signal when killed).
# Writes RUN_DIR/logs/msrun.log (the launcher), RUN_DIR/logs/msrun/{scheduler,worker_<rank>}.log
# and RUN_DIR/output (train.py's run directory: rank 0's files, train_rank<r>.log of the others);
# RUN_DIR defaults to ./runs/train_msrun_<n>p-<date>-<time> (see scripts/launch_common.sh).
set -euo pipefail
# shellcheck source=scripts/script_help.sh
source "$(dirname "${BASH_SOURCE[0]}")/script_help.sh"
show_help_if_asked "${BASH_SOURCE[0]}" "$@"

usage() {
  echo "Usage: bash $0 [WORKER_NUM] [CONFIG_PATH] [--key value ...]" >&2
  echo "  environment: LOCAL_WORKER_NUM, MASTER_ADDR, MASTER_PORT, NODE_RANK, CLUSTER_TIMEOUT, ENTRY_SCRIPT" >&2
}
if [ $# -lt 2 ]; then
  usage
  exit 1
fi
# shellcheck source=scripts/launch_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/launch_common.sh"

WORKER_NUM="$(positive_int "$1" WORKER_NUM)"
CONFIG_PATH="$(existing_file "$2" CONFIG_PATH)"
shift 2
LOCAL_WORKER_NUM="$(positive_int "${LOCAL_WORKER_NUM:-$WORKER_NUM}" LOCAL_WORKER_NUM)"
MASTER_PORT="$(positive_int "${MASTER_PORT:-8118}" MASTER_PORT)"
CLUSTER_TIMEOUT="$(positive_int "${CLUSTER_TIMEOUT:-600}" CLUSTER_TIMEOUT)"
ENTRY_SCRIPT="$(existing_file "${ENTRY_SCRIPT:-$ROOT/train.py}" ENTRY_SCRIPT)"
if [ "$LOCAL_WORKER_NUM" -gt "$WORKER_NUM" ]; then
  bad_argument "LOCAL_WORKER_NUM $LOCAL_WORKER_NUM exceeds WORKER_NUM $WORKER_NUM"
fi
NODE_ARGS=()
if [ -n "${NODE_RANK:-}" ]; then
  NODE_ARGS=(--node_rank "$(non_negative_int "$NODE_RANK" NODE_RANK)")
fi
make_run_dir "$(basename "$ENTRY_SCRIPT" .py)_msrun_${WORKER_NUM}p"

# msrun starts each worker as `python <script>`, the first `python` on PATH: make it $PYTHON
mkdir -p "$RUN_DIR/logs/bin"
printf '#!/bin/sh\nexec %q "$@"\n' "$(command -v "$PYTHON")" > "$RUN_DIR/logs/bin/python"
chmod +x "$RUN_DIR/logs/bin/python"

MSRUN_LOG="$RUN_DIR/logs/msrun.log"
echo "log: $MSRUN_LOG"
env PATH="$RUN_DIR/logs/bin:$PATH" "$PYTHON" -m mindspore.parallel.cluster.run \
  --worker_num "$WORKER_NUM" --local_worker_num "$LOCAL_WORKER_NUM" \
  --master_addr "${MASTER_ADDR:-127.0.0.1}" --master_port "$MASTER_PORT" "${NODE_ARGS[@]}" \
  --cluster_time_out "$CLUSTER_TIMEOUT" --log_dir "$RUN_DIR/logs/msrun" --join True \
  "$ENTRY_SCRIPT" --config "$CONFIG_PATH" --output_dir "$RUN_DIR/output" "$@" > "$MSRUN_LOG" 2>&1 &
MSRUN_PID=$!

# When a worker fails, msrun kills the other workers of this node within a second, then waits for its
# scheduler, which gives up on the lost worker only after the cluster timeout (train.py's cluster_timeout,
# 600 s by default; measured). SIGINT makes msrun kill the scheduler too, at once.
while kill -0 "$MSRUN_PID" 2> /dev/null; do
  if grep -q "exit with exception" "$MSRUN_LOG"; then
    sleep 2
    kill -INT "$MSRUN_PID" 2> /dev/null || true
    break
  fi
  sleep 1
done
STATUS=0
wait "$MSRUN_PID" || STATUS=$?

# msrun logs "Worker process <pid> exit with exception. Error code: <code>"; MindSpore's lines in the
# worker's own log carry its pid, which gives its rank.
FAILED="$(grep -m 1 -o 'Worker process [0-9]* exit with exception. Error code: -\?[0-9]*' "$MSRUN_LOG" || true)"
if [ -n "$FAILED" ]; then
  PID="$(cut -d ' ' -f 3 <<< "$FAILED")"
  CODE="${FAILED##* }"
  WORKER="a worker (pid $PID)" WORKER_LOG="$MSRUN_LOG" DETAIL=""
  for LOG in "$RUN_DIR/logs/msrun"/worker_*.log; do
    if grep -q "($PID," "$LOG" 2> /dev/null; then
      RANK="${LOG##*/worker_}"
      WORKER="worker ${RANK%.log} (pid $PID)" WORKER_LOG="$LOG"
      DETAIL="$(grep '^error: ' "$LOG" | tail -n 1 || true)"
    fi
  done
  if [ "$CODE" -lt 0 ]; then
    if [ "$CODE" -eq -15 ]; then  # how MindSpore ends a worker that lost another one (after cluster_timeout)
      DETAIL=" (SIGTERM: MindSpore stops a worker this way when another worker is lost)"
    fi
    echo "error: $WORKER was killed by signal ${CODE#-}$DETAIL; the other workers were stopped; see $WORKER_LOG" >&2
    exit $(( 128 - CODE ))
  fi
  echo "error: $WORKER exited with status $CODE${DETAIL:+ ($DETAIL)}; the other workers were stopped; see $WORKER_LOG" >&2
  exit "$CODE"
fi
if [ "$STATUS" -ne 0 ]; then
  tail -n 20 "$MSRUN_LOG" >&2
  echo "error: exit status $STATUS, see $MSRUN_LOG" >&2
  exit "$STATUS"
fi
echo "done: $MSRUN_LOG"
