"""benchmarks/: the FLOP count, the matmul-peak shapes, GFLOP/s and % of the peak, the pipeline rounds and
the cost curves, on small inputs (the bench itself: tests/test_bench.py)."""
import json
import math
import os
import time

import pytest

from benchmarks import bench, flops, matmul_peak, scaling
from benchmarks.report import efficiency, format_efficiency, format_rounds
from benchmarks.bench import finite_losses
from benchmarks.peers import check_form_logits
from benchmarks.runner import (cpu_identity, inductor_cache_dir, merge_eval_rounds, merge_peak_rounds, merge_rounds,
                               merge_train_rounds, wait_until_quiet)


def test_layer_macs_of_a_conv_a_grouped_conv_and_a_linear_layer():
    # F0's stem.conv1 at 192 px: 3 -> 16 channels, 3x3, stride 2 -> 96x96
    assert flops.layer_macs((1, 16, 96, 96), 3, 1, (3, 3)) == 96 * 96 * 16 * 3 * 9 == 3_981_312
    # a grouped 3x3 conv: each output sees in_channels / groups inputs per tap
    assert flops.layer_macs((2, 256, 12, 12), 256, 2, (3, 3)) == 2 * 256 * 144 * 128 * 9
    assert flops.layer_macs((4, 1000), 3072) == 4 * 1000 * 3072
    with pytest.raises(ValueError):
        flops.layer_macs((1, 6, 4, 4), 5, 2)


def test_step_gflop_counts_a_mac_as_two_flops_and_training_as_three_passes():
    assert flops.step_gflop(1e9, 8, train=False) == pytest.approx(16.0)
    assert flops.step_gflop(6_977_003_520, 8, train=True) == pytest.approx(334.9, abs=0.1)  # issue 18: ~335


def test_torch_count_of_a_small_network_by_hand():
    torch = pytest.importorskip("torch")
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=2, padding=1), torch.nn.ReLU(),
                              torch.nn.Conv2d(8, 8, 3, padding=1, groups=2), torch.nn.AdaptiveAvgPool2d(1),
                              torch.nn.Flatten(), torch.nn.Linear(8, 10))
    layers = flops.count_torch(net, 16)
    assert [(name, kind) for name, kind, _ in layers] == [("0", "conv"), ("2", "conv"), ("5", "linear")]
    assert [macs for *_, macs in layers] == [8 * 8 * 8 * 3 * 9, 8 * 8 * 8 * 4 * 9, 8 * 10]
    assert net.training  # the mode is restored


@pytest.mark.timeout(300)
def test_ours_and_timm_count_the_same_layers_and_pytorchs_flop_counter_agrees():
    torch = pytest.importorskip("torch")
    pytest.importorskip("timm")
    from torch.utils.flop_counter import FlopCounterMode

    from benchmarks.bench import load_f0_config, timm_model
    from src import builders

    cfg = load_f0_config("dm_nfnet_nano")
    model = timm_model("dm_nfnet_nano", cfg)
    reference = flops.count_torch(model, 64)
    ours = flops.count_mindspore(builders.build_network(cfg), 64)
    assert ours == reference  # every conv/linear layer, same name, same MACs (SE's fc1/fc2 included)
    summary = flops.summarize_layers(reference)
    assert summary["layers"] == len(reference) and set(summary["by_kind"]) == {"conv", "linear"}
    # an independent count of the forward pass: PyTorch's FlopCounterMode (2 FLOPs per MAC)
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        model.eval()(torch.zeros(1, 3, 64, 64))
    assert counter.get_total_flops() == 2 * summary["macs"]


def test_matmul_shapes_are_f0s_stage_3_convolutions():
    shapes = {name: rest for name, *rest in matmul_peak.matmul_shapes(8, 192)}
    assert shapes == {"square": [1, 2048, 2048, 2048], "conv1x1": [1, 768, 1536, 1152],
                      "grouped3x3": [6, 128, 1152, 1152]}
    assert matmul_peak.gflop(1, 2048, 2048, 2048) == pytest.approx(17.18, abs=0.01)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("framework", ["torch", "mindspore"])
def test_matmul_rates_time_every_shape(framework, graph_mode):
    shapes = [("a", 1, 64, 32, 48), ("b", 3, 16, 32, 8)]
    if framework == "torch":
        pytest.importorskip("torch")
        rates = matmul_peak.torch_rates(shapes, threads=1, repeats=2)
    else:
        rates = matmul_peak.mindspore_rates(shapes, repeats=2)
    assert set(rates["shapes"]) == {"a", "b"}
    for name, rate in rates["shapes"].items():
        assert len(rate["times_s"]) == 2 and rate["gflop_s"] > 0 and rate["gflop_s"] >= rate["median_gflop_s"]
    assert rates["best_gflop_s"] == max(rate["gflop_s"] for rate in rates["shapes"].values())


