"""This project against timm on the same CPU: training, evaluation, MINDIR and input-pipeline speed.

    python benchmarks/bench.py [--steps 5] [--quick] [--only train,eval_timm,...] [--output-dir benchmarks]
    make bench

One run measures, on this machine with the same thread count for both frameworks (default:
the cores this process may use; torch.set_num_threads and src.tools.context.set_cpu_threads):

  train     dm_nfnet_f0, batch 8, 192x192, fixed random images and soft (Mixup-style) targets.
            Ours: the TrainStep cell built as train.py builds it from the F0 config (SGD-AGC,
            soft-target loss, loss scale, EMA), Graph mode. timm: SGD (Nesterov, momentum 0.9,
            weight decay 2e-5 off gains and biases), timm.utils.adaptive_clip_grad(0.01) on all
            but the head (as timm's train.py), cross entropy with label smoothing 0.1.
            img/s from the median step after warm-up; compile s = first step - median step;
            peak resident memory of the whole process (ru_maxrss).
  eval      the eval-mode network at 256x256: batch 8 img/s and batch 1 latency (ours in Graph
            mode, timm under torch.no_grad).
  mindir    our folded MINDIR written by src/deploy/export.py (one per batch size) with the CPU-speed
            convolutions (conv_impl "im2col_cpu"), loaded with mindspore.load + nn.GraphCell, against
            timm eager.
  onnx      our folded ONNX model (export.py --file_format ONNX --dynamic_batch, one file for both
            batch sizes) in ONNX Runtime on the CPU with the same thread count, against timm eager.
  pipeline  training input pipeline img/s, 2 workers, batch 32, over a generated folder of 256
            JPEGs of 500x375 (benchmarks/data_pipeline.py): ours through build_train_dataset with
            the F0 config (decode, random resized crop, flip, RandAugment rand-m5-n4-mstd0.5-inc1,
            normalize, Mixup/CutMix); timm's create_transform + Mixup in a torch DataLoader.
            Median over timed epochs after a warm-up epoch.
  mindrecord our pipeline over MindRecord vs over the folder (data_pipeline.measure_folder_vs_mindrecord);
            default run or --only mindrecord.

Each measurement runs in its own subprocess (``bench.py --worker NAME --json-out FILE``), one
after another, with a timeout; a worker that fails, times out or grows past --max-rss-gb (its
process group is killed, protecting a shared machine) is reported as such. Output: a table
(ratio > 1: ours better; ours/timm for throughput, timm/ours for times and memory),
<output-dir>/results.json (every number, per-step times, machine and versions) and
<output-dir>/results.png (the ratios).
"""
import argparse
import datetime
import json
import os
import platform
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # python benchmarks/bench.py
    sys.path.insert(0, ROOT)

F0_CONFIG = os.path.join(ROOT, "src", "configs", "dm_nfnet_f0.yaml")

# Full and --quick sizes. The pipeline keeps the F0 config's 192x192 crops in both.
SIZES = {
    "full": dict(arch="dm_nfnet_f0", train_batch=8, train_size=192, eval_batch=8, eval_size=256, warmup=2, steps=5,
                 num_images=256, pipeline_batch=32, pipeline_epochs=3),
    "quick": dict(arch="dm_nfnet_nano", train_batch=2, train_size=64, eval_batch=2, eval_size=64, warmup=2, steps=1,
                  num_images=16, pipeline_batch=8, pipeline_epochs=1),
}
WORKERS = ("train_ours", "train_timm", "eval_ours", "mindir_ours", "onnx_ours", "eval_timm", "pipeline_ours", "pipeline_timm",
           "mindrecord")
# Seconds per worker in the default run: together 19.25 minutes, the bound of a whole run. Measured on
# the 2-core machine under a load of 4-5: train_ours 245 s, train_timm 86, eval_timm 90, pipelines 8-11,
# mindrecord 38.
TIMEOUTS = {"train_ours": 300, "train_timm": 120, "eval_ours": 240, "mindir_ours": 210, "onnx_ours": 180,
            "eval_timm": 120,
            "pipeline_ours": 45, "pipeline_timm": 45, "mindrecord": 75}
QUICK_TIMEOUT = 120
BUSY_LOAD = 0.5  # 1-minute load average above which the numbers are flagged as noisy

