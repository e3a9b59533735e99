"""Building the deployed network from a checkpoint and writing it as MINDIR, ONNX or AIR.

The deployed network is the eval-mode network (dropout and stochastic depth off) with
weight standardization folded (src/deploy/fold.py), in float32, traced at batch
`export_batch_size` and `test_input_size` x `test_input_size`. ONNX always uses native
Conv operators, and its GELUs are traced as markers that the written graph turns into
ONNX's Erf GELU, or the tanh formula for gelu_form "tanh" (src/deploy/gelu.py), because
MindSpore's ONNX exporter has no Erf; the constant scalings between convolutions (gamma, beta)
are folded into the convolution weights (src/deploy/onnx_fold.py).

Every export is portable by default, whatever machine writes it: each convolution is one
native Conv2D operator (what Ascend 310/910, GPU, MindSpore Lite and ONNX runtimes execute
best). The im2col + matmul form, which MindSpore 2.10's CPU backend runs faster on large
inputs (F0 at 256x256; not on small ones), is written only when asked for by name:
conv_impl "im2col_cpu" (export.py --conv_impl im2col_cpu), for a MINDIR that will run on
MindSpore's CPU backend and nowhere else. conv_impl "fused_cpu" writes the network eval.py runs
on this CPU: its fast forms (layers/fast_forms.py) with folded weights, so the graph calls the
fused kernels (oneDNN convolutions, each NF block's main path as one kernel, GELU, squeeze-excite)
of the library compiled on this machine, by its path. It is MindSpore's fastest CPU route for
nn.GraphCell (F0 b8 at 256 px: 2.4x the im2col MINDIR, docs/performance.md), and runs only where
that library exists: the machine that wrote it, or one with the same CPU and source.

ONNX can get a free batch axis (dynamic_batch, src/deploy/onnx_batch.py).
"""
import os

import numpy as np

from src.atomic import atomic_path

from .errors import DeployError

EXTENSIONS = {"MINDIR": ".mindir", "ONNX": ".onnx", "AIR": ".air"}
# export.py --conv_impl: the name users see -> FoldedConv2d's implementation
CONV_IMPLS = {"native": "native", "im2col_cpu": "matmul", "fused_cpu": "fused"}


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

    from src.run.context import device_available

    if not device_available(device_target):
        what = "AIR export needs an Ascend device: " if file_format == "AIR" else ""
        raise DeployError(f"{what}device_target {device_target} is not available in this MindSpore build "
                          f"({ms.__version__}); use --device_target CPU"
                          + (" and export MINDIR or ONNX" if file_format == "AIR" else ""))


def create_deploy_network(network, file_format="MINDIR", conv_impl="native", dynamic_batch=False):
    """The folded eval network for `file_format` (a new network; `network` is left as it is).

    conv_impl: "native" (one Conv2D per convolution, the default), "im2col_cpu" (im2col +
    matmul, for MindSpore's CPU backend only) or "fused_cpu" (MINDIR only: `network` must have
    the fused CPU kernels, which it keeps); ONNX always gets native convolutions.
    dynamic_batch (ONNX only): cells that would fix the batch size in the graph are swapped
    for batch-free forms (src/deploy/onnx_batch.py).
    """
    from src.models.layers import apply_plain_forms

    from .fold import flatten_excite_weights, fold_weight_standardization
    from .gelu import use_onnx_gelu_markers

    if conv_impl not in CONV_IMPLS:
        raise DeployError(f"conv_impl must be one of {', '.join(CONV_IMPLS)}, got {conv_impl!r}")
    if dynamic_batch and file_format != "ONNX":
        raise DeployError(f"a dynamic batch axis is for ONNX exports only, not {file_format}")
    if conv_impl == "fused_cpu" and file_format != "MINDIR":
        raise DeployError(f"--conv_impl fused_cpu is for MINDIR exports only, not {file_format}")
    if file_format == "ONNX":
        conv_impl = "native"
    folded = fold_weight_standardization(network, CONV_IMPLS[conv_impl])
    if conv_impl == "fused_cpu":
        flatten_excite_weights(folded)  # as eval.py's network (fold_for_cpu_eval)
    else:
        apply_plain_forms(folded)  # a network built with this machine's fast forms exports the plain ones
    if file_format == "ONNX":
        use_onnx_gelu_markers(folded)  # export_network turns them into ONNX's Erf GELU
    if dynamic_batch:
        from .onnx_batch import use_batch_free_cells

        use_batch_free_cells(folded)
    return folded