def test_peak_rounds_merge_every_timed_call_of_each_shape():
    def peak(times):  # 2 GFLOP of "a" per call, 1 of "b"
        rates = {"a": matmul_peak.shape_rate([1, 1000, 1000, 1000], times),
                 "b": matmul_peak.shape_rate([1, 500, 1000, 1000], [2 * t for t in times])}
        return _ok(matmul_peak.peak_summary(rates))

    fast, slow = peak([0.01, 0.02, 0.02]), peak([0.04, 0.04, 0.05])
    merged = merge_peak_rounds([slow, fast])
    assert merged["ok"] and merged["rounds"] == [slow, fast]
    rates = merged["result"]["shapes"]
    assert rates["a"]["times_s"] == [0.04, 0.04, 0.05, 0.01, 0.02, 0.02]
    assert rates["a"]["gflop_s"] == 200.0 and rates["a"]["median_gflop_s"] == pytest.approx(2 / 0.03, rel=1e-3)
    assert rates["b"]["gflop_s"] == 50.0
    assert merged["result"]["best_gflop_s"] == 200.0 and merged["result"]["best_shape"] == "a"
    assert merge_peak_rounds([fast]) is fast
    failed = merge_peak_rounds([fast, {"ok": False, "error": "timed out after 90 s", "duration_s": 90.0,
                                       "result": None}])
    assert not failed["ok"] and failed["result"] is None and failed["error"] == "timed out after 90 s"


def _ok(result, duration=1.0):
    return {"ok": True, "error": None, "duration_s": duration, "result": result}


def test_efficiency_gives_gflop_s_and_the_share_of_each_framework_peak():
    workers = {"peak_ours": _ok({"best_gflop_s": 160.0, "shapes": {"a": {"median_gflop_s": 150.0}}}),
               "peak_timm": _ok({"best_gflop_s": 200.0, "shapes": {"a": {"median_gflop_s": 120.0},
                                                                   "b": {"median_gflop_s": 100.0}}}),
               "train_ours": _ok({"step_s": 4.0}), "train_timm": _ok({"step_s": 2.0}),
               "eval_ours": _ok({"img_s": 8.0, "b1_ms": 250.0}),
               "eval_timm": {"ok": False, "error": "timed out", "duration_s": 9.0, "result": None}}
    settings = dict(train_batch=8, train_size=192, eval_batch=8, eval_size=256)
    eff = efficiency(workers, settings, {192: 5e9, 256: 10e9})
    assert eff["machine_limit_gflop_s"] == 200.0 and eff["train_floor_step_s"] == 1.2  # 240 GFLOP at 200 GFLOP/s
    rows = eff["rows"]
    assert set(rows) == {"train_ours", "train_timm", "eval_ours", "eval_b1_ours"}  # eval_timm failed
    assert rows["train_ours"]["step_gflop"] == 240.0 and rows["train_ours"]["gflop_s"] == 60.0  # 6 * 5e9 * 8
    assert rows["train_ours"]["of_framework_peak"] == 0.375 and rows["train_ours"]["of_machine_limit"] == 0.3
    assert eff["median_limit_gflop_s"] == 150.0 and rows["train_ours"]["of_median_limit"] == 0.4
    assert rows["train_timm"]["gflop_s"] == 120.0 and rows["train_timm"]["of_framework_peak"] == 0.6
    assert rows["eval_ours"]["gflop_s"] == 160.0  # 2 * 10e9 * 8 img/s
    assert rows["eval_b1_ours"]["gflop_s"] == 80.0  # 2 * 10e9 / 0.25 s
    text = format_efficiency(eff, {"macs_per_image": {"192": 5e9}, "layers": 82, "ours_equals_timm": True}, settings)
    assert "5 GMAC per image forward at 192px" in text and "the machine's limit 200.0 GFLOP/s (fastest call), " \
        "150.0 GFLOP/s (median call)" in text
    assert "train b8 192px, ours" in text and "38%" in text and "30%" in text
    assert "train step floor at that limit (b8, 192px): 1.2 s, 6.67 img/s" in text


