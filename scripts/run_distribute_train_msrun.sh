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
#   CLUSTER_TIMEOUT   seconds before the job gives up on a worker that does not join or answer: the
#                     same value goes to msrun and to train.py's cluster_timeout (default: the
#                     --cluster_timeout argument, else the config's cluster_timeout; giving both
#                     with different values is refused)
#   JOB_ID            a name shared by all nodes of the job: RUN_DIR defaults to
#                     ./runs/train_msrun_<device>_<n>p-<JOB_ID> (default $SLURM_JOB_ID; see launch_common.sh)
#   ENTRY_SCRIPT      the Python script each worker runs (default train.py; eval.py with
#                     --checkpoint PATH evaluates a checkpoint sharded over the workers)
# The environment is checked before anything starts (NODE_RANK below WORKER_NUM / LOCAL_WORKER_NUM nodes,
# MASTER_PORT in [1, 65535], LOCAL_WORKER_NUM in [1, WORKER_NUM], CLUSTER_TIMEOUT in [1, 604800]): a bad
# setting is one `error:` line naming it, exit 2.
# Multi-node: run the same command on every node with the same WORKER_NUM, MASTER_ADDR,
# MASTER_PORT and RUN_DIR or JOB_ID, and LOCAL_WORKER_NUM / NODE_RANK set per node. Every node
# creates its own RUN_DIR (no shared filesystem needed): rank 0 writes the checkpoints and train.log
# on its node, rank r its train_rank<r>.log on its own.
# Stopping: SIGTERM or Ctrl-C to this script reaches this node's workers (msrun itself would kill them
# without a checkpoint): all ranks finish the step, rank 0 writes a mid-epoch checkpoint, and this script
# exits 143 (SIGTERM) or 130 (Ctrl-C); continue with --resume auto. A second Ctrl-C stops at once. If this
# script is killed outright, msrun and the workers get SIGTERM from the kernel (setpriv --pdeathsig,
# prctl in train.py) and stop the same way.
# A worker that fails (killed, or exiting non-zero) ends the job at once: msrun kills the other workers,
# this script stops msrun's scheduler and prints one line naming the worker, its exit status or signal,
# its last `error:` line and its log; the exit status is the worker's (128 + signal when killed).
# Writes LOGS/msrun.log (the launcher), LOGS/msrun/{scheduler,worker_<rank>}.log, where LOGS is
# RUN_DIR/logs, or RUN_DIR/logs/node<NODE_RANK> in a job over several nodes (a shared RUN_DIR holds all),
# and RUN_DIR/output (train.py's run directory: rank 0's files, train_rank<r>.log of the others);
# RUN_DIR defaults to ./runs/train_msrun_<device>_<n>p-<JOB_ID or date-time> (see scripts/launch_common.sh), <device>
# the --device_target given, else the config's (cpu, gpu, ascend). Rank 0's output (progress, epoch lines)
# is shown on the console as it is written to its worker log, on the node that runs it.
set -euo pipefail
# shellcheck source=scripts/script_help.sh
source "$(dirname "${BASH_SOURCE[0]}")/script_help.sh"
show_help_if_asked "${BASH_SOURCE[0]}" "$@"

