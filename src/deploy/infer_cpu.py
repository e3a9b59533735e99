"""Run an exported model over preprocessed .bin inputs on the CPU: a MINDIR with MindSpore, or ONNX.

The CPU twin of ascend310_infer/: the same inputs (<input_path>/<name>.bin), the same
outputs (<result_path>/<name>_0.bin, float32 logits) and the same timing file
(<time_path>/test_perform_static.txt), so postprocess.py scores all of them alike.

    python -m src.deploy.infer_cpu --mindir_path net.mindir --input_path preprocess_Result/images \
        [--result_path result_Files] [--time_path time_Result] [--device_target CPU] [--num_images N]
    python -m src.deploy.infer_cpu --onnx_path net.onnx --input_path preprocess_Result/images ...

A MINDIR runs through mindspore.load + nn.GraphCell; an ONNX model in ONNX Runtime (the optional
requirements-onnx.txt), whose batch axis may be free (export.py --dynamic_batch): its batch is
then read from the input files' size.
"""
import argparse
import math
import os
import re
import sys
import time

import numpy as np

from src.atomic import write_atomic
from src.errors import run_cli

from .binio import DTYPE, list_bins, mindir_input_shape, read_tensor, result_name, write_tensor
from .errors import DeployError
from src.run.progress import ProgressBar

TIME_FILE = "test_perform_static.txt"
# MindSpore 2.10's message for a Custom op whose library is gone (export.py --conv_impl fused_cpu)
MISSING_KERNELS = re.compile(r"couldn't find the AOT binary file: (\S+)")


def load_mindir(path, device_target="CPU"):
    """(run(array) -> logits, input shape) of a float32 single-input MINDIR."""
    import mindspore as ms

    shape, is_float32 = mindir_input_shape(path)
    if not is_float32:
        raise DeployError(f"{path}: input 0 is not float32; export.py writes float32 graphs")
    ms.set_device(device_target)
    if device_target == "CPU":
        from src.run.context import set_cpu_threads

        try:
            set_cpu_threads()  # MindSpore's default 25 kernel threads oversubscribe small machines
        except RuntimeError:  # MindSpore allows setting it once per process; it already was
            pass
    try:  # a file cut at a field boundary parses; MindSpore fails to load it ("Load MindIR failed.") or to
        network = ms.nn.GraphCell(ms.load(path))  # compile it: both are tried here, before any input is read
        network(ms.Tensor(np.zeros(shape, np.float32)))
    except RuntimeError as exc:
        missing = MISSING_KERNELS.search(str(exc))
        if missing:
            raise DeployError(f"{path} was exported with --conv_impl fused_cpu and calls the fused CPU kernels of "
                              f"{missing.group(1)}, which is not on this machine; export it again here, or with "
                              f"--conv_impl im2col_cpu or native for a file that runs anywhere") from None
        raise DeployError(f"{path} is not a readable MINDIR file (MindSpore: {str(exc).strip().splitlines()[0]}; "
                          f"truncated or damaged? export it again)") from None
    return lambda x: network(ms.Tensor(x)).asnumpy(), shape