def test_pipeline_rounds_merge_into_the_median_of_every_epoch_with_the_spread():
    ours = merge_rounds([_ok({"img_s": 100.0, "epochs_img_s": [90.0, 100.0, 110.0]}),
                         _ok({"img_s": 130.0, "epochs_img_s": [120.0, 130.0, 140.0]})])
    timm = merge_rounds([_ok({"img_s": 100.0, "epochs_img_s": [100.0, 100.0, 100.0]}),
                         _ok({"img_s": 100.0, "epochs_img_s": [100.0, 100.0, 100.0]})])
    assert ours["ok"] and ours["duration_s"] == 2.0 and len(ours["rounds"]) == 2
    assert ours["result"]["img_s"] == 115.0 and ours["result"]["rounds_img_s"] == [100.0, 130.0]
    line = format_rounds({"pipeline_ours": ours, "pipeline_timm": timm})
    assert "ours 115 (rounds 100-130), timm 100 (rounds 100-100); per-round ratio 1.00-1.30x" in line
    failed = merge_rounds([_ok({"img_s": 1.0, "epochs_img_s": [1.0]}),
                           {"ok": False, "error": "timed out after 45 s", "duration_s": 45.0, "result": None}])
    assert not failed["ok"] and failed["error"] == "timed out after 45 s" and failed["result"] is None
    assert format_rounds({"pipeline_ours": failed, "pipeline_timm": timm}) == ""


def test_eval_rounds_merge_into_the_median_of_every_timed_call_without_each_rounds_warm_up():
    first = _ok({"img_s": 8.0, "b1_ms": 100.0, "peak_rss_mb": 900.0,
                 "b8_steps_s": [9.0, 9.0, 1.0, 1.0, 1.0], "b1_steps_s": [5.0, 5.0, 0.1, 0.1, 0.1]})
    slow = _ok({"img_s": 4.0, "b1_ms": 300.0, "peak_rss_mb": 950.0,
                "b8_steps_s": [9.0, 9.0, 2.0, 2.0, 2.0], "b1_steps_s": [5.0, 5.0, 0.3, 0.3, 0.3]})
    merged = merge_eval_rounds([first, slow, first], batch=8, warmup=2)
    assert merged["ok"] and len(merged["rounds"]) == 3 and merged["duration_s"] == 3.0
    result = merged["result"]
    assert result["img_s"] == 8.0 and result["b1_ms"] == 100.0  # the slow round is one in three
    assert result["rounds_img_s"] == [8.0, 4.0, 8.0] and result["rounds_b1_ms"] == [100.0, 300.0, 100.0]
    assert len(result["b8_steps_s"]) == 9 and 9.0 not in result["b8_steps_s"] and result["peak_rss_mb"] == 950.0
    assert merge_eval_rounds([first], batch=8, warmup=2) is first
    failed = merge_eval_rounds([first, {"ok": False, "error": "timed out after 240 s", "duration_s": 240.0,
                                        "result": None}], batch=8, warmup=2)
    assert not failed["ok"] and failed["error"] == "timed out after 240 s" and failed["result"] is None


def test_train_rounds_merge_into_the_median_of_every_timed_step_and_each_rounds_compile():
    def train(steps, rss):
        return _ok({"img_s": 8 / steps[3], "step_s": steps[3], "first_step_s": steps[0],
                    "compile_s": steps[0] - steps[3], "steps_s": steps, "peak_rss_mb": rss, "losses": [6.9],
                    "form": "eager"})

    first, slow = train([12.0, 3.0, 2.0, 2.0, 2.0], 2600.0), train([20.0, 5.0, 4.0, 4.0, 4.0], 2700.0)
    merged = merge_train_rounds([first, slow, first], batch=8, warmup=2)
    assert merged["ok"] and len(merged["rounds"]) == 3 and merged["duration_s"] == 3.0
    result = merged["result"]
    assert result["step_s"] == 2.0 and result["img_s"] == 4.0  # the slow round is one in three
    assert result["compile_s"] == 10.0 and result["first_step_s"] == 12.0 and result["peak_rss_mb"] == 2700.0
    assert result["rounds_img_s"] == [4.0, 2.0, 4.0] and len(result["steps_s"]) == 15
    assert result["losses"] == [6.9] and result["form"] == "eager"
    assert merge_train_rounds([first], batch=8, warmup=2) is first
    failed = merge_train_rounds([first, {"ok": False, "error": "timed out after 300 s", "duration_s": 300.0,
                                         "result": None}], batch=8, warmup=2)
    assert not failed["ok"] and failed["result"] is None


def test_curve_points_stop_at_128_px_and_share_the_main_train_point():
    points = scaling.curve_points(8, 192)
    assert [(b, s) for sweep, b, s in points if sweep == "batch"] == [(1, 192), (2, 192), (4, 192), (8, 192),
                                                                       (16, 192)]
    assert [(b, s) for sweep, b, s in points if sweep == "resolution"] == [(8, 128), (8, 192), (8, 256)]
    assert scaling.point_timeout("train_ours", 16, 192, 8, 192) > scaling.point_timeout("train_ours", 1, 192, 8, 192)
    assert scaling.point_timeout("train_timm", 8, 192, 8, 192, quick_timeout=120) == 120