# (key, label, unit, better, (ours worker, field), (reference worker, field))
METRICS = (
    ("train_img_s", "train img/s (b{train_batch}, {train_size}px)", "img/s", "higher",
     ("train_ours", "img_s"), ("train_timm", "img_s")),
    ("compile_s", "compile s (first step - median)", "s", "lower",
     ("train_ours", "compile_s"), ("train_timm", "compile_s")),
    ("peak_rss_mb", "train peak RSS MB", "MB", "lower", ("train_ours", "peak_rss_mb"), ("train_timm", "peak_rss_mb")),
    ("eval_img_s", "eval b{eval_batch} img/s ({eval_size}px)", "img/s", "higher",
     ("eval_ours", "img_s"), ("eval_timm", "img_s")),
    ("eval_b1_ms", "eval b1 ms", "ms", "lower", ("eval_ours", "b1_ms"), ("eval_timm", "b1_ms")),
    ("mindir_img_s", "MINDIR b{eval_batch} img/s (vs timm eager)", "img/s", "higher",
     ("mindir_ours", "img_s"), ("eval_timm", "img_s")),
    ("mindir_b1_ms", "MINDIR b1 ms (vs timm eager)", "ms", "lower",
     ("mindir_ours", "b1_ms"), ("eval_timm", "b1_ms")),
    ("onnx_img_s", "ONNX Runtime b{eval_batch} img/s (vs timm eager)", "img/s", "higher",
     ("onnx_ours", "img_s"), ("eval_timm", "img_s")),
    ("onnx_b1_ms", "ONNX Runtime b1 ms (vs timm eager)", "ms", "lower",
     ("onnx_ours", "b1_ms"), ("eval_timm", "b1_ms")),
    ("pipeline_img_s", "pipeline img/s ({workers} workers)", "img/s", "higher",
     ("pipeline_ours", "img_s"), ("pipeline_timm", "img_s")),
    ("mindrecord_img_s", "MindRecord img/s (timm col: our folder)", "img/s", "higher",
     ("mindrecord", "mindrecord_img_s"), ("mindrecord", "folder_img_s")),
)


# ----------------------------------------------------------------------------- shared helpers

def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux


def timed_calls(fn, warmup, steps):
    """Seconds of each of warmup + steps calls of ``fn``."""
    times = []
    for _ in range(warmup + steps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def summarize(times, warmup, batch):
    """img/s, median / first step and compile (first step - median) from ``timed_calls`` seconds."""
    median = statistics.median(times[warmup:])
    return {"img_s": batch / median, "step_s": median, "first_step_s": times[0],
            "compile_s": times[0] - median, "steps_s": times}


def random_batch(batch, size, num_classes, smoothing=0.1, seed=0):
    """(images NCHW float32, soft targets): each target mixes two smoothed one-hots, as Mixup does."""
    import numpy as np

    rng = np.random.default_rng(seed)
    images = rng.standard_normal((batch, 3, size, size), dtype=np.float32)
    labels = rng.integers(0, num_classes, batch)
    off = smoothing / num_classes

    def one_hot(index):
        target = np.full((batch, num_classes), off, np.float32)
        target[np.arange(batch), index] = 1.0 - smoothing + off
        return target

    lam = 0.7
    return images, lam * one_hot(labels) + (1 - lam) * one_hot(labels[::-1])


def load_f0_config(arch, **overrides):
    """The F0 recipe on CPU, with ``arch`` swapped in for --quick."""
    from src.config import load_config

    return load_config(F0_CONFIG, {"device_target": "CPU", "arch": arch, **overrides})


def mindspore_setup(threads):
    import mindspore as ms

    from src.tools.context import set_cpu_threads

    ms.set_device("CPU")
    ms.set_context(mode=ms.GRAPH_MODE)
    set_cpu_threads(threads)
    ms.set_seed(0)


def torch_setup(threads):
    import torch

    torch.set_num_threads(threads)
    torch.manual_seed(0)


def timm_model(arch, cfg):
    """timm's network for ``arch`` (random weights): dm_nfnet_f0, or for --quick a NormFreeNet with
    the NfCfg of the project's dm_nfnet_nano, which timm does not register."""
    import timm

    regularization = dict(num_classes=cfg.num_classes, drop_rate=cfg.drop_rate, drop_path_rate=cfg.drop_path_rate)
    if arch != "dm_nfnet_nano":
        return timm.create_model(arch, pretrained=False, **regularization)
    from timm.models.nfnet import NfCfg, NormFreeNet

    nano = NfCfg(depths=(1, 1, 1, 1), channels=(64, 128, 256, 256), stem_type="deep_quad", stem_chs=32,
                 group_size=16, bottle_ratio=0.5, extra_conv=True, gamma_in_act=True, same_padding=True,
                 skipinit=True, num_features=512, act_layer="gelu", attn_layer="se", attn_kwargs=dict(rd_ratio=0.5))
    return NormFreeNet(nano, **regularization)


# ----------------------------------------------------------------------------- workers

def train_ours(opt):
    """The project's TrainStep cell, built as train.py builds it, called on a fixed batch."""
    import mindspore as ms

    from src import builders
    from src.tools.criterion import create_loss

    mindspore_setup(opt.threads)
    cfg = load_f0_config(opt.arch, batch_size=opt.train_batch, input_size=opt.train_size)
    network = builders.build_network(cfg)
    loss_fn = create_loss(label_smoothing=cfg.label_smoothing, soft_targets=True)  # the F0 recipe mixes
    lr_schedule, _, _ = builders.build_lr_schedule(cfg, steps_per_epoch=100, group_size=1)
    optimizer = builders.build_optimizer(cfg, network, lr_schedule)
    train_cell, _ = builders.build_trainer(cfg, network, loss_fn, optimizer)
    train_cell.set_train()
    images, targets = random_batch(opt.train_batch, opt.train_size, cfg.num_classes)
    images, targets = ms.Tensor(images), ms.Tensor(targets)
    losses = []
    times = timed_calls(lambda: losses.append(float(train_cell(images, targets).asnumpy())), opt.warmup, opt.steps)
    return {**summarize(times, opt.warmup, opt.train_batch), "losses": losses, "peak_rss_mb": peak_rss_mb(),
            "optimizer": cfg.optimizer, "ema": cfg.ema, "trainer": cfg.trainer}


def train_timm(opt):
    """timm's network with SGD + timm's AGC + label-smoothed cross entropy, eager PyTorch."""
    import torch
    from timm.optim import param_groups_weight_decay
    from timm.models import model_parameters
    from timm.utils import adaptive_clip_grad

    torch_setup(opt.threads)
    cfg = load_f0_config(opt.arch)
    model = timm_model(opt.arch, cfg).train()
    optimizer = torch.optim.SGD(param_groups_weight_decay(model, cfg.weight_decay), lr=0.01,
                                momentum=cfg.momentum, nesterov=cfg.use_nesterov)
    clipped = list(model_parameters(model, exclude_head=True))  # timm's train.py: AGC skips the head
    loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=cfg.label_smoothing)
    images, targets = map(torch.from_numpy, random_batch(opt.train_batch, opt.train_size, cfg.num_classes))
    losses = []

    def step():
        loss = loss_fn(model(images), targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        adaptive_clip_grad(clipped, clip_factor=cfg.clipping, eps=cfg.eps)
        optimizer.step()
        losses.append(loss.item())

    times = timed_calls(step, opt.warmup, opt.steps)
    return {**summarize(times, opt.warmup, opt.train_batch), "losses": losses, "peak_rss_mb": peak_rss_mb()}


def _eval_timings(run, batch_size, opt, make_input):
    """{img_s, b1_ms, per-step seconds} of ``run(input)`` at batch eval_batch and batch 1."""
    out = {}
    for batch in (batch_size, 1):
        x = make_input(batch)
        times = timed_calls(lambda: run(x, batch), opt.warmup, opt.steps)
        out[f"b{batch}_steps_s"] = times
        if batch == 1:
            out["b1_ms"] = statistics.median(times[opt.warmup:]) * 1000
        else:
            out["img_s"] = batch / statistics.median(times[opt.warmup:])
    return out


def _eval_network(opt):
    """(eval-mode network of the F0 config's arch, its input maker) in Graph mode."""
    import mindspore as ms

    from src import builders

    mindspore_setup(opt.threads)
    cfg = load_f0_config(opt.arch)
    network = builders.build_network(cfg)
    network.set_train(False)
    return network, lambda batch: ms.Tensor(random_batch(batch, opt.eval_size, cfg.num_classes)[0])


def eval_ours(opt):
    """The eval-mode network in Graph mode."""
    network, make_input = _eval_network(opt)
    return {**_eval_timings(lambda x, _: network(x).asnumpy(), opt.eval_batch, opt, make_input),
            "peak_rss_mb": peak_rss_mb()}


def mindir_ours(opt):
    """The folded MINDIR, written by src/deploy/export.py for each batch size, run through nn.GraphCell."""
    import mindspore as ms

    from src.deploy.export import create_deploy_network, export_network

    network, make_input = _eval_network(opt)
    deployed = create_deploy_network(network, "MINDIR", conv_impl="im2col_cpu")  # the CPU route
    graphs, export_s = {}, {}
    with tempfile.TemporaryDirectory(prefix="bench_mindir_") as tmp:
        for batch in (opt.eval_batch, 1):
            start = time.perf_counter()
            path = export_network(deployed, "MINDIR", os.path.join(tmp, f"{opt.arch}_b{batch}"), batch, opt.eval_size)
            export_s[f"b{batch}"] = time.perf_counter() - start
            graphs[batch] = ms.nn.GraphCell(ms.load(path))
        result = _eval_timings(lambda x, batch: graphs[batch](x).asnumpy(), opt.eval_batch, opt, make_input)
    return {**result, "export_s": export_s, "peak_rss_mb": peak_rss_mb()}


def onnx_ours(opt):
    """The folded ONNX model with a free batch axis (export.py --dynamic_batch) in ONNX Runtime."""
    from src.deploy.export import create_deploy_network, export_network
    from src.deploy.infer_cpu import load_onnx

    network, _ = _eval_network(opt)
    cfg = load_f0_config(opt.arch)
    with tempfile.TemporaryDirectory(prefix="bench_onnx_") as tmp:
        start = time.perf_counter()
        path = export_network(create_deploy_network(network, "ONNX", dynamic_batch=True), "ONNX",
                              os.path.join(tmp, opt.arch), 1, opt.eval_size, dynamic_batch=True)
        export_s = time.perf_counter() - start
        run, _ = load_onnx(path, threads=opt.threads)
        result = _eval_timings(lambda x, _: run(x), opt.eval_batch, opt,
                               lambda batch: random_batch(batch, opt.eval_size, cfg.num_classes)[0])
    return {**result, "export_s": export_s, "peak_rss_mb": peak_rss_mb()}


def eval_timm(opt):
    import torch

    torch_setup(opt.threads)
    cfg = load_f0_config(opt.arch)
    model = timm_model(opt.arch, cfg).eval()

    def run(x, _):
        with torch.no_grad():
            model(x)

    def make_input(batch):
        return torch.from_numpy(random_batch(batch, opt.eval_size, cfg.num_classes)[0])

    return {**_eval_timings(run, opt.eval_batch, opt, make_input), "peak_rss_mb": peak_rss_mb()}


def pipeline_ours(opt):
    """build_train_dataset with the F0 config over the generated folder (data_pipeline.pipeline_img_per_s)."""
    import mindspore as ms

    from benchmarks.data_pipeline import pipeline_img_per_s

    ms.set_device("CPU")
    rates = pipeline_img_per_s(opt.data_dir, opt.workers, opt.pipeline_epochs, opt.pipeline_batch)
    return {"img_s": statistics.median(rates), "epochs_img_s": rates}


def pipeline_timm(opt):
    """timm's training transform and Mixup over the same folder, in a torch DataLoader."""
    import torch
    from timm.data import ImageDataset, Mixup, create_transform

    torch_setup(opt.threads)
    cfg = load_f0_config("dm_nfnet_f0")
    transform = create_transform(cfg.input_size, is_training=True, auto_augment=cfg.auto_augment,
                                 interpolation=cfg.interpolation, scale=tuple(cfg.scale), ratio=tuple(cfg.ratio),
                                 hflip=cfg.hflip, re_prob=cfg.re_prob)
    dataset = ImageDataset(os.path.join(opt.data_dir, cfg.train_split), transform=transform)
    loader = torch.utils.data.DataLoader(dataset, batch_size=opt.pipeline_batch, shuffle=True, drop_last=True,
                                         num_workers=opt.workers, persistent_workers=True)
    mixup = Mixup(mixup_alpha=cfg.mix_up, cutmix_alpha=cfg.cutmix, prob=cfg.mixup_prob, switch_prob=cfg.switch_prob,
                  mode=cfg.mixup_mode, label_smoothing=cfg.label_smoothing, num_classes=cfg.num_classes)
    rates = []
    for epoch in range(opt.pipeline_epochs + 1):
        start, images = time.perf_counter(), 0
        for x, y in loader:
            x, y = mixup(x, y)
            images += x.shape[0]
        if epoch:  # epoch 0 warms up: worker start-up, page cache
            rates.append(images / (time.perf_counter() - start))
    return {"img_s": statistics.median(rates), "epochs_img_s": rates}


def mindrecord(opt):
    """Our pipeline over MindRecord vs over the folder, on the same freshly generated JPEGs."""
    from benchmarks.data_pipeline import measure_folder_vs_mindrecord

    return measure_folder_vs_mindrecord(num_images=opt.num_images, workers=opt.workers, rounds=3, epochs=2,
                                        batch_size=opt.pipeline_batch)


# ----------------------------------------------------------------------------- driver

def machine_info(threads):
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    except OSError:
        pass
    versions = {}
    for package in ("mindspore", "torch", "timm", "numpy", "torchvision", "pillow", "onnxruntime"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    try:
        with open("/proc/meminfo") as f:
            mem_gb = round(int(f.readline().split()[1]) / 2 ** 20, 1)
    except (OSError, ValueError, IndexError):
        mem_gb = None
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {"cpu": model, "cores": os.cpu_count(), "usable_cores": available_cores(), "threads": threads,
            "memory_gb": mem_gb, "load_avg_at_start": list(os.getloadavg()), "platform": platform.platform(),
            "python": platform.python_version(), **versions, "git_commit": commit}


def available_cores():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def group_rss_mb(pgid):
    """Resident memory of every process in process group ``pgid`` (the worker and its children)."""
    total = 0
    page = os.sysconf("SC_PAGE_SIZE")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # fields after the name: state, ppid, pgrp, ..., rss (24th overall)
            total += int(fields[21]) * page
    return total / 2 ** 20


def last_lines(path, count=15):
    try:
        with open(path, errors="replace") as f:
            lines = [line.rstrip() for line in f if line.strip()]
    except OSError:
        return []
    return lines[-count:]


def error_line(log_path):
    """': <the last exception line of the log>' (else its last line), or ''."""
    lines = last_lines(log_path, 200)
    found = [line for line in lines if re.match(r"[\w.]*(Error|Exception|Interrupt)\b", line)]
    line = (found or lines or [""])[-1]
    return f": {line[:300]}" if line else ""


def run_worker(name, opt, timeout, workdir):
    """Run one worker in its own process group; {ok, error, duration_s, result, ...}."""
    json_out = os.path.join(workdir, f"{name}.json")
    log_path = os.path.join(workdir, f"{name}.log")
    command = [sys.executable, os.path.abspath(__file__), "--worker", name, "--json-out", json_out,
               "--threads", str(opt.threads), "--steps", str(opt.steps)]
    if opt.data_dir:
        command += ["--data-dir", opt.data_dir]
    if opt.quick:
        command.append("--quick")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    env.setdefault("GLOG_v", "3")  # MindSpore: errors only in the log
    limit_mb = opt.max_rss_gb * 1024
    start, peak_seen, error = time.perf_counter(), 0.0, None
    with open(log_path, "w") as log:
        # cwd: MindSpore's kernel-meta and rank directories go to the scratch directory, not the checkout
        proc = subprocess.Popen(command, cwd=workdir, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        while proc.poll() is None:
            time.sleep(0.5)
            peak_seen = max(peak_seen, group_rss_mb(proc.pid))
            elapsed = time.perf_counter() - start
            if elapsed > timeout:
                error = f"timed out after {timeout:.0f} s"
            elif peak_seen > limit_mb:
                error = f"stopped at {peak_seen / 1024:.1f} GB resident, over --max-rss-gb {opt.max_rss_gb:g}"
            if error:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                break
    try:  # the worker's children (data workers) may outlive it
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    record = {"ok": False, "error": error, "duration_s": round(time.perf_counter() - start, 1),
              "timeout_s": timeout, "group_rss_peak_mb_sampled": round(peak_seen), "result": None}
    if error is None:
        try:
            with open(json_out) as f:
                record["result"] = json.load(f)
            record["ok"] = True
        except (OSError, ValueError):
            signal_name = f" (signal {-proc.returncode}: {signal.Signals(-proc.returncode).name})" \
                if proc.returncode < 0 else ""
            record["error"] = f"exit status {proc.returncode}{signal_name}" + error_line(log_path)
    if not record["ok"]:
        record["log_tail"] = last_lines(log_path)
    return record


def collect_metrics(workers, labels):
    """The table's rows: ours, reference (timm), ratio (> 1: ours better) or the reason one is missing."""
    metrics = {}
    for key, label, unit, better, (ours_worker, ours_field), (ref_worker, ref_field) in METRICS:
        if ours_worker not in workers and ref_worker not in workers:
            continue
        row = {"label": label.format(**labels), "unit": unit, "better": better, "reasons": {}}
        for column, worker, field in (("ours", ours_worker, ours_field), ("timm", ref_worker, ref_field)):
            record = workers.get(worker)
            value = (record.get("result") or {}).get(field) if record else None
            if record is None:
                row["reasons"][column] = f"{worker} not run (--only)"
            elif not record["ok"]:
                row["reasons"][column] = f"{worker}: {record['error']}"
            elif value is None or value <= 0:
                row["reasons"][column] = f"{worker} measured {value!r}, no positive value"
                value = None
            row[column] = None if value is None else round(value, 3)
        ours, ref = row["ours"], row["timm"]
        if ours is not None and ref is not None:
            row["ratio"] = round(ours / ref if better == "higher" else ref / ours, 3)
        else:
            row["ratio"] = None
            row["reasons"]["ratio"] = "a value is missing"
        metrics[key] = row
    return metrics


def format_value(value):
    if value is None:
        return "n/a"
    return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"


def format_table(metrics, workers):
    width = max([len(row["label"]) for row in metrics.values()] + [10])
    lines = [f"{'':<{width}}  {'ours':>9}  {'timm':>9}  {'ratio':>7}", "-" * (width + 33)]
    for row in metrics.values():
        lines.append(f"{row['label']:<{width}}  {format_value(row['ours']):>9}  {format_value(row['timm']):>9}  "
                     f"{format_value(row['ratio']) + ('x' if row['ratio'] is not None else ''):>7}")
    lines.append("ratio > 1: ours better (ours/timm for throughput, timm/ours for times and memory)")
    for name, record in workers.items():
        if not record["ok"]:
            lines.append(f"{name} failed after {record['duration_s']} s: {record['error']}")
    return "\n".join(lines)


def plot_ratios(metrics, path, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [row["label"] for row in metrics.values()]
    ratios = [row["ratio"] or 0.0 for row in metrics.values()]
    fig, ax = plt.subplots(figsize=(10, 0.5 * len(labels) + 1.8))
    colors = ["tab:green" if r >= 1 else "tab:red" for r in ratios]
    bars = ax.barh(labels, ratios, color=colors)
    ax.axvline(1.0, color="black", linewidth=1)
    for bar, row in zip(bars, metrics.values()):
        text = "failed" if row["ratio"] is None else f"{row['ratio']:.2f}x"
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f" {text}", va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, max(ratios + [1.0]) * 1.25)
    ax.set_xlabel("ratio (> 1: this project better than timm)")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def selected_workers(only, quick):
    if not only:
        return [w for w in WORKERS if not (quick and w == "mindrecord")]
    wanted = [item.strip() for item in only.split(",") if item.strip()]
    unknown = [item for item in wanted if not any(w == item or w.split("_")[0] == item for w in WORKERS)]
    if unknown:
        raise SystemExit(f"--only: unknown {', '.join(unknown)}; choose from {', '.join(WORKERS)} "
                         f"or train, eval, pipeline")
    return [w for w in WORKERS if w in wanted or w.split("_")[0] in wanted]


def drive(opt):
    names = selected_workers(opt.only, opt.quick)
    output_dir = os.path.abspath(opt.output_dir)
    os.makedirs(output_dir, exist_ok=True)
    started = time.perf_counter()
    date = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    machine = machine_info(opt.threads)
    workers = {}
    with tempfile.TemporaryDirectory(prefix="bench_") as workdir:
        if any(name.startswith("pipeline") for name in names):
            from benchmarks.data_pipeline import write_jpegs

            opt.data_dir = os.path.join(workdir, "jpegs")
            mean_bytes = write_jpegs(opt.data_dir, opt.num_images)
            print(f"{opt.num_images} JPEGs written (mean {mean_bytes / 1024:.0f} KB)", flush=True)
        for name in names:
            timeout = (QUICK_TIMEOUT if opt.quick else TIMEOUTS[name]) * opt.timeout_scale
            print(f"{name} (timeout {timeout:.0f} s) ...", end=" ", flush=True)
            workers[name] = run_worker(name, opt, timeout, workdir)
            record = workers[name]
            print(f"{record['duration_s']} s" + ("" if record["ok"] else f", FAILED: {record['error']}"), flush=True)
    labels = {key: getattr(opt, key) for key in ("train_batch", "train_size", "eval_batch", "eval_size", "workers")}
    metrics = collect_metrics(workers, labels)
    settings = {key: getattr(opt, key) for key in SIZES["full"]}
    settings.update(threads=opt.threads, workers=opt.workers, quick=opt.quick, only=opt.only,
                    max_rss_gb=opt.max_rss_gb)
    results = {"date": date, "total_s": round(time.perf_counter() - started, 1), "machine": machine,
               "settings": settings, "metrics": metrics, "workers": workers}
    with open(os.path.join(output_dir, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    title = (f"{opt.arch}, {machine['cpu']}, {opt.threads} threads, mindspore {machine['mindspore']} vs "
             f"torch {machine['torch']} / timm {machine['timm']}, {date}")
    plot_ratios(metrics, os.path.join(output_dir, "results.png"), title)
    print(format_table(metrics, workers))
    load = machine["load_avg_at_start"][0]
    if load > BUSY_LOAD:
        print(f"warning: the machine was busy before the run (1-minute load average {load:.1f} on "
              f"{machine['cores']} cores): numbers are noisy; PyTorch's threads slow down many-fold when another "
              f"process holds a core")
    print(f"total {results['total_s']} s; {os.path.join(output_dir, 'results.json')}, "
          f"{os.path.join(output_dir, 'results.png')}")
    return results


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="This project against timm on the same CPU (see the module doc).")
    parser.add_argument("--steps", type=int, help="timed steps after warm-up (default 5; --quick 1)")
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes for a smoke test: dm_nfnet_nano, batch 2, 64x64, 16 images")
    parser.add_argument("--only", help=f"comma list of {', '.join(WORKERS)} (or train, eval, pipeline)")
    parser.add_argument("--output-dir", default=os.path.join(ROOT, "benchmarks"),
                        help="where results.json and results.png go (default benchmarks/)")
    parser.add_argument("--threads", type=int, default=available_cores(),
                        help="threads of both frameworks (default: the usable cores)")
    parser.add_argument("--workers", type=int, default=2, help="input-pipeline worker processes")
    parser.add_argument("--timeout-scale", type=float, default=1.0, help="multiplies every worker's timeout")
    parser.add_argument("--max-rss-gb", type=float, default=None,
                        help="kill a worker whose processes hold more resident memory (default: 90%% of the "
                             "memory available at start)")
    parser.add_argument("--worker", choices=WORKERS, help=argparse.SUPPRESS)
    parser.add_argument("--json-out", help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", help=argparse.SUPPRESS)
    opt = parser.parse_args(argv)
    for key, value in SIZES["quick" if opt.quick else "full"].items():
        if key != "steps" or opt.steps is None:
            setattr(opt, key, value)
    if opt.steps < 1:
        parser.error("--steps must be >= 1")
    if opt.max_rss_gb is None:
        opt.max_rss_gb = round(0.9 * memory_available_gb(), 1)
    return opt


def memory_available_gb():
    with open("/proc/meminfo") as f:
        fields = dict(line.split(":", 1) for line in f)
    return int(fields["MemAvailable"].split()[0]) / 2 ** 20


def main(argv=None):
    opt = parse_args(argv)
    if opt.worker is None:
        return drive(opt)
    result = globals()[opt.worker](opt)
    text = json.dumps(result)
    if opt.json_out:
        with open(opt.json_out, "w") as f:
            f.write(text)
    print(text)
    return result


if __name__ == "__main__":
    main()
