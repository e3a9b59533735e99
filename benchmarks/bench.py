"""This project against timm on the same CPU: training, evaluation, MINDIR and input-pipeline speed.

    python benchmarks/bench.py [--steps 5] [--quick] [--only train,eval_timm,curves,...] [--output-dir benchmarks]
    make bench

One run measures, on this machine with the same thread count for both frameworks (default:
the cores this process may use; torch.set_num_threads and src.run.context.set_cpu_threads):

  train     dm_nfnet_f0, batch 8, 192x192, fixed random images and soft (Mixup-style) targets.
            Ours: the TrainStep cell built as train.py builds it from the F0 config (SGD-AGC,
            soft-target loss, loss scale, EMA), Graph mode. timm: SGD (Nesterov, momentum 0.9,
            weight decay 2e-5 off gains and biases), timm.utils.adaptive_clip_grad(0.01) on all
            but the head (as timm's train.py), cross entropy with label smoothing 0.1.
            img/s from the median step after warm-up; compile s = first step - median step;
            peak resident memory of the whole process (ru_maxrss).
  eval      the eval-mode network at 256x256: batch 8 img/s and batch 1 latency (ours in Graph
            mode, timm under torch.no_grad).
  mindir    our folded MINDIR written by src/deploy/export.py (one per batch size) with the fused CPU
            kernels (export.py --conv_impl fused_cpu), loaded with mindspore.load + nn.GraphCell, against
            timm eager.
  lite      our folded ONNX model through MindSpore Lite 2.0.0's converter and CPU runtime (benchmarks/lite_cpu.py
            in the Lite wheel's Python 3.7 venv that `make test-lite` makes; skipped, saying so, without it; not
            in --quick), against timm eager and the fastest peer route.
  onnx      our folded ONNX model (export.py --file_format ONNX --dynamic_batch, one file for both
            batch sizes) in ONNX Runtime on the CPU with the same thread count, against timm eager.
  pipeline  training input pipeline img/s, 2 workers, batch 32, over a generated folder of 256
            JPEGs of 500x375 (benchmarks/data_pipeline.py): ours through build_train_dataset with
            the F0 config (decode, random resized crop, flip, RandAugment rand-m5-n4-mstd0.5-inc1,
            normalize, Mixup/CutMix); timm's create_transform + Mixup in a torch DataLoader.
            Median over timed epochs after a warm-up epoch.
  mindrecord our pipeline over MindRecord vs over the folder (data_pipeline.measure_folder_vs_mindrecord);
            default run (last, after the curves) or --only mindrecord.
  flops     conv and linear MACs per image, counted layer by layer on timm's model and on ours at
            every resolution the run uses (benchmarks/flops.py); train FLOPs = 6 x MACs x batch.
  peak      each framework's float32 matmul GFLOP/s on 2048^3 and on the F0 stage-3 1x1 and grouped
            3x3 im2col shapes (benchmarks/matmul_peak.py), timed in the train rounds' turns: with the
            FLOPs, the train and eval rows' GFLOP/s and their share of the peak ("% of the machine's
            limit") are printed.
  curves    train step time and peak RSS against batch size (1-16 at the train size) and resolution
            (128-256 at the train batch), each point a fresh train worker (benchmarks/scaling.py):
            the numbers in results.json, the chart in <output-dir>/scaling.png. Warm-up 2 steps,
            --curve-steps timed steps (default 3), more at the cheaper points (scaling.point_steps).

The two pipeline workers run --pipeline-rounds times, taking turns (ours first in even rounds),
each a fresh process; a row's img/s is the median over all its timed epochs, and the spread of
the rounds is printed, so a load change on a shared machine hits both. The eval-network workers
(ours, timm eager, channels_last, torch.compile) run --eval-rounds times the same way, their rows
the medians over every round's timed calls, and so do the four train workers (--train-rounds).
Within a round, the train workers with the two matmul-peak workers, the eval-network workers, the two
ONNX workers and each curve point's three train forms run in turns (benchmarks/turns.py): alive
together, one call at a time, A B C A B C ..., so that a change in the machine's speed hits every
framework alike.

Each measurement runs in its own subprocess (``bench.py --worker NAME --json-out FILE``), one
after another, with a timeout; a worker that fails, times out or grows past --max-rss-gb (its
process group is killed, protecting a shared machine) is reported as such. The whole run keeps
to --budget-min minutes: a worker's timeout is cut to the time left; the curves run last but for MindRecord,
each sweep's ends first, with fewer timed steps where the main train rows say that all points would not fit
(scaling.fitted_steps), and the points that still do not fit are skipped. Output: a table (ratio > 1: ours better;
ours/timm for throughput, timm/ours for times and memory), the GFLOP/s block, the curves,
<output-dir>/results.json (every number, per-step times, machine and versions),
<output-dir>/results.png (the ratios) and <output-dir>/scaling.png.
"""
import argparse
import datetime
import json
import os
import resource
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # python benchmarks/bench.py
    sys.path.insert(0, ROOT)