def test_curve_points_run_ends_first_and_take_fewer_steps_where_the_time_left_is_short():
    points = scaling.curve_points(8, 192)
    assert [(b, s) for _, b, s in scaling.run_order(points)][:4] == [(16, 192), (8, 256), (8, 128), (1, 192)]
    pairs = [(16, 192), (8, 256), (8, 128), (1, 192), (4, 192), (2, 192)]
    # the 2-core Zen 1's main train rows: 43 s of start-up and compile, 17.1 s per step, the three forms together
    basis = scaling.CostBasis(fixed_s=43.0, step_s=17.1, warmup=2, base_batch=8, base_size=192)
    assert scaling.point_cost_s((16, 192), 1, basis) == pytest.approx(1.25 * (43.0 + 3 * 17.1 * 2))
    roomy = scaling.fitted_steps(pairs, 3, basis, left_s=3000.0)
    assert roomy == {pair: scaling.point_steps(3, *pair, 8, 192) for pair in pairs}
    assert roomy[(1, 192)] == 12 and roomy[(16, 192)] == 3
    assert set(scaling.fitted_steps(pairs, 3, basis, left_s=900.0).values()) == {3}
    assert set(scaling.fitted_steps(pairs, 3, basis, left_s=300.0).values()) == {1}


def test_curve_points_that_would_not_fit_are_skipped_not_started(tmp_path):
    opt = bench.parse_args([])
    # main train rows of 50 s each, 5 s steps: a point costs 15 s of start-up and compile per form
    workers = {worker: {"ok": True, "duration_s": 50.0, "result": {"step_s": 5.0}} for _, worker in scaling.FRAMEWORKS}
    assert bench.curve_cost_basis(workers, opt) == scaling.CostBasis(45.0, 15.0, 2, 8, 192)
    # 60 s left: the cheapest point (batch 1, one step) is estimated at 63 s, so nothing starts
    records = bench.run_curves(opt, str(tmp_path), time.perf_counter() + 60, workers)
    for _, batch, size in scaling.curve_points(8, 192):
        for framework, worker in scaling.FRAMEWORKS:
            record = records[scaling.point_key(framework, batch, size)]
            if (batch, size) == (8, 192):
                assert record is workers[worker]
            else:
                assert record["error"] == "skipped: over the run's --budget-min 28" and record["result"] is None
    assert os.listdir(tmp_path) == []  # no worker wrote its log


