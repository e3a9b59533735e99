"""Building the deployed network from a checkpoint and writing it as MINDIR, ONNX or AIR.

The deployed network is the eval-mode network (dropout and stochastic depth off) with
weight standardization folded (src/deploy/fold.py), in float32, traced at batch
`export_batch_size` and `test_input_size` x `test_input_size`. ONNX additionally
computes GELU without the Erf operator (src/deploy/gelu.py), because MindSpore's ONNX
exporter has none, and always uses native Conv operators.

Convolutions in a MINDIR/AIR follow the device the network is built for (conv_impl
"auto"): native Conv2D on Ascend and GPU, im2col + matmul on CPU, where MindSpore 2.10
runs that ~10x faster. Exporting on a CPU machine for Ascend 310, pass conv_impl
"native" (export.py --conv_impl native).
"""
import os

import numpy as np

from .errors import DeployError

EXTENSIONS = {"MINDIR": ".mindir", "ONNX": ".onnx", "AIR": ".air"}
EMA_PREFIX = "ema."


def export_path(file_name, file_format):
    """`file_name` with the format's extension (added unless already there)."""
    ext = EXTENSIONS[file_format]
    return file_name if file_name.lower().endswith(ext) else file_name + ext


def check_device(device_target, file_format):
    """Fail in one line when the device cannot run, or AIR is asked for off Ascend."""
    if file_format == "AIR" and device_target != "Ascend":
        raise DeployError(f"AIR export needs an Ascend device, but device_target is {device_target}; "
                          f"export MINDIR or ONNX here, or run on Ascend with --device_target Ascend")
    import mindspore as ms

    if device_target != "CPU" and not ms.hal.is_available(device_target):
        what = "AIR export needs an Ascend device: " if file_format == "AIR" else ""
        raise DeployError(f"{what}device_target {device_target} is not available in this MindSpore build "
                          f"({ms.__version__}); use --device_target CPU"
                          + (" and export MINDIR or ONNX" if file_format == "AIR" else ""))


def create_eval_network(cfg, checkpoint_path, use_ema=None):
    """The eval-mode network of `cfg.arch` with the checkpoint's weights (EMA ones if asked and present).

    Returns (network, prefix) where prefix tells which weights were loaded ("ema." or "").
    """
    from src.builders import build_network
    from src.models import checkpoint_has_prefix

    use_ema = cfg.use_ema if use_ema is None else use_ema
    prefix = EMA_PREFIX if use_ema and checkpoint_has_prefix(checkpoint_path, EMA_PREFIX) else ""
    network = build_network(cfg, checkpoint_path=checkpoint_path, checkpoint_prefix=prefix, finetune=False)
    network.set_train(False)
    return network, prefix


def create_deploy_network(network, file_format="MINDIR", conv_impl="auto"):
    """The folded eval network for `file_format` (a new network; `network` is left as it is).

    conv_impl: "auto" keeps each layer's convolution implementation, "native" / "matmul"
    set it; ONNX always gets native convolutions.
    """
    from .fold import fold_weight_standardization
    from .gelu import use_elementary_gelu

    if file_format == "ONNX":
        conv_impl = "native"
    folded = fold_weight_standardization(network, None if conv_impl == "auto" else conv_impl)
    use_operator_forms(folded)
    if file_format == "ONNX":
        use_elementary_gelu(folded)
    return folded


def use_operator_forms(network):
    """Swap the fused CPU kernels of `network` (in place) for their MindSpore-operator forms; return the count.

    The fused kernels (src/models/layers/cpu_kernels.py) live in a library built on this
    machine, so an exported model must not refer to them. Folding has already replaced the
    convolutions; the GELUs and the per-row scales (SE, DropPath) remain.
    """
    from src.models.layers import GammaAct
    from src.models.layers.cpu_kernels import FusedMulRows, FusedScaledGELU

    count = 0
    for _, cell in network.cells_and_names():
        if isinstance(cell, GammaAct) and isinstance(cell.fused_gelu, FusedScaledGELU):
            cell.fused_gelu = None
            count += 1
        if isinstance(getattr(cell, "fused_mul_rows", None), FusedMulRows):
            cell.fused_mul_rows = None
            count += 1
    return count


def export_network(network, file_format, file_name, batch_size, image_size, overwrite=False):
    """Trace `network` on a (batch_size, 3, image_size, image_size) float32 input and write it.

    The file is written under a temporary name next to the target and renamed into place,
    so an interrupted export never leaves a truncated model behind. Refuses to replace an
    existing file unless `overwrite`. Returns the written path.
    """
    import mindspore as ms

    path = export_path(file_name, file_format)
    if os.path.exists(path) and not overwrite:
        raise DeployError(f"{path} already exists; pass --overwrite to replace it")
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp_stem = os.path.join(directory, f".{os.path.basename(path)}.partial-{os.getpid()}")
    tmp_path = tmp_stem + EXTENSIONS[file_format]
    example = ms.Tensor(np.zeros((batch_size, 3, image_size, image_size), np.float32))
    try:
        ms.export(network, example, file_name=tmp_stem, file_format=file_format)
        if not os.path.isfile(tmp_path):
            raise DeployError(f"MindSpore wrote no {file_format} file at {tmp_path}")
        os.replace(tmp_path, path)
    finally:
        if os.path.exists(tmp_path):
            os.remove(tmp_path)
    return path


def run_export(cfg, checkpoint_path, overwrite=False, conv_impl="auto", log=print, record=None):
    """export.py's work: checks, eval network from the checkpoint, fold, write. Returns the path.

    The data settings used (cfg's, with the checkpoint's `record` classes and mean/std) are
    written next to the model as <model file>.json (src.data.data_settings.write_sidecar).

    Cheap checks (existing target, AIR off Ascend, unavailable device) come before the
    network is built, so a mistake costs no model loading.
    """
    import mindspore as ms

    file_name = cfg.file_name or cfg.arch
    path = export_path(file_name, cfg.file_format)
    if os.path.exists(path) and not overwrite:
        raise DeployError(f"{path} already exists; pass --overwrite to replace it")
    check_device(cfg.device_target, cfg.file_format)
    ms.set_device(cfg.device_target, cfg.device_id)
    network, prefix = create_eval_network(cfg, checkpoint_path)  # CheckpointError is a UserError
    if cfg.use_ema and not prefix:
        log(f"note: {checkpoint_path} holds no EMA weights; exporting its raw weights")
    deployed = create_deploy_network(network, cfg.file_format, conv_impl)
    path = export_network(deployed, cfg.file_format, file_name, cfg.export_batch_size, cfg.test_input_size,
                          overwrite=overwrite)
    from src.data.data_settings import effective_settings, write_sidecar

    sidecar = write_sidecar(path, effective_settings(cfg, record))
    from .fold import FoldedConv2d

    impls = "/".join(sorted({c.conv_impl for _, c in deployed.cells_and_names() if isinstance(c, FoldedConv2d)}))
    size = cfg.test_input_size
    log(f"exported {cfg.arch} ({'EMA' if prefix else 'raw'} weights of {checkpoint_path}) as {cfg.file_format}: "
        f"{path} (input {cfg.export_batch_size}x3x{size}x{size} float32, {impls} convolutions); "
        f"data settings: {sidecar}")
    return path
