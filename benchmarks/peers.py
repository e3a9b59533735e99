"""The routes a PyTorch user would pick instead of ours, as bench workers (issue 29).

Training and the eval network: timm's model in three PyTorch forms, eager NCHW, ``channels_last``
(NHWC memory format: oneDNN's blocked kernels without reorders) and ``torch.compile`` (Inductor's
generated C++ around oneDNN/MKL; compiled once per input shape, ``dynamic=False``; its compile
time is the first step's). Deployment: timm's model exported to ONNX (``torch.onnx.export``,
opset 17, free batch axis) and run in ONNX Runtime and in OpenVINO, and our own ONNX export in
OpenVINO. OpenVINO compiles one static-shape model per batch size with f32 precision
(``INFERENCE_PRECISION_HINT``: on CPUs with bf16 it would otherwise lower the precision) and the
bench's thread count; bench.py times it as it times ONNX Runtime, and compares their logits.
"""
TORCH_FORMS = ("eager", "channels_last", "compile")


def torch_form(model, form):
    """``model`` in PyTorch ``form``: (callable, input converter)."""
    import torch

    if form == "eager":
        return model, lambda x: x
    if form == "channels_last":
        model = model.to(memory_format=torch.channels_last)
        return model, lambda x: x.contiguous(memory_format=torch.channels_last)
    if form == "compile":
        return torch.compile(model, dynamic=False), lambda x: x
    raise ValueError(f"unknown PyTorch form {form!r}; choose from {', '.join(TORCH_FORMS)}")


def check_form_logits(logits, eager_logits, form, rtol=1e-4):
    """ValueError unless ``form``'s logits are eager timm's within ``rtol`` · max |eager logit|: a form that
    computes another function is not a peer to time (issue 29: a `torch.compile` cache from another ISA
    limit gave NaN). Measured here: the forms differ from eager by up to 2e-6 of the largest logit."""
    import torch

    scale = float(eager_logits.abs().max())
    error = float((logits - eager_logits).abs().max()) if torch.isfinite(logits).all() else float("inf")
    if not error <= rtol * scale:
        raise ValueError(f"timm {form} gives other logits than timm eager (max difference {error:.3g}, largest "
                         f"logit {scale:.3g}): not the same network, not timed")


def export_timm_onnx(model, path, size):
    """timm's eval-mode ``model`` as ONNX with a free batch axis (the TorchScript exporter, opset 17)."""
    import torch

    model.eval()
    with torch.no_grad():
        torch.onnx.export(model, (torch.zeros(1, 3, size, size),), path, dynamo=False, opset_version=17,
                          input_names=["x"], output_names=["logits"],
                          dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}})
    return path


def load_openvino(path, batch, size, threads):
    """run(array) -> logits of the ONNX model at ``path``, compiled by OpenVINO for one static batch size."""
    import openvino as ov

    core = ov.Core()
    model = core.read_model(path)
    model.reshape([batch, 3, size, size])
    compiled = core.compile_model(model, "CPU", {"INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "f32",
                                                 "PERFORMANCE_HINT": "LATENCY"})
    request = compiled.create_infer_request()
    return lambda x: request.infer([x])[0].copy()
