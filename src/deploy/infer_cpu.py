"""Run an exported MINDIR over preprocessed .bin inputs with MindSpore's Python API.

The CPU twin of ascend310_infer/: the same inputs (<input_path>/<name>.bin), the same
outputs (<result_path>/<name>_0.bin, float32 logits) and the same timing file
(<time_path>/test_perform_static.txt), so postprocess.py scores both alike.

    python -m src.deploy.infer_cpu --mindir_path net.mindir --input_path preprocess_Result/images \
        [--result_path result_Files] [--time_path time_Result] [--device_target CPU]
"""
import argparse
import math
import os
import sys
import time

from src.config import run_cli

from .binio import list_bins, mindir_input_shape, read_tensor, result_name, write_atomic, write_tensor
from .errors import DeployError
from .progress import ProgressBar

TIME_FILE = "test_perform_static.txt"


def load_mindir(path, device_target="CPU"):
    """(GraphCell, input shape) of a float32 single-input MINDIR."""
    import mindspore as ms

    shape, is_float32 = mindir_input_shape(path)
    if not is_float32:
        raise DeployError(f"{path}: input 0 is not float32; export.py writes float32 graphs")
    ms.set_device(device_target)
    if device_target == "CPU":
        from src.tools.context import set_cpu_threads

        try:
            set_cpu_threads()  # MindSpore's default 25 kernel threads oversubscribe small machines
        except RuntimeError:  # MindSpore allows setting it once per process; it already was
            pass
    return ms.nn.GraphCell(ms.load(path)), shape


def run_inference(mindir_path, input_path, result_path, time_path=None, device_target="CPU", progress=True):
    """Run every <input_path>/*.bin through the MINDIR; write <result_path>/<name>_0.bin.

    The first input runs once untimed (graph compilation); then each file is timed.
    Returns a dict: files, images (files x batch), mean_ms_per_file, mean_ms_per_image.
    """
    import mindspore as ms

    names = [f[:-len(".bin")] for f in list_bins(input_path)]
    network, shape = load_mindir(mindir_path, device_target)
    os.makedirs(result_path, exist_ok=True)

    def load(name):
        path = os.path.join(input_path, name + ".bin")
        try:
            return ms.Tensor(read_tensor(path, shape))
        except DeployError as exc:
            raise DeployError(f"{exc}; the MINDIR takes input {tuple(shape)}: preprocess with "
                              f"--batch_size {shape[0]} at test_input_size {shape[-1]}") from None

    expected_bytes = 4 * math.prod(shape)  # float32
    for name in names:  # every input is checked before the first one runs: no half-written results
        if os.path.getsize(os.path.join(input_path, name + ".bin")) != expected_bytes:
            load(name)  # raises the error naming the file
    network(load(names[0]))  # warm-up: compiles the graph
    elapsed = 0.0
    bar = ProgressBar(len(names), "infer") if progress else None
    for name in names:
        x = load(name)
        start = time.perf_counter()
        logits = network(x).asnumpy()
        elapsed += time.perf_counter() - start
        write_tensor(os.path.join(result_path, result_name(name)), logits)
        if bar:
            bar.update()
    per_file = 1000.0 * elapsed / len(names)
    stats = dict(files=len(names), images=len(names) * shape[0], mean_ms_per_file=per_file,
                 mean_ms_per_image=per_file / shape[0])
    if time_path:
        os.makedirs(time_path, exist_ok=True)
        write_atomic(os.path.join(time_path, TIME_FILE), format_timing(stats).encode("utf-8") + b"\n")
    return stats


def format_timing(stats):
    return (f"NN inference cost average time: {stats['mean_ms_per_image']:.3f} ms per image "
            f"({stats['mean_ms_per_file']:.3f} ms per file, {stats['files']} files, {stats['images']} images)")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="Run a MINDIR over preprocessed .bin files (MindSpore Python API).")
    parser.add_argument("--mindir_path", required=True, help="exported .mindir")
    parser.add_argument("--input_path", required=True, help="folder of <name>.bin inputs (preprocess.py's images/)")
    parser.add_argument("--result_path", default="result_Files", help="folder for <name>_0.bin logits")
    parser.add_argument("--time_path", default="time_Result", help=f"folder for {TIME_FILE}")
    parser.add_argument("--device_target", default="CPU", choices=("CPU", "GPU", "Ascend"))
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    stats = run_inference(args.mindir_path, args.input_path, args.result_path, args.time_path, args.device_target)
    print(format_timing(stats), file=sys.stdout)


if __name__ == "__main__":
    run_cli(main)
