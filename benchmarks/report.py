"""The bench's report: the ratio table and chart (results.png), and achieved GFLOP/s against the
matmul peak each framework measured ("% of the machine's limit")."""
from benchmarks.flops import step_gflop

# (key, label, unit, better, ours: ((worker, field), ...), peers: ((worker, field), ...)). A side with several
# routes takes its best measured one (highest img/s, lowest ms/MB); the row names the route it took.
TRAIN_PEERS = ("train_timm", "train_timm_cl", "train_timm_compile")  # timm eager, channels_last, torch.compile
EVAL_PEERS = ("eval_timm", "eval_timm_cl", "eval_timm_compile")
# The deployable routes: (worker, field prefix); the onnx_* workers run one export in ONNX Runtime and OpenVINO
DEPLOY_OURS = (("onnx_ours", ""), ("onnx_ours", "openvino_"), ("mindir_ours", ""), ("lite_ours", ""))
DEPLOY_PEERS = (("onnx_timm", ""), ("onnx_timm", "openvino_"))  # timm -> ONNX -> ONNX Runtime / OpenVINO


def _routes(workers, field):
    return tuple((worker, field) for worker in workers)


def _deploy_routes(routes, field):
    return tuple((worker, prefix + field) for worker, prefix in routes)


METRICS = (
    ("train_img_s", "train img/s (b{train_batch}, {train_size}px)", "img/s", "higher",
     _routes(("train_ours",), "img_s"), _routes(TRAIN_PEERS, "img_s")),
    ("compile_s", "compile s (first step - median)", "s", "lower",
     _routes(("train_ours",), "compile_s"), _routes(("train_timm",), "compile_s")),
    ("peak_rss_mb", "train peak RSS MB", "MB", "lower", _routes(("train_ours",), "peak_rss_mb"),
     _routes(TRAIN_PEERS, "peak_rss_mb")),
    ("eval_img_s", "eval network b{eval_batch} img/s ({eval_size}px)", "img/s", "higher",
     _routes(("eval_ours",), "img_s"), _routes(EVAL_PEERS, "img_s")),
    ("eval_b1_ms", "eval network b1 ms", "ms", "lower", _routes(("eval_ours",), "b1_ms"), _routes(EVAL_PEERS, "b1_ms")),
    ("deploy_img_s", "deployable b{eval_batch} img/s (fastest route each)", "img/s", "higher",
     _deploy_routes(DEPLOY_OURS, "img_s"), _deploy_routes(DEPLOY_PEERS, "img_s")),
    ("deploy_b1_ms", "deployable b1 ms (fastest route each)", "ms", "lower",
     _deploy_routes(DEPLOY_OURS, "b1_ms"), _deploy_routes(DEPLOY_PEERS, "b1_ms")),
    ("onnx_img_s", "ONNX Runtime b{eval_batch} img/s", "img/s", "higher",
     _routes(("onnx_ours",), "img_s"), _routes(("onnx_timm",), "img_s")),
    ("onnx_b1_ms", "ONNX Runtime b1 ms", "ms", "lower", _routes(("onnx_ours",), "b1_ms"), _routes(("onnx_timm",), "b1_ms")),
    ("openvino_img_s", "OpenVINO b{eval_batch} img/s", "img/s", "higher",
     _routes(("onnx_ours",), "openvino_img_s"), _routes(("onnx_timm",), "openvino_img_s")),
    ("openvino_b1_ms", "OpenVINO b1 ms", "ms", "lower",
     _routes(("onnx_ours",), "openvino_b1_ms"), _routes(("onnx_timm",), "openvino_b1_ms")),
    ("mindir_img_s", "MINDIR b{eval_batch} img/s (vs timm eager)", "img/s", "higher",
     _routes(("mindir_ours",), "img_s"), _routes(("eval_timm",), "img_s")),
    ("mindir_b1_ms", "MINDIR b1 ms (vs timm eager)", "ms", "lower",
     _routes(("mindir_ours",), "b1_ms"), _routes(("eval_timm",), "b1_ms")),
    ("lite_img_s", "MindSpore Lite CPU b{eval_batch} img/s (vs timm eager)", "img/s", "higher",
     _routes(("lite_ours",), "img_s"), _routes(("eval_timm",), "img_s")),
    ("lite_b1_ms", "MindSpore Lite CPU b1 ms (vs timm eager)", "ms", "lower",
     _routes(("lite_ours",), "b1_ms"), _routes(("eval_timm",), "b1_ms")),
    ("pipeline_img_s", "pipeline img/s ({workers} workers)", "img/s", "higher",
     _routes(("pipeline_ours",), "img_s"), _routes(("pipeline_timm",), "img_s")),
    ("mindrecord_img_s", "MindRecord img/s (peer col: our folder)", "img/s", "higher",
     (("mindrecord", "mindrecord_img_s"),), (("mindrecord", "folder_img_s"),)),
)
# Rows that are a difference of two timings (first step - median): on a busy machine the first step
# can be faster than the median, so a value <= 0 is "≈ 0" (0.0 and a note), not a failed measurement.
TIMING_DIFFERENCES = {"compile_s"}


