"""Device, execution mode, seeds and (data-parallel) distribution for one process."""
import contextlib
import os
import re
import sys
from dataclasses import dataclass

from src.errors import UserError

# Environment variables set by MindSpore's launchers: msrun (MS_WORKER_NUM), an hccl rank
# table on Ascend (RANK_SIZE), OpenMPI's mpirun on GPU (OMPI_COMM_WORLD_SIZE).
_LAUNCHER_SIZE_VARS = ("MS_WORKER_NUM", "RANK_SIZE", "OMPI_COMM_WORLD_SIZE")


@dataclass(frozen=True)
class RunContext:
    rank: int = 0
    group_size: int = 1
    local_rank: int = 0  # index of this process on its node

    @property
    def distributed(self):
        return self.group_size > 1

    @property
    def is_main(self):
        """Only rank 0 writes shared files (checkpoints, metrics, curves, config)."""
        return self.rank == 0

    def from_main(self, value):
        """Rank 0's integer ``value`` on every rank (what the other ranks pass is ignored).

        Decisions that only rank 0 may take (e.g. the run directory) reach the other ranks this
        way, through mindspore.ops.communication.broadcast over the world group as init() named
        it (mccl_world_group on CPU; the deprecated comm_func.broadcast defaults to
        hccl_world_group and fails there, measured under msrun).
        """
        if not self.distributed:
            return int(value)
        import numpy as np
        from mindspore import Tensor
        from mindspore.communication import GlobalComm
        from mindspore.ops.communication import broadcast

        tensor = Tensor(np.array(value if self.is_main else 0, np.int64))
        broadcast(tensor, src=0, group=GlobalComm.WORLD_COMM_GROUP)
        return int(tensor.asnumpy())

    def share_parameters(self, cell):
        """Rank 0's value of every Parameter of `cell` on every rank (a resumed state: other nodes
        cannot be assumed to see rank 0's checkpoint). Booleans travel as int32."""
        if not self.distributed:
            return
        import numpy as np
        from mindspore import Tensor
        from mindspore.communication import GlobalComm
        from mindspore.ops.communication import broadcast

        seen = set()
        for _, param in cell.parameters_and_names():
            if param.name in seen:
                continue
            seen.add(param.name)
            value = param.asnumpy()
            tensor = Tensor(value.astype(np.int32) if value.dtype == np.bool_ else value)
            broadcast(tensor, src=0, group=GlobalComm.WORLD_COMM_GROUP)
            param.set_data(Tensor(tensor.asnumpy().astype(value.dtype).reshape(value.shape)))

    def max_over_ranks(self, value):
        """The largest integer ``value`` over all ranks, on every rank (an all-reduce: every rank
        must call it at the same point, it also serves as a barrier)."""
        if not self.distributed:
            return int(value)
        import numpy as np
        from mindspore import Tensor
        from mindspore.communication import GlobalComm
        from mindspore.ops.communication import all_reduce

        tensor = Tensor(np.array([value], np.int32))
        result = all_reduce(tensor, op="max", group=GlobalComm.WORLD_COMM_GROUP)
        result = result[0] if isinstance(result, tuple) else result
        return int((result if isinstance(result, Tensor) else tensor).asnumpy()[0])


def set_cpu_threads(num=None):
    """Size MindSpore's CPU kernel thread pool to the cores this process may use.

    MindSpore 2.10 defaults to 25 kernel threads; on a 2-core machine they oversubscribe the
    cores (measured here: a 3x3 conv 2x slower, worse under load).
    """
    import mindspore as ms

    from src.models.layers.config import set_kernel_threads

    num = max(1, int(available_cores() if num is None else num))
    ms.device_context.cpu.op_tuning.threads_num(num)
    set_kernel_threads(num)  # the fused kernels' threads, the same number


def available_cores():
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def device_available(device_target):
    """Whether this MindSpore installation has a backend for `device_target` (CPU always has).

    mindspore.device_context.<device>.is_available() answers from the plugins MindSpore loaded
    at import; it logs two warnings when the answer is no, which are silenced here.
    """
    if device_target == "CPU":
        return True
    import logging

    import mindspore as ms

    module = {"Ascend": ms.device_context.ascend, "GPU": ms.device_context.gpu}[device_target]
    logging.disable(logging.WARNING)
    try:
        return bool(module.is_available())
    finally:
        logging.disable(logging.NOTSET)


def fit_to_machine(cfg, notice=print, explicit=None):
    """`cfg` made to run on this machine, before anything heavy.

    A device_target without a backend in this MindSpore installation stops with one line that
    names the fix (a UserError); num_parallel_workers above the cores is lowered to the core
    count (MindSpore's dataset rejects more), with a notice unless ``explicit`` (the keys the
    command line gave, from the inference entry points) leaves the count to the defaults.
    """
    if not device_available(cfg.device_target):
        import mindspore as ms

        have = ", ".join(d for d in ("Ascend", "GPU", "CPU") if device_available(d))
        raise UserError(f"device_target {cfg.device_target} is not available in this MindSpore installation "
                        f"({ms.__version__}; available: {have}): add --device_target CPU to the command (or set "
                        f"device_target in the YAML), or install MindSpore's {cfg.device_target} package")
    cores = available_cores()
    if cfg.num_parallel_workers > cores:
        if explicit is None or "num_parallel_workers" in explicit:
            notice(f"num_parallel_workers {cfg.num_parallel_workers} lowered to {cores}, the cores of this machine")
        cfg = cfg.replace(num_parallel_workers=cores)
    return cfg