def load_onnx(path, threads=None):
    """(run(array) -> logits, input shape) of a single-input ONNX model; a free batch axis is None."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise DeployError("ONNX Runtime is not installed: pip install -r requirements-onnx.txt") from None
    if not os.path.isfile(path):
        raise DeployError(f"ONNX file not found: {path}")
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads or len(os.sched_getaffinity(0))
    try:
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own exception types for unreadable models
        raise DeployError(f"{path} is not a readable ONNX model ({str(exc).splitlines()[0][:200]})") from None
    inputs = session.get_inputs()
    if len(inputs) != 1 or inputs[0].type != "tensor(float)":
        raise DeployError(f"{path}: expected one float32 input, found {[(i.name, i.type) for i in inputs]}")
    name = inputs[0].name
    shape = tuple(d if isinstance(d, int) else None for d in inputs[0].shape)
    return lambda x: session.run(None, {name: x})[0], shape


def resolve_batch(shape, input_path, names):
    """`shape` with a free batch axis (None) filled in from the first input file's size."""
    if shape[0] is not None:
        return tuple(shape)
    per_image = math.prod(shape[1:]) * DTYPE.itemsize
    size = os.path.getsize(os.path.join(input_path, names[0] + ".bin"))
    if size == 0 or size % per_image:
        raise DeployError(f"{os.path.join(input_path, names[0] + '.bin')}: {size} bytes is not a whole number of "
                          f"{tuple(shape[1:])} float32 images")
    return (size // per_image,) + tuple(shape[1:])


def run_inference(model_path, input_path, result_path, time_path=None, device_target="CPU", progress=True,
                  num_images=None, runtime="mindspore"):
    """Run every <input_path>/*.bin through the model; write <result_path>/<name>_0.bin.

    runtime: "mindspore" (a MINDIR) or "onnxruntime" (an ONNX model). The first input runs
    once untimed (graph compilation, allocation); then each file is timed. num_images: the
    real images over all files (the last file may be padded), for the time per image;
    default files x batch. Returns a dict: files, images, mean_ms_per_file, mean_ms_per_image.
    """
    from .cli import check_output

    names = [f[:-len(".bin")] for f in list_bins(input_path)]
    check_output("--result_path", result_path, [input_path, model_path], make_parents=True, folder=True)
    run, shape = load_onnx(model_path) if runtime == "onnxruntime" else load_mindir(model_path, device_target)
    shape = resolve_batch(shape, input_path, names)
    capacity = len(names) * shape[0]
    if num_images is not None and not capacity - shape[0] < num_images <= capacity:
        raise DeployError(f"--num_images {num_images} does not fit {len(names)} files of batch {shape[0]} "
                          f"(expected {capacity - shape[0] + 1} to {capacity})")
    os.makedirs(result_path, exist_ok=True)

    def load(name):
        path = os.path.join(input_path, name + ".bin")
        try:
            return read_tensor(path, shape)
        except DeployError as exc:
            raise DeployError(f"{exc}; the model takes input {tuple(shape)}: preprocess with "
                              f"--batch_size {shape[0]} at test_input_size {shape[-1]}") from None

    expected_bytes = DTYPE.itemsize * math.prod(shape)
    for name in names:  # every input is checked before the first one runs: no half-written results
        if os.path.getsize(os.path.join(input_path, name + ".bin")) != expected_bytes:
            load(name)  # raises the error naming the file
    run(load(names[0]))  # warm-up: compiles the graph
    elapsed = 0.0
    bar = ProgressBar(len(names), "infer") if progress else None
    for name in names:
        x = load(name)
        start = time.perf_counter()
        logits = np.asarray(run(x))
        elapsed += time.perf_counter() - start
        write_tensor(os.path.join(result_path, result_name(name)), logits)
        if bar:
            bar.update()
    images = num_images or capacity
    stats = dict(files=len(names), images=images, mean_ms_per_file=1000.0 * elapsed / len(names),
                 mean_ms_per_image=1000.0 * elapsed / images)
    if time_path:
        os.makedirs(time_path, exist_ok=True)
        write_atomic(os.path.join(time_path, TIME_FILE), format_timing(stats) + "\n")
    return stats


def format_timing(stats):
    """The C++ app's timing line (nfnet_infer::TimingSummary)."""
    return (f"NN inference cost average time: {stats['mean_ms_per_image']:.3f} ms per image "
            f"({stats['mean_ms_per_file']:.3f} ms per file, {stats['files']} files, {stats['images']} images)")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="Run a MINDIR (MindSpore) or ONNX model (ONNX Runtime) over "
                                                 "preprocessed .bin files.")
    model = parser.add_mutually_exclusive_group(required=True)
    model.add_argument("--mindir_path", help="exported .mindir, run with MindSpore")
    model.add_argument("--onnx_path", help="exported .onnx, run with ONNX Runtime on the CPU")
    parser.add_argument("--input_path", required=True, help="folder of <name>.bin inputs (preprocess.py's images/)")
    parser.add_argument("--result_path", default="result_Files", help="folder for <name>_0.bin logits")
    parser.add_argument("--time_path", default="time_Result", help=f"folder for {TIME_FILE}")
    parser.add_argument("--device_target", default="CPU", choices=("CPU", "GPU", "Ascend"), help="MINDIR only")
    parser.add_argument("--num_images", type=int, default=None,
                        help="real images over all files (the last may be padded); default files x batch")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    runtime = "onnxruntime" if args.onnx_path else "mindspore"
    stats = run_inference(args.onnx_path or args.mindir_path, args.input_path, args.result_path, args.time_path,
                          args.device_target, num_images=args.num_images, runtime=runtime)
    print(format_timing(stats), file=sys.stdout)


if __name__ == "__main__":
    run_cli(main)