def route_name(worker, field):
    """The route a (worker, field) measures: the worker, or openvino_ours / openvino_timm for the OpenVINO
    fields of the onnx_* workers."""
    return "openvino_" + worker.split("_", 1)[1] if field.startswith("openvino_") else worker


def _side(workers, routes, key, better):
    """(best value or None, its route or None, {route: reason}, {route: note}) over ``routes``."""
    values, reasons, notes = {}, {}, {}
    for worker, field in routes:
        record = workers.get(worker)
        worker = route_name(worker, field)
        value = (record.get("result") or {}).get(field) if record else None
        if record is None:
            reasons[worker] = f"{worker} not run"
        elif not record["ok"]:
            reasons[worker] = f"{worker}: {record['error']}"
        elif value is not None and value <= 0 and key in TIMING_DIFFERENCES:
            notes[worker] = f"{worker} measured {value:.3f} s: ≈ 0, within the steps' noise"
            values[worker] = 0.0
        elif value is None or value <= 0:
            reasons[worker] = f"{worker} measured {value!r}, no positive value"
        else:
            values[worker] = value
    if not values:
        return None, None, reasons, notes
    best = (max if better == "higher" else min)(values, key=values.get)
    return round(values[best], 3), best, reasons, notes


def collect_metrics(workers, labels):
    """The table's rows: ours, the strongest peer, ratio (> 1: ours better), the routes each side took, and
    the reason a side is missing ({"reasons": ...}; a route of several that did not run is only listed in
    "skipped")."""
    metrics = {}
    for key, label, unit, better, ours_routes, peer_routes in METRICS:
        if not any(worker in workers for worker, _ in ours_routes + peer_routes):
            continue
        row = {"label": label.format(**labels), "unit": unit, "better": better, "reasons": {}, "notes": {},
               "skipped": {}}
        for column, routes in (("ours", ours_routes), ("peer", peer_routes)):
            value, worker, reasons, notes = _side(workers, routes, key, better)
            row[column], row[f"{column}_route"] = value, worker
            row["notes"].update({column: note for note in notes.values()})
            if value is None:
                row["reasons"][column] = "; ".join(reasons.values())
            else:
                row["skipped"].update(reasons)
        ours, ref = row["ours"], row["peer"]
        if ours == 0.0 or ref == 0.0:
            row["ratio"] = None
            row["notes"]["ratio"] = "no ratio: a value is ≈ 0"
        elif ours is not None and ref is not None:
            row["ratio"] = round(ours / ref if better == "higher" else ref / ours, 3)
        else:
            row["ratio"] = None
            row["reasons"]["ratio"] = "a value is missing"
        metrics[key] = row
    return metrics


def format_value(value):
    if value is None:
        return "n/a"
    if value == 0:
        return "≈ 0"
    return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"


def format_table(metrics, workers):
    width = max([len(row["label"]) for row in metrics.values()] + [10])
    lines = [f"{'':<{width}}  {'ours':>9}  {'peer':>9}  {'ratio':>7}  routes (ours | strongest peer)",
             "-" * (width + 70)]
    for row in metrics.values():
        routes = f"{row['ours_route'] or 'n/a'} | {row['peer_route'] or 'n/a'}"
        lines.append(f"{row['label']:<{width}}  {format_value(row['ours']):>9}  {format_value(row['peer']):>9}  "
                     f"{format_value(row['ratio']) + ('x' if row['ratio'] is not None else ''):>7}  {routes}")
    lines.append("ratio > 1: ours better (ours/peer for throughput, peer/ours for times and memory); each row "
                 "compares with the strongest peer route measured")
    for name, record in workers.items():
        if not record["ok"] and str(record["error"]).startswith("skipped:"):
            lines.append(f"{name}: {record['error']}")
        elif not record["ok"]:
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
        text = ("≈ 0" if row.get("notes", {}).get("ratio") else "failed") if row["ratio"] is None else f"{row['ratio']:.2f}x"
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f" {text}", va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, max(ratios + [1.0]) * 1.25)
    ax.set_xlabel("ratio (> 1: this project better than the strongest peer)")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)