def test_curves_hold_each_point_or_its_reason_and_are_plotted(tmp_path):
    points = [("batch", 1, 64), ("batch", 2, 64), ("resolution", 2, 64), ("resolution", 2, 96)]
    assert scaling.curve_points(2, 64, quick=True) == [points[0], points[2]]  # the second: the main train row's
    records = {}
    for _, batch, size in points:
        records[scaling.point_key("ours", batch, size)] = _ok(
            {"step_s": 0.1 * batch * size / 64, "img_s": 10.0, "peak_rss_mb": 900.0 + batch, "steps_s": [1, 0.1]})
        records[scaling.point_key("timm", batch, size)] = _ok(
            {"step_s": 0.2 * batch, "img_s": 5.0, "peak_rss_mb": 700.0, "steps_s": [0.3, 0.2]})
    records[scaling.point_key("timm", 2, 96)] = {"ok": False, "error": "timed out after 120 s", "result": None}
    curves = scaling.collect_curves(points, records, {64: 1e7, 96: 2.25e7}, peak_gflop_s=100.0)
    assert [row["batch"] for row in curves["batch"]] == [1, 2]
    assert [row["size"] for row in curves["resolution"]] == [64, 96]
    first = curves["batch"][0]
    assert first["train_gflop"] == 0.06 and first["floor_step_s"] == 0.0006  # 6 * 1e7 * 1 FLOP at 100 GFLOP/s
    assert first["ours"]["gflop_s"] == pytest.approx(0.06 / 0.1, abs=0.1)
    assert curves["resolution"][1]["timm"] == {"error": "timed out after 120 s"}
    json.dumps(curves)  # goes into results.json
    text = scaling.format_curves(curves)
    assert "failed: timed out after 120 s" in text and "b2     96px" in text
    scaling.plot_curves(curves, str(tmp_path / "scaling.png"), "test")
    assert (tmp_path / "scaling.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_image_ops_times_pil_and_opencv_forms_that_compute_the_same_image(tmp_path):
    import numpy as np

    from benchmarks import image_ops
    from benchmarks.data_pipeline import write_jpegs

    write_jpegs(str(tmp_path), 2)
    paths = sorted(str(path) for path in tmp_path.rglob("*.JPEG"))
    boxes = image_ops.crop_boxes_for(paths)
    pil, opencv = image_ops.pil_steps(paths, boxes), image_ops.opencv_steps(paths, boxes)
    # the OpenCV forms timed against PIL's compute the same image: decode bit for bit, colour ops within 2 levels
    for step, tolerance in (("decode", 0), ("contrast 1.5", 2), ("color 1.5", 2), ("equalize", 2)):
        for i in range(len(paths)):
            diff = np.abs(np.asarray(pil[step](i), np.int16) - np.asarray(opencv[step](i), np.int16))
            assert diff.max() <= tolerance, (step, i, diff.max())
    result = image_ops.measure(paths, rounds=1)
    assert all(ms > 0 for steps in result.values() for ms in steps.values())
    assert {"decode", "crop+resize bicubic", "train transform"} <= set(result["PIL"])
    assert "PIL/OpenCV" in image_ops.format_table(result)


def test_the_bench_waits_for_the_load_left_by_the_install_to_decay_and_gives_up_on_a_busy_machine():
    clock = [0.0]

    def sleep(seconds):
        clock[0] += seconds

    def settling():  # an idle machine after pip: 1.4, decaying with the load average's 60 s time constant
        return (1.4 * math.exp(-clock[0] / 60),)

    assert wait_until_quiet(0.5, 90, loadavg=settling, sleep=sleep) == 65  # 60 ln(2.8) = 61.8 s, 5 s polls
    clock[0] = 0.0
    assert wait_until_quiet(0.5, 90, loadavg=lambda: (3.0,), sleep=sleep) == 90  # another job: flagged, not waited out
    assert wait_until_quiet(0.5, 90, loadavg=lambda: (0.2,), sleep=sleep) == 0
    assert wait_until_quiet(0.5, 0, loadavg=lambda: (3.0,), sleep=sleep) == 0  # --quick


def test_a_training_step_with_a_nan_or_infinite_loss_fails_its_worker():
    assert finite_losses([6.9, 6.8]) == [6.9, 6.8]
    with pytest.raises(ValueError, match="loss of step 2 is nan: not a valid training step"):
        finite_losses([6.9, float("nan"), 6.8])
    with pytest.raises(ValueError, match="loss of step 1 is inf"):
        finite_losses([float("inf")])


def test_a_pytorch_form_must_give_eager_timms_logits_to_be_timed():
    import torch

    eager = torch.tensor([[0.05, -0.08, 0.01]])
    check_form_logits(eager + 1e-7, eager, "compile")  # the reassociation the forms show: 2e-6 of the largest
    for wrong in (eager + 0.01, torch.full_like(eager, float("nan"))):
        with pytest.raises(ValueError, match="timm compile gives other logits than timm eager"):
            check_form_logits(wrong, eager, "compile")


def test_each_isa_limit_has_a_torch_compile_cache_of_its_own(monkeypatch, tmp_path):
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    native, avx2 = inductor_cache_dir("native"), inductor_cache_dir("avx2")
    assert native != avx2 and os.path.dirname(native) == os.path.dirname(avx2)
    assert os.path.basename(os.path.dirname(native)).startswith("torchinductor_")  # in Inductor's default folder
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    assert inductor_cache_dir("avx2") == str(tmp_path / "bench_avx2")


def test_the_machine_record_names_the_cpus_family_and_model_where_a_guest_hides_its_name():
    # /proc/cpuinfo of two KVM guests this bench ran on (first lines of each block, two CPUs in the first)
    emerald = ("processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 207\n"
               "model name\t: Intel(R) Xeon(R) Processor\nstepping\t: 2\nflags\t\t: fpu avx512f\n\n"
               "processor\t: 1\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 106\n\n")
    assert cpu_identity(emerald) == ("Intel(R) Xeon(R) Processor", "GenuineIntel family 6 model 207 stepping 2")
    zen1 = "vendor_id\t: AuthenticAMD\ncpu family\t: 23\nmodel\t\t: 1\nmodel name\t: AMD EPYC Processor\n"
    assert cpu_identity(zen1) == ("AMD EPYC Processor", "AuthenticAMD family 23 model 1")
    assert cpu_identity("processor\t: 0\nBogoMIPS\t: 50.00\nCPU part\t: 0xd08\n") == ("unknown", None)  # aarch64