def export_network(network, file_format, file_name, batch_size, image_size, overwrite=False, dynamic_batch=False):
    """Trace `network` on a (batch_size, 3, image_size, image_size) float32 input and write it.

    dynamic_batch (ONNX): the written graph's batch axis is made symbolic, any batch runs
    (`network` must come from create_deploy_network(..., dynamic_batch=True)).

    The file is written under a temporary name next to the target and renamed into place,
    so an interrupted export never leaves a truncated model behind. Refuses to replace an
    existing file unless `overwrite`. Returns the written path.
    """
    import mindspore as ms

    path = export_path(file_name, file_format)
    if os.path.exists(path) and not overwrite:
        raise DeployError(f"{path} already exists; pass --overwrite to replace it")
    example = ms.Tensor(np.zeros((batch_size, 3, image_size, image_size), np.float32))
    ext = EXTENSIONS[file_format]
    with atomic_path(path) as tmp_path:
        written = tmp_path[:-len(ext)] + ext  # ms.export appends the lower-case extension to a stem
        if file_format == "ONNX":  # mindspore.export(file_format="ONNX") is deprecated in MindSpore 2.10
            ms.onnx.export(network, example, file_name=written)
        else:
            ms.export(network, example, file_name=written[:-len(ext)], file_format=file_format)
        if not os.path.isfile(written):
            raise DeployError(f"MindSpore wrote no {file_format} file at {written}")
        if file_format == "ONNX":
            edit_onnx(written, network, dynamic_batch)
        os.replace(written, tmp_path)  # the same name unless file_name ended in e.g. .MINDIR
    return path


def edit_onnx(path, network, dynamic_batch):
    """The written ONNX file's edits, read and written once (each write of F0's 286 MB took ~4.7 s here)."""
    from .gelu import count_markers, marker_form, restore_erf_gelu
    from .onnx_batch import make_batch_dynamic
    from .onnx_fold import fold_scalar_muls
    from .onnx_proto import read_model, write_model

    model = read_model(path)
    fold_scalar_muls(model)  # first: the GELUs' own Mul by 0.5 is not in the graph yet
    restore_erf_gelu(model, count_markers(network), marker_form(network))
    if dynamic_batch:
        make_batch_dynamic(model)
    write_model(path, model)


def check_fused_kernels():
    """Fail in one line when this machine cannot give the network its fused CPU kernels."""
    from src.models.layers.config import active_forms

    forms = active_forms()
    if not forms.fused_kernels:
        raise DeployError(f"--conv_impl fused_cpu needs the fused CPU kernels, which this machine does not have "
                          f"({forms.reason}; see docs/cpu_backend.md); export with --conv_impl im2col_cpu instead")


def run_export(cfg, checkpoint_path, overwrite=False, conv_impl="native", dynamic_batch=False, log=print,
               record=None):
    """export.py's work: checks, eval network from the checkpoint, fold, write. Returns the path.

    The data settings used (cfg's, with the checkpoint's `record` classes and mean/std) are
    written next to the model as <model file>.json (src.data.data_settings.write_sidecar).

    Cheap checks (the outputs: not the checkpoint, not a folder, existing only with `overwrite`,
    in a writable folder; AIR off Ascend, unavailable device) come before the network is built,
    so a mistake costs no model loading.
    """
    import mindspore as ms

    from src.data.data_settings import effective_settings, sidecar_path, write_sidecar

    from .cli import check_output

    file_name = cfg.file_name or cfg.arch
    path = export_path(file_name, cfg.file_format)
    for output in (path, sidecar_path(path)):  # the model and its data settings: never the checkpoint
        check_output("--file_name", output, [checkpoint_path], overwrite=overwrite, make_parents=True)
    check_device(cfg.device_target, cfg.file_format)
    if dynamic_batch and cfg.file_format != "ONNX":
        raise DeployError(f"--dynamic_batch is for ONNX exports only, not {cfg.file_format}")
    fused = conv_impl == "fused_cpu"
    if fused and (cfg.file_format, cfg.device_target) != ("MINDIR", "CPU"):
        raise DeployError(f"--conv_impl fused_cpu writes a MINDIR for MindSpore's CPU backend: it needs "
                          f"--file_format MINDIR and --device_target CPU, not {cfg.file_format} and {cfg.device_target}")
    ms.set_device(cfg.device_target, cfg.device_id)
    if fused:
        check_fused_kernels()
    from src.builders import build_eval_network

    network, ema = build_eval_network(cfg, checkpoint_path, fast_forms=fused)  # CheckpointError is a UserError
    if cfg.use_ema and not ema:
        log(f"note: {checkpoint_path} holds no EMA weights; exporting its raw weights")
    deployed = create_deploy_network(network, cfg.file_format, conv_impl, dynamic_batch)
    path = export_network(deployed, cfg.file_format, file_name, cfg.export_batch_size, cfg.test_input_size,
                          overwrite=overwrite, dynamic_batch=dynamic_batch)
    sidecar = write_sidecar(path, effective_settings(cfg, record))
    impls = "native" if cfg.file_format == "ONNX" else conv_impl
    size = cfg.test_input_size
    batch = "any" if dynamic_batch else cfg.export_batch_size
    log(f"exported {cfg.arch} ({'EMA' if ema else 'raw'} weights of {checkpoint_path}) as {cfg.file_format}: "
        f"{path} (input {batch}x3x{size}x{size} float32, {impls} convolutions); data settings: {sidecar}")
    if fused:
        from src.models.layers.config import kernel_library

        log(f"note: {path} calls the fused CPU kernels of {kernel_library()}: it runs in MindSpore's CPU backend "
            f"where that file exists, not in MindSpore Lite, ONNX runtimes or on Ascend")
    return path