def fall_back_device(cfg, explicit, notice=print):
    """`cfg` on a device this MindSpore installation has, for eval.py, export.py and predict.py.

    A device_target the command line did not name (the configs' default is Ascend) that this
    installation lacks becomes the first of Ascend, GPU and CPU it has, with a notice: a CPU
    user evaluates, exports or predicts with a checkpoint without --device_target, also one
    trained on another device. A device named on the command line is kept (fit_to_machine
    refuses it if missing). train.py does not fall back: an Ascend cluster whose driver failed
    would train on its CPUs, a thousand times slower, unnoticed.
    """
    if "device_target" in explicit or device_available(cfg.device_target):
        return cfg
    device = next(d for d in ("Ascend", "GPU", "CPU") if device_available(d))
    notice(f"note: device_target {cfg.device_target} is not available in this MindSpore installation; "
           f"running on {device} (--device_target chooses)")
    return cfg.replace(device_target=device)


def launched_distributed():
    """True when a launcher started this process as one of several workers."""
    return any(int(os.environ.get(var, "1") or 1) > 1 for var in _LAUNCHER_SIZE_VARS)


def init_context(device_target="CPU", device_id=0, mode="graph", seed=0, deterministic=False,
                 distribute=False, cluster_timeout=None):
    """Set up MindSpore for this process and return its RunContext.

    Data parallel (`distribute`, or detected from the launcher's environment) uses
    mindspore.communication.init() and DATA_PARALLEL with averaged gradients, so the
    optimizer (and AGC inside it) sees the mean gradient over all devices.

    `cluster_timeout` (seconds) becomes MindSpore's MS_NODE_TIMEOUT for msrun / dynamic-cluster
    launches (scripts/run_distribute_train_msrun.sh gives msrun the same value). Measured on CPU
    under MindSpore 2.10: it bounds both how long a rank waits in an all-reduce for a rank that is late (MindSpore's
    default of about 30 s stopped a job whose rank 0 paused 45 s) and how long the survivors
    of a dead rank run on before MindSpore stops them (SIGTERM after the timeout).
    """
    import mindspore as ms

    distributed = distribute or launched_distributed()
    if distributed:
        ms.set_device(device_target)  # device_id comes from the launcher (msrun / rank table)
    else:
        ms.set_device(device_target, device_id)
    ms.set_context(mode=ms.GRAPH_MODE if mode == "graph" else ms.PYNATIVE_MODE)
    if device_target == "CPU":
        set_cpu_threads()
    if deterministic:
        ms.set_deterministic(True)
    ms.set_seed(seed)
    if not distributed:
        return RunContext()
    from mindspore.communication import get_group_size, get_rank, init

    if cluster_timeout:  # the one timeout setting: it replaces an MS_NODE_TIMEOUT of the environment
        os.environ["MS_NODE_TIMEOUT"] = str(int(cluster_timeout))
    init()
    rank, group_size = get_rank(), get_group_size()
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True,
                                 device_num=group_size)
    return RunContext(rank=rank, group_size=group_size, local_rank=_local_rank(rank))


def _local_rank(rank):
    """This process's index on its node: get_local_rank() (works under msrun on CPU, measured,
    though its docstring says Ascend only), else OpenMPI's variable, else the global rank."""
    from mindspore.communication import get_local_rank

    try:
        return get_local_rank()
    except (RuntimeError, ValueError):
        return int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", rank))


# What MindSpore raises in a rank whose collective kernel failed, e.g. "Launch kernel failed:
# Default/update-GradientUpdate/grad_reducer-DistributedGradReducer/AllReduce-op0".
# The per-step agreement of StopOnSignal is an eager all_reduce, whose failure names the operator otherwise.
_COLLECTIVE_FAILURE = re.compile(r"Launch kernel failed: \S*?(AllReduce|AllGather|ReduceScatter|Broadcast)|"
                                 r"\b(AllReduce|AllGather|Broadcast)\b[^\n]*\b(?:fail|time)", re.I)
# raised from the next graph run when MindSpore's heartbeat has declared a node lost (measured: 2.10, CPU)
_CLUSTER_ERROR = re.compile(r"state of the cluster is error, total nodes num: (\d+), abnormal nodes num: (\d+)")


@contextlib.contextmanager
def lost_rank_ends_process(cluster_timeout):
    """In a distributed run, a collective operation that fails inside the block ends this process at once.

    Such a failure means another rank died or stalled beyond cluster_timeout (MS_NODE_TIMEOUT): a failed
    collective, or "The state of the cluster is error" once MindSpore's heartbeat has declared a node
    lost. MindSpore raises either as a RuntimeError, then holds the process about 25 s in its shutdown before it kills it with
    SIGTERM (measured on CPU). Instead this prints one `error:` line and exits with status 1 right away.
    """
    try:
        yield
    except RuntimeError as exc:
        found, lost = _COLLECTIVE_FAILURE.search(str(exc)), _CLUSTER_ERROR.search(str(exc))
        if (found is None and lost is None) or not launched_distributed():
            raise
        from mindspore.communication import get_rank

        what = f"{found[1] or found[2]} failed" if found else f"MindSpore's heartbeat lost {lost[2]} of {lost[1]} nodes"
        sys.stdout.flush()
        print(f"error: rank {get_rank()}: {what}: another rank stopped or did not answer within "
              f"cluster_timeout ({cluster_timeout} s); stopping this rank too", file=sys.stderr, flush=True)
        os._exit(1)  # a normal exit would wait in MindSpore's shutdown for the lost rank