# (key, label, worker, field, size setting, batch setting or 1, train step?, framework of the matmul peak)
EFFICIENCY_ROWS = (
    ("train_ours", "train b{train_batch} {train_size}px, ours", "train_ours", "step_s", "train_size", "train_batch",
     True, "ours"),
    ("train_timm", "train b{train_batch} {train_size}px, timm", "train_timm", "step_s", "train_size", "train_batch",
     True, "timm"),
    ("train_timm_cl", "train b{train_batch} {train_size}px, timm channels_last", "train_timm_cl", "step_s",
     "train_size", "train_batch", True, "timm"),
    ("train_timm_compile", "train b{train_batch} {train_size}px, timm torch.compile", "train_timm_compile", "step_s",
     "train_size", "train_batch", True, "timm"),
    ("eval_ours", "eval b{eval_batch} {eval_size}px, ours", "eval_ours", "img_s", "eval_size", "eval_batch", False,
     "ours"),
    ("eval_timm", "eval b{eval_batch} {eval_size}px, timm", "eval_timm", "img_s", "eval_size", "eval_batch", False,
     "timm"),
    ("eval_b1_ours", "eval b1 {eval_size}px, ours", "eval_ours", "b1_ms", "eval_size", None, False, "ours"),
    ("eval_b1_timm", "eval b1 {eval_size}px, timm", "eval_timm", "b1_ms", "eval_size", None, False, "timm"),
    ("mindir_ours", "MINDIR b{eval_batch}, ours", "mindir_ours", "img_s", "eval_size", "eval_batch", False, "ours"),
    ("onnx_ours", "ONNX Runtime b{eval_batch}, ours", "onnx_ours", "img_s", "eval_size", "eval_batch", False, None),
)
PEAK_WORKERS = {"ours": "peak_ours", "timm": "peak_timm"}


def significant(value, digits=4):
    """``value`` rounded to ``digits`` significant digits (the quick run's GFLOP/s are ~0.01)."""
    return float(f"{value:.{digits}g}")


def _step_seconds(field, value, batch):
    return {"step_s": value, "img_s": batch / value if value else None, "b1_ms": value / 1000}[field]


def _result(workers, name):
    record = workers.get(name)
    return record["result"] if record and record.get("ok") else None


def efficiency(workers, settings, macs_by_size):
    """Achieved GFLOP/s of the train and eval rows, and their share of the matmul peaks.

    ``macs_by_size``: {size: forward MACs per image} (the flops worker's count). Each framework's
    peak is the best GFLOP/s its matmul reached in this run (peak_ours / peak_timm); the machine's
    limit is the higher of the two; the median limit, the highest median rate of a shape (the same comparison
    with a typical call, as the rows' median steps are). Returns {peaks_gflop_s, machine_limit_gflop_s,
    median_limit_gflop_s, train_floor_step_s, rows: {key: {...}}}.
    """
    peaks = {framework: (_result(workers, name) or {}).get("best_gflop_s") for framework, name in PEAK_WORKERS.items()}
    known = [value for value in peaks.values() if value]
    limit = max(known) if known else None
    # the typical rate beside the best call: the peaks' calls take turns with the train steps, whose median
    # a row compares; a single call can catch the machine's quiet instant (this KVM guest: one 12 ms call at
    # 310 GFLOP/s, the same shape's median 224)
    medians = [rate["median_gflop_s"] for name in PEAK_WORKERS.values()
               for rate in ((_result(workers, name) or {}).get("shapes") or {}).values()]
    median_limit = max(medians) if medians else None
    rows = {}
    for key, label, worker, field, size_key, batch_key, train, framework in EFFICIENCY_ROWS:
        result = _result(workers, worker)
        macs = macs_by_size.get(settings[size_key])
        if not result or not result.get(field) or not macs:
            continue
        batch = settings[batch_key] if batch_key else 1
        gflop = step_gflop(macs, batch, train)
        gflop_s = gflop / _step_seconds(field, result[field], batch)
        row = {"label": label.format(**settings), "step_gflop": significant(gflop), "gflop_s": significant(gflop_s)}
        if framework and peaks.get(framework):
            row["of_framework_peak"] = significant(gflop_s / peaks[framework])
        if limit:
            row["of_machine_limit"] = significant(gflop_s / limit)
        if median_limit:
            row["of_median_limit"] = significant(gflop_s / median_limit)
        rows[key] = row
    floor = None
    train_macs = macs_by_size.get(settings["train_size"])
    if limit and train_macs:  # the train step if it ran entirely at the machine's matmul limit
        floor = significant(step_gflop(train_macs, settings["train_batch"], True) / limit)
    return {"peaks_gflop_s": peaks, "machine_limit_gflop_s": limit, "median_limit_gflop_s": median_limit,
            "train_floor_step_s": floor, "rows": rows}


