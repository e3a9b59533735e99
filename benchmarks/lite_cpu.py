"""An ONNX export through MindSpore Lite's converter and its CPU runtime: timings and logits.

    <lite venv>/bin/python benchmarks/lite_cpu.py --onnx MODEL.onnx --inputs DIR --threads 2 \
        [--warmup 2] [--steps 5] [--optimize general] --json-out FILE

Runs under the Python of the MindSpore Lite wheel (PyPI's mindspore-lite 2.0.0 is a CPython 3.7
wheel; `make lite-venv` makes that venv: benchmarks/lite_venv.py), so it imports only numpy and
mindspore_lite. For every DIR/x_b<N>.npy (float32 NCHW), the ONNX model is converted with its batch
axis fixed at N (mindspore_lite.Converter, what `converter_lite --fmk=ONNX --saveType=MINDIR
--inputShape` writes; `optimize` "general" fuses operators, "none" does not), built for the CPU with
`--threads` threads, and called warmup + steps times (each call's seconds include setting the input);
the last logits go to DIR/logits_b<N>.npy, the timings to --json-out. Lite 2.0.0 cannot read a
MindSpore 2.10 MINDIR (mind_ir_version 3 > 1), so ONNX is the only way in.
"""
import argparse
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import time

import numpy as np

def convert(onnx_path, output_stem, shape, optimize):
    """Write output_stem.mindir: the Lite MINDIR of ``onnx_path`` with input x fixed at ``shape``."""
    import mindspore_lite as mslite

    converter = mslite.Converter()
    converter.optimize = optimize
    converter.save_type = mslite.ModelType.MINDIR
    converter.input_shape = {"x": shape}
    converter.convert(fmk_type=mslite.FmkType.ONNX, model_file=onnx_path, output_file=output_stem)


def convert_in_child(onnx_path, output_stem, shape, optimize):
    """convert() in a child process: (path, seconds). Lite 2.0.0's converter and its runtime in one process
    crash at its exit (SIGSEGV after the work is done; measured), so they never share one."""
    start = time.perf_counter()
    subprocess.run([sys.executable, os.path.abspath(__file__), "--onnx", onnx_path, "--convert-to", output_stem,
                    "--shape", ",".join(map(str, shape)), "--optimize", optimize], check=True)
    return output_stem + ".mindir", time.perf_counter() - start


def build(path, threads):
    """The Lite model at ``path`` built for the CPU with ``threads`` threads (no core binding)."""
    import mindspore_lite as mslite

    context = mslite.Context()
    context.target = ["cpu"]
    context.cpu.thread_num = threads
    context.cpu.thread_affinity_mode = 0
    model = mslite.Model()
    model.build_from_file(path, mslite.ModelType.MINDIR, context)
    return model


def time_model(model, x, warmup, steps):
    """(seconds of each call, last logits) of warmup + steps calls of ``model`` on ``x``."""
    inputs = model.get_inputs()
    times, logits = [], None
    for _ in range(warmup + steps):
        start = time.perf_counter()
        inputs[0].set_data_from_numpy(x)
        logits = model.predict(inputs)[0].get_data_to_numpy()
        times.append(time.perf_counter() - start)
    return times, logits


def main(argv=None):
    parser = argparse.ArgumentParser(description="ONNX -> MindSpore Lite converter -> Lite CPU runtime")
    parser.add_argument("--onnx", required=True, help="the ONNX model (input named x, NCHW float32)")
    parser.add_argument("--inputs", help="directory of x_b<N>.npy inputs; logits_b<N>.npy go there")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--optimize", choices=("general", "none"), default="general")
    parser.add_argument("--json-out")
    parser.add_argument("--convert-to", help=argparse.SUPPRESS)  # the child of convert_in_child: convert only
    parser.add_argument("--shape", help=argparse.SUPPRESS)
    opt = parser.parse_args(argv)
    if opt.convert_to:
        return convert(opt.onnx, opt.convert_to, [int(d) for d in opt.shape.split(",")], opt.optimize)
    import mindspore_lite as mslite

    result = {"lite_version": mslite.__version__, "optimize": opt.optimize, "threads": opt.threads}
    inputs = glob.glob(os.path.join(opt.inputs, "x_b*.npy"))
    batches = sorted((int(re.search(r"x_b(\d+)\.npy$", path).group(1)) for path in inputs), reverse=True)
    for batch in batches:
        x = np.load(os.path.join(opt.inputs, "x_b%d.npy" % batch))
        stem = os.path.join(opt.inputs, "lite_b%d" % batch)
        path, result["b%d_convert_s" % batch] = convert_in_child(opt.onnx, stem, list(x.shape), opt.optimize)
        start = time.perf_counter()
        model = build(path, opt.threads)
        result["b%d_build_s" % batch] = time.perf_counter() - start
        times, logits = time_model(model, x, opt.warmup, opt.steps)
        np.save(os.path.join(opt.inputs, "logits_b%d.npy" % batch), logits)
        median = statistics.median(times[opt.warmup:])
        result["b%d_steps_s" % batch] = times
        result.update({"b1_ms": median * 1000} if batch == 1 else {"img_s": batch / median, "batch": batch})
        del model
        os.remove(path)  # F0's Lite MINDIR is 460 MB
    with open(opt.json_out, "w") as f:
        json.dump(result, f)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