usage() {
  print_usage "[WORKER_NUM] [CONFIG_PATH] [--key value ...]"
  echo "  environment: LOCAL_WORKER_NUM, MASTER_ADDR, MASTER_PORT, NODE_RANK, CLUSTER_TIMEOUT, JOB_ID, RUN_DIR," \
    "ENTRY_SCRIPT" >&2
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
# The environment, checked before anything starts (one error line naming the setting, exit 2).
MAX_WORKERS=100000
if [ "${#WORKER_NUM}" -gt 6 ] || [ "$WORKER_NUM" -gt "$MAX_WORKERS" ]; then
  bad_argument "WORKER_NUM must be at most $MAX_WORKERS, got $WORKER_NUM"
fi
LOCAL_WORKER_NUM="$(int_setting "${LOCAL_WORKER_NUM:-$WORKER_NUM}" LOCAL_WORKER_NUM 1 "$MAX_WORKERS")"
MASTER_PORT="$(int_setting "${MASTER_PORT:-8118}" MASTER_PORT 1 65535)"
ENTRY_SCRIPT="$(existing_file "${ENTRY_SCRIPT:-$ROOT/train.py}" ENTRY_SCRIPT)"
if [ "$LOCAL_WORKER_NUM" -gt "$WORKER_NUM" ]; then
  bad_setting "LOCAL_WORKER_NUM $LOCAL_WORKER_NUM exceeds WORKER_NUM $WORKER_NUM"
fi
if [ "$LOCAL_WORKER_NUM" -lt "$WORKER_NUM" ] && [ -z "${RUN_DIR:-}${JOB_ID:-}${SLURM_JOB_ID:-}" ]; then
  bad_setting "a job over several nodes (LOCAL_WORKER_NUM $LOCAL_WORKER_NUM of WORKER_NUM $WORKER_NUM) needs RUN_DIR or JOB_ID, the same on every node"
fi
# With NODE_RANK, msrun numbers this node's workers NODE_RANK * LOCAL_WORKER_NUM + i: every node runs
# LOCAL_WORKER_NUM of them, and the job has WORKER_NUM / LOCAL_WORKER_NUM nodes.
NODE_ARGS=()
if [ -n "${NODE_RANK:-}" ]; then
  NODES=$(( WORKER_NUM / LOCAL_WORKER_NUM ))
  if [ $(( WORKER_NUM % LOCAL_WORKER_NUM )) -ne 0 ]; then
    bad_setting "WORKER_NUM $WORKER_NUM is not a multiple of LOCAL_WORKER_NUM $LOCAL_WORKER_NUM: with NODE_RANK every node runs LOCAL_WORKER_NUM workers (ranks NODE_RANK * LOCAL_WORKER_NUM + i); unset NODE_RANK to number the workers in join order"
  fi
  NODE_RANK="$(int_setting "$NODE_RANK" NODE_RANK 0 999999999)"
  if [ "$NODE_RANK" -ge "$NODES" ]; then
    if [ "$NODES" -eq 1 ]; then JOB="one node (NODE_RANK 0)"; else JOB="$NODES nodes (NODE_RANK 0 to $(( NODES - 1 )))"; fi
    bad_setting "NODE_RANK $NODE_RANK is not a node of this job: WORKER_NUM $WORKER_NUM with LOCAL_WORKER_NUM $LOCAL_WORKER_NUM per node is $JOB"
  fi
  NODE_ARGS=(--node_rank "$NODE_RANK")
fi

# The one timeout: --cluster_timeout among the arguments, else CLUSTER_TIMEOUT, else the config's value.
ARG_TIMEOUT="$(arg_value --cluster_timeout "$@")"
if [ -n "$ARG_TIMEOUT" ] && [ -n "${CLUSTER_TIMEOUT:-}" ] && [ "$ARG_TIMEOUT" != "$CLUSTER_TIMEOUT" ]; then
  bad_setting "CLUSTER_TIMEOUT $CLUSTER_TIMEOUT differs from --cluster_timeout $ARG_TIMEOUT: give one"
fi
TIMEOUT_ARGS=()
if [ -z "$ARG_TIMEOUT" ]; then
  if [ -z "${CLUSTER_TIMEOUT:-}" ]; then
    CLUSTER_TIMEOUT="$(config_value "$CONFIG_PATH" cluster_timeout)" || exit 2
  fi
  TIMEOUT_ARGS=(--cluster_timeout "$CLUSTER_TIMEOUT")
fi
TIMEOUT_NAME=CLUSTER_TIMEOUT
if [ -n "$ARG_TIMEOUT" ]; then TIMEOUT_NAME=--cluster_timeout; fi
CLUSTER_TIMEOUT="$(int_setting "${ARG_TIMEOUT:-$CLUSTER_TIMEOUT}" "$TIMEOUT_NAME" 1 604800)"
# the device the workers run on, for the run directory's name: the last --device_target given, else the config's
DEVICE="$(arg_value --device_target "$@")"
if [ -z "$DEVICE" ]; then DEVICE="$(config_value "$CONFIG_PATH" device_target)" || exit 2; fi
make_run_dir "$(basename "$ENTRY_SCRIPT" .py)_msrun_$(tr '[:upper:]' '[:lower:]' <<< "$DEVICE")_${WORKER_NUM}p"

# msrun starts each worker as `python <script>`, the first `python` on PATH: make it $PYTHON
LOGS="$RUN_DIR/logs"
if [ "$LOCAL_WORKER_NUM" -lt "$WORKER_NUM" ]; then LOGS="$RUN_DIR/logs/node${NODE_RANK:-$(hostname)}"; fi
mkdir -p "$LOGS/bin"
printf '#!/bin/sh\nexec %q "$@"\n' "$(command -v "$PYTHON")" > "$LOGS/bin/python"
chmod +x "$LOGS/bin/python"

MSRUN_LOG="$LOGS/msrun.log"
echo "log: $MSRUN_LOG (cluster timeout ${CLUSTER_TIMEOUT} s)"
# msrun in a session of its own: a Ctrl-C at the terminal reaches this script only (msrun would kill the
# workers with SIGKILL); with setpriv, msrun gets SIGTERM when this script dies. --tail_worker_log names no
# existing rank: no `tail -f` copies of the worker logs into msrun.log, which outlived a killed msrun.
DETACH=(setsid)
if command -v setpriv > /dev/null; then DETACH+=(setpriv --pdeathsig TERM); fi
env PATH="$LOGS/bin:$PATH" "${DETACH[@]}" "$PYTHON" -m mindspore.parallel.cluster.run \
  --worker_num "$WORKER_NUM" --local_worker_num "$LOCAL_WORKER_NUM" \
  --master_addr "${MASTER_ADDR:-127.0.0.1}" --master_port "$MASTER_PORT" "${NODE_ARGS[@]}" \
  --cluster_time_out "$CLUSTER_TIMEOUT" --log_dir "$LOGS/msrun" --join True --tail_worker_log "$WORKER_NUM" \
  "$ENTRY_SCRIPT" --config "$CONFIG_PATH" --output_dir "$RUN_DIR/output" "${TIMEOUT_ARGS[@]}" "$@" \
  > "$MSRUN_LOG" 2>&1 &
MSRUN_PID=$!
# rank 0's console on this one (its progress and epoch lines), until msrun ends; absent on the other nodes
tail -n +1 -F --pid="$MSRUN_PID" "$LOGS/msrun/worker_0.log" 2> /dev/null | console_lines &
TAIL_PID=$!

STOPPED_BY=""
forward() {  # forward <signal>: to this node's workers (train.py: finish the step, checkpoint, exit)
  STOPPED_BY="$1"
  local pid
  for pid in $(ps -o pid= --ppid "$MSRUN_PID"); do
    if tr '\0' '\n' < "/proc/$pid/environ" 2> /dev/null | grep -qx MS_ROLE=MS_WORKER; then
      kill -s "$1" "$pid" 2> /dev/null || true
    fi
  done
}
trap 'forward TERM' TERM
trap 'forward INT' INT

# When a worker fails, msrun kills the other workers of this node within a second, then waits for its
# scheduler, which gives up on the lost worker only after the cluster timeout (train.py's cluster_timeout,
# 600 s by default; measured). SIGINT makes msrun kill the scheduler too, at once.
while kill -0 "$MSRUN_PID" 2> /dev/null; do
  if [ -z "$STOPPED_BY" ] && grep -q "exit with exception" "$MSRUN_LOG"; then
    sleep 2
    kill -INT "$MSRUN_PID" 2> /dev/null || true
    break
  fi
  sleep 1
done
STATUS=0
wait "$MSRUN_PID" || STATUS=$?
while kill -0 "$MSRUN_PID" 2> /dev/null; do  # a trap interrupted the wait
  STATUS=0
  wait "$MSRUN_PID" || STATUS=$?
done
wait "$TAIL_PID" 2> /dev/null || true  # the rest of rank 0's lines, before the launcher's own
if [ -n "$STOPPED_BY" ]; then
  CODE=$(( 128 + $(kill -l "$STOPPED_BY") ))
  echo "stopped by SIG$STOPPED_BY: the workers finished their step and rank 0 wrote a checkpoint (see" \
    "$RUN_DIR/output/train.log on node 0); continue with --resume auto" >&2
  exit "$CODE"
fi

# msrun logs "Worker process <pid> exit with exception. Error code: <code>"; MindSpore's lines in the
# worker's own log carry its pid, which gives its rank.
FAILED="$(grep -m 1 -o 'Worker process [0-9]* exit with exception. Error code: -\?[0-9]*' "$MSRUN_LOG" || true)"
if [ -n "$FAILED" ]; then
  PID="$(cut -d ' ' -f 3 <<< "$FAILED")"
  CODE="${FAILED##* }"
  WORKER="a worker (pid $PID)" WORKER_LOG="$MSRUN_LOG" DETAIL=""
  for LOG in "$LOGS/msrun"/worker_*.log; do
    if grep -q "($PID," "$LOG" 2> /dev/null; then
      RANK="${LOG##*/worker_}"
      WORKER="worker ${RANK%.log} (pid $PID)" WORKER_LOG="$LOG"
      DETAIL="$(grep '^error: ' "$LOG" | tail -n 1 || true)"
    fi
  done
  if [ "$WORKER_LOG" = "$MSRUN_LOG" ]; then
    # a worker that stopped before MindSpore logged its pid (train.py refused a setting): the first
    # worker log holding an `error:` line is its own
    for LOG in "$LOGS/msrun"/worker_*.log; do
      DETAIL="$(grep '^error: ' "$LOG" 2> /dev/null | tail -n 1 || true)"
      if [ -n "$DETAIL" ]; then
        RANK="${LOG##*/worker_}"
        WORKER="worker ${RANK%.log} (pid $PID)" WORKER_LOG="$LOG"
        break
      fi
    done
  fi
  if [ "$CODE" -eq 143 ] || [ "$CODE" -eq 130 ]; then
    echo "error: $WORKER stopped on SIG$(kill -l $(( CODE - 128 ))) after the job's checkpoint was written" \
      "(this or another node was stopped); continue with --resume auto; see $WORKER_LOG" >&2
    exit "$CODE"
  fi
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
# Several launchers on one machine (nodes sharing a host, as in tests/reliability/test_multinode.py): each
# msrun whose MASTER_ADDR is local starts a scheduler; the later ones find MASTER_PORT taken and exit, while the
# first one serves the whole job. Not a failure when every worker of this node finished (no worker failed:
# see above).
if [ "$STATUS" -ne 0 ] && grep -q "Failed to init the tcp server" "$LOGS/msrun/scheduler.log" 2> /dev/null; then
  echo "note: this node's scheduler found MASTER_PORT $MASTER_PORT taken by another launcher on this machine," \
    "which served the job" >&2
  STATUS=0
fi
if [ "$STATUS" -ne 0 ]; then
  tail -n 20 "$MSRUN_LOG" >&2
  echo "error: exit status $STATUS, see $MSRUN_LOG" >&2
  exit "$STATUS"
fi
echo "done: $MSRUN_LOG"