from benchmarks import scaling  # noqa: E402  (after the path fix above)
from benchmarks.lite_venv import MISSING as LITE_MISSING, venv_dir, venv_python  # noqa: E402
from benchmarks.report import (collect_metrics, efficiency, format_efficiency, format_rounds,  # noqa: E402
                               format_table, plot_ratios)
from benchmarks.runner import (ISA_LIMITS, available_cores, machine_info, memory_available_gb,  # noqa: E402
                               merge_eval_rounds, merge_peak_rounds, merge_rounds, merge_train_rounds, run_worker,
                               wait_until_quiet)
from benchmarks.turns import run_in_turns, timed_calls  # noqa: E402

F0_CONFIG = os.path.join(ROOT, "src", "configs", "dm_nfnet_f0.yaml")

# Full and --quick sizes. The pipeline keeps the F0 config's 192x192 crops in both.
SIZES = {
    "full": dict(arch="dm_nfnet_f0", train_batch=8, train_size=192, eval_batch=8, eval_size=256, warmup=2, steps=5,
                 num_images=256, pipeline_batch=32, pipeline_epochs=3, pipeline_rounds=3, curve_steps=3,
                 eval_rounds=1, train_rounds=2, peak_square=2048, settle_s=90),
    "quick": dict(arch="dm_nfnet_nano", train_batch=2, train_size=64, eval_batch=2, eval_size=64, warmup=2, steps=1,
                  num_images=16, pipeline_batch=8, pipeline_epochs=1, pipeline_rounds=2, curve_steps=1,
                  eval_rounds=1, train_rounds=1, peak_square=512, settle_s=0),
}
WORKERS = ("flops", "peak_ours", "peak_timm", "train_ours", "train_timm", "train_timm_cl", "train_timm_compile",
           "eval_ours", "mindir_ours", "onnx_ours", "lite_ours", "eval_timm", "eval_timm_cl", "eval_timm_compile", "onnx_timm",
           "pipeline_ours", "pipeline_timm", "curves", "mindrecord")
# MindRecord runs last: it compares our two input routes, not ours with a peer, so the run's --budget-min cuts it
# before a curve point (the AVX2-limits run at a69841c took 1,671 s and cut the 256 px point's channels_last worker)
# Left out of --quick: MindRecord's conversion, and torch.compile's Inductor compile (over 10 min for the nano
# model's eval graph at load 7 on the 2 cores), and MindSpore Lite's route (a Python 3.7 venv that only `make
# test-lite` makes)
NOT_QUICK = ("mindrecord", "train_timm_compile", "eval_timm_compile", "lite_ours")
# Seconds per worker in the default run. Measured on the 2-core machine under a load of 4-5: train_ours
# 245 s, train_timm 86, eval_timm 90, pipelines 8-11, mindrecord 38; at load 7: flops 39, peaks 10-12. "curves" is
# one train worker per point with its own timeout (scaling.point_timeout); --budget-min bounds the whole run.
TIMEOUTS = {"flops": 150, "peak_ours": 90, "peak_timm": 90, "train_ours": 300, "train_timm": 120, "train_timm_cl": 120,
            "train_timm_compile": 480, "eval_ours": 240, "mindir_ours": 210, "onnx_ours": 300, "lite_ours": 480,
            "eval_timm": 120, "eval_timm_cl": 120, "eval_timm_compile": 360, "onnx_timm": 300,
            "pipeline_ours": 45, "pipeline_timm": 45, "mindrecord": 75}
QUICK_TIMEOUT = 120
# make bench must finish within 30 minutes on a fresh clone (issue 29; 25 in issue 18). 24 left the 128 and 256 px
# curve points out in both runs at 222bb58, after the cold torch.compile caches' two compiles (105-172 s each)
BUDGET_MIN = 28
BUSY_LOAD = 0.5  # 1-minute load average above which the numbers are flagged as noisy


# ----------------------------------------------------------------------------- shared helpers

def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux


def summarize(times, warmup, batch):
    """img/s, median / first step and compile (first step - median) from ``timed_calls`` seconds."""
    median = statistics.median(times[warmup:])
    return {"img_s": batch / median, "step_s": median, "first_step_s": times[0],
            "compile_s": times[0] - median, "steps_s": times}