def _percent(value):
    return "n/a" if value is None else f"{100 * value:.0f}%"


def format_efficiency(eff, flops, settings):
    """Lines: the FLOP count, each framework's matmul peak, and GFLOP/s with % of the peaks per row."""
    lines = []
    if flops:
        macs = flops["macs_per_image"].get(str(settings["train_size"]))
        agree = "ours the same" if flops.get("ours_equals_timm") else "OURS DIFFERS: see results.json flops"
        lines.append(f"FLOPs: {macs / 1e9:.3g} GMAC per image forward at {settings['train_size']}px ({flops['layers']} "
                     f"conv/linear layers counted on timm's model; {agree}); train step = 6 x MACs x batch, "
                     f"eval = 2 x MACs x batch")
    peaks = eff["peaks_gflop_s"]
    if any(peaks.values()):
        lines.append(f"float32 matmul peak in this run: MindSpore {peaks['ours'] or 'n/a'} GFLOP/s, PyTorch "
                     f"{peaks['timm'] or 'n/a'} GFLOP/s; the machine's limit {eff['machine_limit_gflop_s']} GFLOP/s "
                     f"(fastest call), {eff.get('median_limit_gflop_s') or 'n/a'} GFLOP/s (median call)")
    if eff.get("train_floor_step_s"):
        floor = eff["train_floor_step_s"]
        lines.append(f"train step floor at that limit (b{settings['train_batch']}, {settings['train_size']}px): "
                     f"{floor:.3g} s, {settings['train_batch'] / floor:.3g} img/s")
    if eff["rows"]:
        width = max(len(row["label"]) for row in eff["rows"].values())
        lines.append(f"{'':<{width}}  {'GFLOP':>7}  {'GFLOP/s':>8}  {'% own peak':>10}  {'% limit':>8}  "
                     f"{'% median limit':>14}")
        for row in eff["rows"].values():
            lines.append(f"{row['label']:<{width}}  {row['step_gflop']:>7.3g}  {row['gflop_s']:>8.3g}  "
                         f"{_percent(row.get('of_framework_peak')):>10}  {_percent(row.get('of_machine_limit')):>8}  "
                         f"{_percent(row.get('of_median_limit')):>14}")
    return "\n".join(lines)


def format_rounds(workers, ours="pipeline_ours", reference="pipeline_timm"):
    """'pipeline: ours X img/s (rounds a-b), timm Y (c-d); per-round ratio e-f', or '' when a side is missing."""
    results = [_result(workers, name) for name in (ours, reference)]
    if not all(results) or "rounds_img_s" not in results[0] or "rounds_img_s" not in results[1]:
        return ""
    (mine, theirs) = (result["rounds_img_s"] for result in results)
    ratios = [a / b for a, b in zip(mine, theirs)]
    return (f"pipeline img/s, median of every timed epoch of {len(mine)} interleaved rounds: ours "
            f"{results[0]['img_s']:.0f} (rounds {min(mine):.0f}-{max(mine):.0f}), timm {results[1]['img_s']:.0f} "
            f"(rounds {min(theirs):.0f}-{max(theirs):.0f}); per-round ratio {min(ratios):.2f}-{max(ratios):.2f}x")