def finite_losses(losses):
    """``losses``; ValueError if one is not finite. A step whose loss is NaN or infinite does not compute
    the training step the row is about (the avx2 `torch.compile` row once timed such steps, issue 29),
    so the worker fails with this reason and the report leaves the route out."""
    import math

    bad = next((i for i, loss in enumerate(losses) if not math.isfinite(loss)), None)
    if bad is not None:
        raise ValueError(f"loss of step {bad + 1} is {losses[bad]!r}: not a valid training step, not timed")
    return losses


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

    from src.run.context import set_cpu_threads

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
    from src.trainers.loss import create_loss

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
    return {**summarize(times, opt.warmup, opt.train_batch), "losses": finite_losses(losses),
            "peak_rss_mb": peak_rss_mb(), "optimizer": cfg.optimizer, "ema": cfg.ema, "trainer": cfg.trainer}


def _train_timm(opt, form):
    """timm's network with SGD + timm's AGC + label-smoothed cross entropy in PyTorch ``form``
    (peers.TORCH_FORMS), and the recipe's weight EMA as timm's train.py keeps it (--model-ema:
    ModelEmaV3), as ours does."""
    import torch
    from timm.optim import param_groups_weight_decay
    from timm.models import model_parameters
    from timm.utils import ModelEmaV3, adaptive_clip_grad

    from benchmarks.peers import torch_form

    torch_setup(opt.threads)
    cfg = load_f0_config(opt.arch)
    model = timm_model(opt.arch, cfg).train()
    optimizer = torch.optim.SGD(param_groups_weight_decay(model, cfg.weight_decay), lr=0.01,
                                momentum=cfg.momentum, nesterov=cfg.use_nesterov)
    clipped = list(model_parameters(model, exclude_head=True))  # timm's train.py: AGC skips the head
    loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=cfg.label_smoothing)
    ema = ModelEmaV3(model, decay=cfg.ema_decay) if cfg.ema else None
    forward, convert = torch_form(model, form)
    images, targets = map(torch.from_numpy, random_batch(opt.train_batch, opt.train_size, cfg.num_classes))
    images = convert(images)
    losses = []

    def step():
        loss = loss_fn(forward(images), targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        adaptive_clip_grad(clipped, clip_factor=cfg.clipping, eps=cfg.eps)
        optimizer.step()
        if ema is not None:
            ema.update(model)
        losses.append(loss.item())

    times = timed_calls(step, opt.warmup, opt.steps)
    return {**summarize(times, opt.warmup, opt.train_batch), "losses": finite_losses(losses),
            "peak_rss_mb": peak_rss_mb(), "form": form}


def train_timm(opt):
    """timm eager, NCHW (the form timm's train.py runs by default)."""
    return _train_timm(opt, "eager")


def train_timm_cl(opt):
    """timm with --channels-last (timm's train.py flag)."""
    return _train_timm(opt, "channels_last")


def train_timm_compile(opt):
    """timm under torch.compile (timm's train.py --torchcompile inductor); the first step compiles."""
    return _train_timm(opt, "compile")


def _eval_timings(run, batch_size, opt, make_input):
    """{img_s, b1_ms, per-step seconds} of ``run(input)`` at batch eval_batch and batch 1; batch 1 times more
    calls (scaling.point_steps, at most 3x: ONNX Runtime's five b1 calls spread 148-209 ms on the Ice Lake)."""
    out = {}
    for batch in (batch_size, 1):
        x = make_input(batch)
        steps = scaling.point_steps(opt.steps, batch, opt.eval_size, batch_size, opt.eval_size, most=3)
        times = timed_calls(lambda: run(x, batch), opt.warmup, steps)
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
    """The eval-mode network in Graph mode, as eval.py runs it (weights standardized once: fold_for_cpu_eval)."""
    from src.deploy.fold import fold_for_cpu_eval

    network, make_input = _eval_network(opt)
    network = fold_for_cpu_eval(network)
    return {**_eval_timings(lambda x, _: network(x).asnumpy(), opt.eval_batch, opt, make_input),
            "peak_rss_mb": peak_rss_mb()}


def mindir_ours(opt):
    """The folded MINDIR with the fused CPU kernels (export.py --conv_impl fused_cpu), written by
    src/deploy/export.py for each batch size, run through nn.GraphCell."""
    import mindspore as ms

    from src.deploy.export import create_deploy_network, export_network

    network, make_input = _eval_network(opt)
    deployed = create_deploy_network(network, "MINDIR", conv_impl="fused_cpu")  # MindSpore's fastest CPU route
    graphs, export_s = {}, {}
    with tempfile.TemporaryDirectory(prefix="bench_mindir_") as tmp:
        for batch in (opt.eval_batch, 1):
            start = time.perf_counter()
            path = export_network(deployed, "MINDIR", os.path.join(tmp, f"{opt.arch}_b{batch}"), batch, opt.eval_size)
            export_s[f"b{batch}"] = time.perf_counter() - start
            graphs[batch] = ms.nn.GraphCell(ms.load(path))
        result = _eval_timings(lambda x, batch: graphs[batch](x).asnumpy(), opt.eval_batch, opt, make_input)
    return {**result, "export_s": export_s, "peak_rss_mb": peak_rss_mb()}


def _our_onnx(opt, directory):
    """(path, export seconds) of our folded ONNX model with a free batch axis (export.py --dynamic_batch)."""
    from src.deploy.export import create_deploy_network, export_network

    network, _ = _eval_network(opt)
    start = time.perf_counter()
    path = export_network(create_deploy_network(network, "ONNX", dynamic_batch=True), "ONNX",
                          os.path.join(directory, opt.arch), 1, opt.eval_size, dynamic_batch=True)
    return path, time.perf_counter() - start


def lite_ours(opt):
    """Our folded ONNX model through MindSpore Lite's converter and CPU runtime (benchmarks/lite_cpu.py, run by
    the Lite wheel's Python 3.7 in a child process); its logits checked against ONNX Runtime's on the same input."""
    import subprocess

    import numpy as np

    from src.deploy.infer_cpu import load_onnx

    make_input = _numpy_input(opt)
    with tempfile.TemporaryDirectory(prefix="bench_lite_") as tmp:
        path, export_s = _our_onnx(opt, tmp)
        for batch in (opt.eval_batch, 1):
            np.save(os.path.join(tmp, f"x_b{batch}.npy"), make_input(batch))
        json_out = os.path.join(tmp, "lite.json")
        subprocess.run([venv_python(), os.path.join(ROOT, "benchmarks", "lite_cpu.py"), "--onnx", path, "--inputs", tmp,
                        "--threads", str(opt.threads), "--warmup", str(opt.warmup), "--steps", str(opt.steps),
                        "--json-out", json_out], check=True)
        with open(json_out) as f:
            result = json.load(f)
        run, _ = load_onnx(path, threads=opt.threads)
        x = np.load(os.path.join(tmp, f"x_b{opt.eval_batch}.npy"))
        lite_logits = np.load(os.path.join(tmp, f"logits_b{opt.eval_batch}.npy"))
        result["max_abs_diff_vs_onnxruntime"] = float(np.abs(lite_logits - run(x)).max())
    children_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {**result, "export_s": export_s, "peak_rss_mb": peak_rss_mb(), "lite_peak_rss_mb": children_mb}


def _timm_onnx(opt, directory):
    """(path, export seconds) of timm's model exported to ONNX (peers.export_timm_onnx)."""
    from benchmarks.peers import export_timm_onnx

    torch_setup(opt.threads)
    model = timm_model(opt.arch, load_f0_config(opt.arch))
    start = time.perf_counter()
    path = export_timm_onnx(model, os.path.join(directory, f"timm_{opt.arch}.onnx"), opt.eval_size)
    return path, time.perf_counter() - start


def _numpy_input(opt):
    num_classes = load_f0_config(opt.arch).num_classes
    return lambda batch: random_batch(batch, opt.eval_size, num_classes)[0]


def _onnx_worker(opt, export):
    """The model ``export(opt, directory)`` writes, in ONNX Runtime (img_s, b1_ms) and in OpenVINO (openvino_*:
    one static-shape compile per batch size, peers.load_openvino), both on the CPU with the bench's threads, timed
    alike by _eval_timings: one export for both runtimes, and OpenVINO's logits checked against ONNX Runtime's."""
    import numpy as np

    from benchmarks.peers import load_openvino
    from src.deploy.infer_cpu import load_onnx

    make_input = _numpy_input(opt)
    with tempfile.TemporaryDirectory(prefix="bench_onnx_") as tmp:
        path, export_s = export(opt, tmp)
        run, _ = load_onnx(path, threads=opt.threads)
        result = _eval_timings(lambda x, _: run(x), opt.eval_batch, opt, make_input)
        openvino = {batch: load_openvino(path, batch, opt.eval_size, opt.threads) for batch in (opt.eval_batch, 1)}
        timings = _eval_timings(lambda x, batch: openvino[batch](x), opt.eval_batch, opt, make_input)
        x = make_input(opt.eval_batch)
        timings["max_abs_diff_vs_onnxruntime"] = float(np.abs(openvino[opt.eval_batch](x) - run(x)).max())
    return {**result, **{f"openvino_{key}": value for key, value in timings.items()}, "export_s": export_s,
            "peak_rss_mb": peak_rss_mb()}


def onnx_ours(opt):
    """Our folded ONNX model in ONNX Runtime and OpenVINO."""
    return _onnx_worker(opt, _our_onnx)


def onnx_timm(opt):
    """timm's model exported to ONNX, in ONNX Runtime and OpenVINO."""
    return _onnx_worker(opt, _timm_onnx)


def _eval_timm(opt, form):
    """timm's eval-mode network in PyTorch ``form`` (peers.TORCH_FORMS) under torch.no_grad."""
    import torch

    from benchmarks.peers import check_form_logits, torch_form

    torch_setup(opt.threads)
    cfg = load_f0_config(opt.arch)
    model = timm_model(opt.arch, cfg).eval()
    forward, convert = torch_form(model, form)

    def run(x, _):
        with torch.no_grad():
            return forward(x)

    def make_input(batch):
        return convert(torch.from_numpy(random_batch(batch, opt.eval_size, cfg.num_classes)[0]))

    timings = _eval_timings(run, opt.eval_batch, opt, make_input)
    with torch.no_grad():
        check_form_logits(run(make_input(1), 1), model(make_input(1)), form)
    return {**timings, "peak_rss_mb": peak_rss_mb(), "form": form}


def eval_timm(opt):
    return _eval_timm(opt, "eager")


def eval_timm_cl(opt):
    return _eval_timm(opt, "channels_last")


def eval_timm_compile(opt):
    return _eval_timm(opt, "compile")


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


def flops(opt):
    """Forward MACs per image, layer by layer, of timm's model and ours at every size the run uses."""
    from benchmarks.flops import count_mindspore, count_torch, summarize_layers
    from src import builders

    torch_setup(opt.threads)
    cfg = load_f0_config(opt.arch)
    sizes = sorted({opt.train_size, opt.eval_size} |
                   {size for _, _, size in scaling.curve_points(opt.train_batch, opt.train_size, opt.quick)})
    model = timm_model(opt.arch, cfg)
    reference = {size: count_torch(model, size) for size in sizes}
    mindspore_setup(opt.threads)
    network = builders.build_network(cfg)
    ours = {size: count_mindspore(network, size) for size in sizes}
    train = summarize_layers(reference[opt.train_size])
    return {"counted_on": "timm", "sizes": sizes,
            "macs_per_image": {str(size): summarize_layers(reference[size])["macs"] for size in sizes},
            "ours_macs_per_image": {str(size): summarize_layers(ours[size])["macs"] for size in sizes},
            "ours_equals_timm": all(ours[size] == reference[size] for size in sizes),  # same names, same MACs
            "layers": train["layers"], "by_kind_at_train_size": train["by_kind"],
            "layers_at_train_size": [list(layer) for layer in reference[opt.train_size]]}


def peak_ours(opt):
    """MindSpore's float32 matmul GFLOP/s (Graph mode, ops.matmul) on benchmarks/matmul_peak.py's shapes."""
    from benchmarks.matmul_peak import matmul_shapes, mindspore_rates

    mindspore_setup(opt.threads)
    return mindspore_rates(matmul_shapes(opt.train_batch, opt.train_size, opt.peak_square), opt.warmup + opt.steps)


def peak_timm(opt):
    """PyTorch's float32 torch.matmul GFLOP/s on the same shapes and thread count."""
    from benchmarks.matmul_peak import matmul_shapes, torch_rates

    return torch_rates(matmul_shapes(opt.train_batch, opt.train_size, opt.peak_square), opt.threads,
                       opt.warmup + opt.steps)


# ----------------------------------------------------------------------------- driver

def skipped(keys, opt):
    """{key: record} of workers not started: under 20 s of the run's --budget-min were left."""
    print(f"{', '.join(keys)}: skipped, over the run's --budget-min {opt.budget_min:g}", flush=True)
    return {key: {"ok": False, "error": f"skipped: over the run's --budget-min {opt.budget_min:g}",
                  "duration_s": 0.0, "result": None} for key in keys}


def run_within_budget(name, opt, workdir, timeout, deadline, key=None, args=(), steps=None):
    """run_worker with its timeout cut to the time left before ``deadline``; skipped when under 20 s are left."""
    key = key or name
    left = deadline - time.perf_counter()
    if left < 20:
        return skipped([key], opt)[key]
    timeout = min(timeout, left)
    print(f"{key} (timeout {timeout:.0f} s) ...", end=" ", flush=True)
    record = run_worker(name, opt, timeout, workdir, key=key, args=args, steps=steps)
    print(f"{record['duration_s']} s" + ("" if record["ok"] else f", FAILED: {record['error']}"), flush=True)
    return record


def run_turns_within_budget(entries, opt, workdir, deadline):
    """{key: record} of ``entries`` ([{name, key, args, steps, timeout}]) run in turns (benchmarks/turns.py),
    their timeouts cut in proportion to fit the time left before ``deadline``; skipped when under 20 s are left."""
    left = deadline - time.perf_counter()
    keys = [entry["key"] for entry in entries]
    if left < 20:
        return skipped(keys, opt)
    scale = min(1.0, left / sum(entry["timeout"] for entry in entries))
    entries = [dict(entry, timeout=entry["timeout"] * scale) for entry in entries]
    print(f"{', '.join(keys)} in turns ...", flush=True)
    records = run_in_turns(entries, opt, workdir, lambda entry: run_worker(
        entry["name"], opt, entry["timeout"], workdir, key=entry["key"], args=entry["args"], steps=entry["steps"]))
    for key, record in records.items():
        print(f"  {key}: {record['duration_s']} s" + ("" if record["turns"] else " (alone: memory)")
              + ("" if record["ok"] else f", FAILED: {record['error']}"), flush=True)
    return records


def worker_timeout(name, opt):
    return (QUICK_TIMEOUT if opt.quick else TIMEOUTS[name]) * opt.timeout_scale


PIPELINES = ("pipeline_ours", "pipeline_timm")
EVAL_NETWORKS = ("eval_ours", "eval_timm", "eval_timm_cl", "eval_timm_compile")
TRAINS = ("train_ours", "train_timm", "train_timm_cl", "train_timm_compile")
PEAKS = ("peak_ours", "peak_timm")
# the matmul peaks take turns with the train steps they bound: a separate worker's limit was 205-249 GFLOP/s
# on the same Ice Lake in different runs (issue 29)
TRAIN_TURNS = PEAKS + TRAINS
ONNX_ROUTES = ("onnx_ours", "onnx_timm")  # ours and timm's ONNX, each in ONNX Runtime and OpenVINO


def run_rounds(group, rounds, merge, names, opt, workdir, deadline, in_turns=False):
    """The workers of `group` that `names` selects, in `rounds` interleaved rounds (the order reversed in
    odd rounds, so that a load change hits every worker), each merged by `merge(name, records)`; `in_turns`: each
    round's workers run in turns (benchmarks/turns.py), the round's order the order of their turns. One round
    keeps the worker's own name."""
    members = [name for name in group if name in names]
    records = {name: [] for name in members}
    for index in range(rounds):
        order = members if index % 2 == 0 else members[::-1]
        keys = {name: name if rounds == 1 else f"{name}_round{index + 1}" for name in order}
        if in_turns and order:
            done = run_turns_within_budget([{"name": name, "key": keys[name], "args": (), "steps": None,
                                             "timeout": worker_timeout(name, opt)} for name in order],
                                           opt, workdir, deadline)
        else:
            done = {keys[name]: run_within_budget(name, opt, workdir, worker_timeout(name, opt), deadline,
                                                  key=keys[name]) for name in order}
        for name in order:
            records[name].append(done[keys[name]])
    return {name: merge(name, rounds_of_name) for name, rounds_of_name in records.items()}


def curve_cost_basis(workers, opt):
    """scaling.CostBasis of one curve point from the main train rows' first rounds: each form's start-up and
    compile (its active time less its steps) and its step at the train batch and size, the forms summed. None
    when a train row is missing (--only curves)."""
    fixed_s = step_s = 0.0
    for _, worker in scaling.FRAMEWORKS:
        record = workers.get(worker) or {}
        if not record.get("ok"):
            return None
        first = (record.get("rounds") or [record])[0]
        step_s += first["result"]["step_s"]
        fixed_s += max(0.0, first["duration_s"] - (opt.warmup + opt.steps) * first["result"]["step_s"])
    return scaling.CostBasis(fixed_s, step_s, opt.warmup, opt.train_batch, opt.train_size)


def run_curves(opt, workdir, deadline, workers):
    """{scaling.point_key: record} of every curve point, each point's train forms in turns; the main train rows
    stand for their own point. The points run ends first (scaling.run_order), with fewer timed steps where the
    main train rows' times say that all would not fit in the time left (scaling.fitted_steps); a point whose
    estimate exceeds the time left is skipped rather than started."""
    records = {scaling.point_key(framework, opt.train_batch, opt.train_size): workers[worker]
               for framework, worker in scaling.FRAMEWORKS if (workers.get(worker) or {}).get("ok")}
    # (batch, size): [(worker, key)] of the forms still to run, each point once (the train size's is in both sweeps)
    todo = {}
    for _, batch, size in scaling.run_order(scaling.curve_points(opt.train_batch, opt.train_size, opt.quick)):
        keys = [(worker, scaling.point_key(framework, batch, size)) for framework, worker in scaling.FRAMEWORKS]
        forms = [(worker, key) for worker, key in keys if key not in records]
        if forms:
            todo.setdefault((batch, size), forms)
    pairs = list(todo)
    basis = None if opt.quick else curve_cost_basis(workers, opt)
    steps = (scaling.fitted_steps(pairs, opt.curve_steps, basis, deadline - time.perf_counter()) if basis else
             {pair: scaling.point_steps(opt.curve_steps, *pair, opt.train_batch, opt.train_size) for pair in pairs})
    for pair, forms in todo.items():
        if basis and scaling.point_cost_s(pair, steps[pair], basis) > deadline - time.perf_counter():
            records.update(skipped([key for _, key in forms], opt))
            continue
        batch, size = pair
        records.update(run_turns_within_budget([{
            "name": worker, "key": key, "args": ("--batch", batch, "--size", size), "steps": steps[pair],
            "timeout": scaling.point_timeout(worker, batch, size, opt.train_batch, opt.train_size,
                                             QUICK_TIMEOUT if opt.quick else None) * opt.timeout_scale}
            for worker, key in forms], opt, workdir, deadline))
    return records


def selected_workers(only, quick):
    if not only:
        return [w for w in WORKERS if not (quick and w in NOT_QUICK)]
    wanted = [item.strip() for item in only.split(",") if item.strip()]
    unknown = [item for item in wanted if not any(w == item or w.split("_")[0] == item for w in WORKERS)]
    if unknown:
        raise ValueError(f"--only: unknown {', '.join(unknown)}; choose from {', '.join(WORKERS)} "
                         f"or train, eval, pipeline, peak")
    return [w for w in WORKERS if w in wanted or w.split("_")[0] in wanted]


def drive(opt):
    names = selected_workers(opt.only, opt.quick)
    output_dir = os.path.abspath(opt.output_dir)
    os.makedirs(output_dir, exist_ok=True)
    started = time.perf_counter()
    deadline = started + 60 * opt.budget_min
    settled_s = wait_until_quiet(BUSY_LOAD, opt.settle_s)
    date = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    machine = dict(machine_info(opt.threads), settled_s=settled_s)
    workers, curve_records = {}, {}
    with tempfile.TemporaryDirectory(prefix="bench_") as workdir:
        if any(name.startswith("pipeline") for name in names):
            from benchmarks.data_pipeline import write_jpegs

            opt.data_dir = os.path.join(workdir, "jpegs")
            mean_bytes = write_jpegs(opt.data_dir, opt.num_images)
            print(f"{opt.num_images} JPEGs written (mean {mean_bytes / 1024:.0f} KB)", flush=True)
        for name in names:
            if name in PIPELINES:
                if name not in workers:
                    workers.update(run_rounds(PIPELINES, opt.pipeline_rounds, lambda _, records: merge_rounds(records),
                                              names, opt, workdir, deadline))
            elif name in TRAIN_TURNS:
                # two AVX2 runs minutes apart (kernels differing in one reduction) measured ours 2.76 and
                # 2.34 img/s, torch.compile 2.11 and 3.03
                if name not in workers:
                    workers.update(run_rounds(TRAIN_TURNS, opt.train_rounds, lambda name, records: (
                        merge_peak_rounds(records) if name in PEAKS
                        else merge_train_rounds(records, opt.train_batch, opt.warmup)),
                        names, opt, workdir, deadline, in_turns=True))
            elif name in EVAL_NETWORKS:
                # one slow process decided the eval rows before (5.09 img/s; six later single runs 6.2-7.1)
                if name not in workers:
                    workers.update(run_rounds(EVAL_NETWORKS, opt.eval_rounds,
                                              lambda _, records: merge_eval_rounds(records, opt.eval_batch, opt.warmup),
                                              names, opt, workdir, deadline, in_turns=True))
            elif name in ONNX_ROUTES:
                if name not in workers:
                    workers.update(run_rounds(ONNX_ROUTES, 1, lambda _, records: records[0], names, opt, workdir,
                                              deadline, in_turns=True))
            elif name == "curves":
                curve_records = run_curves(opt, workdir, deadline, workers)
            elif name == "lite_ours" and venv_python() is None:
                workers[name] = {"ok": False, "error": LITE_MISSING.format(venv_dir()), "duration_s": 0.0,
                                 "result": None}
                print(f"{name}: {workers[name]['error']}", flush=True)
            else:
                workers[name] = run_within_budget(name, opt, workdir, worker_timeout(name, opt), deadline)
    settings = {key: getattr(opt, key) for key in SIZES["full"]}
    settings.update(threads=opt.threads, workers=opt.workers, quick=opt.quick, only=opt.only, isa_limit=opt.isa,
                    max_rss_gb=opt.max_rss_gb, budget_min=opt.budget_min)
    metrics = collect_metrics(workers, settings)
    flop_count = (workers.get("flops") or {}).get("result")
    macs_by_size = {int(size): macs for size, macs in (flop_count or {}).get("macs_per_image", {}).items()}
    eff = efficiency(workers, settings, macs_by_size)
    curves = scaling.collect_curves(scaling.curve_points(opt.train_batch, opt.train_size, opt.quick), curve_records,
                                    macs_by_size, eff["machine_limit_gflop_s"]) if "curves" in names else None
    # the curve points' own records (a main train row standing for its point is in "workers" already)
    workers.update({key: record for key, record in curve_records.items()
                    if not any(record is row for row in workers.values())})
    results = {"date": date, "total_s": round(time.perf_counter() - started, 1), "machine": machine,
               "settings": settings, "metrics": metrics, "flops": flop_count, "efficiency": eff,
               "scaling": curves, "workers": workers}
    with open(os.path.join(output_dir, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    isa = machine["isa"] if opt.isa == "native" else f"{opt.isa} (limited on {machine['isa']})"
    cpu = f"{machine['cpu']} ({machine['cpu_id']})" if machine.get("cpu_id") else machine["cpu"]
    title = (f"{opt.arch}, {cpu} {isa}, {opt.threads} threads, mindspore {machine['mindspore']} vs "
             f"torch {machine['torch']} / timm {machine['timm']}, {date}")
    outputs = [os.path.join(output_dir, "results.json"), os.path.join(output_dir, "results.png")]
    plot_ratios(metrics, outputs[1], title)
    if metrics or not all(record["ok"] for record in workers.values()):
        print(format_table(metrics, workers))
    for block in (format_rounds(workers), format_efficiency(eff, flop_count, settings),
                  curves and scaling.format_curves(curves)):
        if block:
            print(block)
    if curves:
        outputs.append(os.path.join(output_dir, "scaling.png"))
        scaling.plot_curves(curves, outputs[-1], title)
    load = machine["load_avg_at_start"][0]
    if load > BUSY_LOAD:
        print(f"warning: the machine was busy before the run (1-minute load average {load:.1f} on "
              f"{machine['cores']} cores): numbers are noisy; PyTorch's threads slow down many-fold when another "
              f"process holds a core")
    print(f"total {results['total_s']} s; {', '.join(outputs)}")
    return results


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="This project against timm on the same CPU (see the module doc).")
    parser.add_argument("--steps", type=int, help="timed steps after warm-up (default 5; --quick 1)")
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes for a smoke test: dm_nfnet_nano, batch 2, 64x64, 16 images")
    parser.add_argument("--only", help=f"comma list of {', '.join(WORKERS)} (or train, eval, pipeline, peak)")
    parser.add_argument("--output-dir", default=os.path.join(ROOT, "benchmarks"),
                        help="where results.json, results.png and scaling.png go (default benchmarks/)")
    parser.add_argument("--threads", type=int, default=available_cores(),
                        help="threads of both frameworks (default: the usable cores)")
    parser.add_argument("--workers", type=int, default=2, help="input-pipeline worker processes")
    parser.add_argument("--pipeline-rounds", type=int,
                        help="interleaved rounds of the two pipeline workers (default 3; --quick 2)")
    parser.add_argument("--eval-rounds", type=int,
                        help="interleaved rounds of the eval-network workers (default 1: their calls take turns)")
    parser.add_argument("--train-rounds", type=int,
                        help="interleaved rounds of the four train workers (default 2; --quick 1)")
    parser.add_argument("--curve-steps", type=int, help="timed steps per curve point (default 3; --quick 1)")
    parser.add_argument("--timeout-scale", type=float, default=1.0, help="multiplies every worker's timeout")
    parser.add_argument("--settle-s", type=float,
                        help=f"first wait up to this many seconds for the 1-minute load average to fall to "
                             f"{BUSY_LOAD} (default 90; --quick 0)")
    parser.add_argument("--budget-min", type=float, default=BUDGET_MIN,
                        help=f"minutes for the whole run: timeouts are cut to the time left, curve points that "
                             f"do not fit are skipped (default {BUDGET_MIN})")
    parser.add_argument("--max-rss-gb", type=float, default=None,
                        help="kill a worker whose processes hold more resident memory (default: 90%% of the "
                             "memory available at start)")
    parser.add_argument("--isa", choices=sorted(ISA_LIMITS), default="native",
                        help="avx2: limit oneDNN (ONEDNN_MAX_CPU_ISA), PyTorch (ATEN_CPU_CAPABILITY) and our kernels "
                             "(-march=x86-64-v3) to AVX2, to measure an AVX2 machine's path on an AVX-512 one")
    parser.add_argument("--worker", choices=WORKERS, help=argparse.SUPPRESS)
    parser.add_argument("--json-out", help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, help=argparse.SUPPRESS)  # a curve point's train batch
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)  # a curve point's train size
    opt = parser.parse_args(argv)
    for key, value in SIZES["quick" if opt.quick else "full"].items():
        if getattr(opt, key, None) is None:
            setattr(opt, key, value)
    opt.train_batch = opt.batch or opt.train_batch
    opt.train_size = opt.size or opt.train_size
    for key in ("steps", "pipeline_rounds", "eval_rounds", "train_rounds", "curve_steps"):
        if getattr(opt, key) < 1:
            parser.error(f"--{key.replace('_', '-')} must be >= 1")
    try:
        selected_workers(opt.only, opt.quick)
    except ValueError as exc:
        parser.error(str(exc))
    if opt.max_rss_gb is None:
        opt.max_rss_gb = round(0.9 * memory_available_gb(), 1)
    return opt


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
