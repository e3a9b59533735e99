"""Cost curves: train-step time and peak memory against batch size and input resolution.

Each point is one train step configuration (the bench's train workers with another batch or
size) in a fresh subprocess, for both frameworks, so its peak resident memory is its own. The
point at the bench's own train batch and size is the main table's train row, not run again.
The resolutions stop at 128 px for F0: its last stage then runs at 4x4; MindSpore 2.10's CPU
kernels take minutes per train step on 1x1 feature maps (a cliff, not a curve).
"""
import collections

# timm's two training forms that fit a curve's budget (torch.compile's minutes of compile per point do not)
FRAMEWORKS = (("ours", "train_ours"), ("timm", "train_timm"), ("timm_cl", "train_timm_cl"))
# (batch sizes at the train size, resolutions at the train batch)
SWEEPS = {"full": ((1, 2, 4, 8, 16), (128, 192, 256)),
          # one point of each sweep, the curve code end to end: the resolution point is the main train row's
          # (--quick's batch 2 at 64 px, not run again), so 3 processes, not 6
          "quick": ((1,), (64,))}


def curve_points(batch, size, quick=False):
    """[(sweep, batch, size)]: the batch sweep at ``size``, then the resolution sweep at ``batch``."""
    batches, sizes = SWEEPS["quick" if quick else "full"]
    return [("batch", b, size) for b in batches] + [("resolution", batch, s) for s in sizes]


def point_key(framework, batch, size):
    return f"curve_{framework}_b{batch}_{size}px"


def point_work(batch, size, base_batch, base_size):
    """Pixels per step of a curve point against the bench's own batch and size."""
    return batch * size * size / (base_batch * base_size * base_size)


def point_timeout(worker, batch, size, base_batch, base_size, quick_timeout=None):
    """Seconds for one curve point: start-up and compile plus 5 steps that grow with the pixels per step.

    Measured on the 2-core machine: our worker at batch 8, 192 px 43 s quiet (compile ~18 s, steps
    2.8 s), 105 s at load 5; at load 8-9 with one timed step, batch 8 at 128 px 93 s and batch 16 at
    192 px 182 s (6.2 GB). timm's at batch 8, 192 px 21 s quiet; at load 7 with one timed step, batch
    16 at 192 px 173 s (46 s steps: PyTorch's threads slow down many-fold under load).
    """
    if quick_timeout is not None:
        return quick_timeout
    fixed, per_work = (120, 150) if worker == "train_ours" else (90, 150)  # both timm forms alike
    return fixed + per_work * point_work(batch, size, base_batch, base_size)


def point_steps(steps, batch, size, base_batch, base_size, most=4):
    """Timed steps at one curve point: ``steps`` at the bench's own batch and size and above, more where a
    step is cheaper (in proportion to the pixels per step, at most ``most`` times ``steps``), so that each
    point's median covers a similar stretch of time. Batch 1 at 192 px: 12 steps of 0.5-0.8 s."""
    return max(steps, min(most * steps, round(steps / point_work(batch, size, base_batch, base_size))))


def run_order(points):
    """The curve points with each sweep's ends first, the most work first among them (batch 16, 256 px, 128 px,
    batch 1 for F0), then the inner points: a run whose budget runs out skips the points the ends bracket."""
    def value(point):
        sweep, batch, size = point
        return batch if sweep == "batch" else size

    ends = set()
    for sweep in {point[0] for point in points}:
        values = [value(point) for point in points if point[0] == sweep]
        ends |= {(sweep, min(values)), (sweep, max(values))}
    return sorted(points, key=lambda point: ((point[0], value(point)) not in ends, -point[1] * point[2] ** 2))


# what a curve point costs, from the main train rows: one point's start-up and compile, every train form
# together (fixed_s); one step of every form together at the base batch and size (step_s); warm-up steps
CostBasis = collections.namedtuple("CostBasis", "fixed_s step_s warmup base_batch base_size")
COST_MARGIN = 1.25  # the estimate's headroom: a step's time is not quite in proportion to its pixels


def point_cost_s(pair, count, basis):
    """Estimated seconds of the curve point ``pair`` = (batch, size) with ``count`` timed steps."""
    work = point_work(*pair, basis.base_batch, basis.base_size)
    return COST_MARGIN * (basis.fixed_s + (basis.warmup + count) * basis.step_s * work)


def fitted_steps(pairs, steps, basis, left_s):
    """{(batch, size): timed steps} of the curve points ``pairs``, fewer than point_steps gives where the points
    would not fit in ``left_s`` seconds (point_cost_s): first fewer extra steps at the cheap points (``most`` 4, 2,
    1), then fewer steps everywhere, down to one. A slow machine (the 2-core Zen 1: 3.2x the Ice Lake's train
    step) keeps its expensive points that way; the ones that still do not fit are skipped, inner points first
    (run_order)."""
    def plan(most, count):
        return {pair: point_steps(count, *pair, basis.base_batch, basis.base_size, most) for pair in pairs}

    tries = [(most, steps) for most in (4, 2, 1)] + [(1, count) for count in range(steps - 1, 0, -1)]
    for most, count in tries:
        counts = plan(most, count)
        if sum(point_cost_s(pair, counts[pair], basis) for pair in pairs) <= left_s:
            break
    return counts


def collect_curves(points, records, flops_by_size=None, peak_gflop_s=None):
    """results.json's "scaling": {"batch": [...], "resolution": [...]}, one row per point.

    ``records``: {point_key(...): worker record}. A row holds each framework's step_s, img_s,
    peak_rss_mb (or the reason it is missing), and with ``flops_by_size`` ({size: forward MACs
    per image}) its train GFLOP and GFLOP/s, with ``peak_gflop_s`` the floor step time.
    """
    from benchmarks.flops import step_gflop
    from benchmarks.report import significant

    curves = {"batch": [], "resolution": []}
    for sweep, batch, size in points:
        row = {"batch": batch, "size": size}
        macs = (flops_by_size or {}).get(size)
        if macs:
            row["train_gflop"] = significant(step_gflop(macs, batch, train=True))
            if peak_gflop_s:
                row["floor_step_s"] = significant(row["train_gflop"] / peak_gflop_s)
        for framework, _ in FRAMEWORKS:
            record = records.get(point_key(framework, batch, size))
            result = (record or {}).get("result") or {}
            if not record or not record.get("ok"):
                row[framework] = {"error": (record or {}).get("error") or "not run"}
                continue
            entry = {"step_s": round(result["step_s"], 3), "img_s": round(result["img_s"], 3),
                     "peak_rss_mb": round(result["peak_rss_mb"]), "steps_s": result.get("steps_s")}
            if macs:
                entry["gflop_s"] = significant(row["train_gflop"] / result["step_s"])
            row[framework] = entry
        curves[sweep].append(row)
    return curves


def format_curves(curves):
    lines = []
    for sweep, title in (("batch", "batch size"), ("resolution", "resolution")):
        lines.append(f"train step against {title}: step s (peak RSS MB), ours | timm eager | timm channels_last")
        for row in curves.get(sweep, []):
            cells = []
            for framework, _ in FRAMEWORKS:
                entry = row[framework]
                cells.append(f"failed: {entry['error'][:60]}" if "error" in entry else
                             f"{entry['step_s']:7.2f} s ({entry['peak_rss_mb']:6.0f} MB)")
            floor = f"   floor {row['floor_step_s']:.3g} s" if "floor_step_s" in row else ""
            lines.append(f"  b{row['batch']:<3} {row['size']:>4}px  {'  |  '.join(cells)}{floor}")
    return "\n".join(lines)


def plot_curves(curves, path, title):
    """benchmarks/scaling.png: step time and peak RSS against batch size and resolution, both frameworks,
    with the floor (train FLOPs at the machine's measured matmul peak) where known."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    styles = {"ours": dict(color="tab:blue", marker="o", label="ours (MindSpore)"),
              "timm": dict(color="tab:orange", marker="s", label="timm (PyTorch eager)"),
              "timm_cl": dict(color="tab:red", marker="^", label="timm (PyTorch channels_last)")}
    for column, (sweep, xkey, xlabel) in enumerate((("batch", "batch", "batch size"),
                                                    ("resolution", "size", "input side (px)"))):
        rows = curves.get(sweep, [])
        fixed = (f"at {rows[0]['size']} px" if sweep == "batch" else f"at batch {rows[0]['batch']}") if rows else ""
        for line, (ykey, ylabel) in enumerate((("step_s", "train step (s)"), ("peak_rss_mb", "peak RSS (MB)"))):
            ax = axes[line][column]
            for framework, style in styles.items():
                points = [(row[xkey], row[framework][ykey]) for row in rows if ykey in row[framework]]
                if points:
                    ax.plot(*zip(*points), **style)
            floor = [(row[xkey], row["floor_step_s"]) for row in rows if "floor_step_s" in row]
            if ykey == "step_s" and floor:
                ax.plot(*zip(*floor), color="gray", linestyle="--", label="floor: FLOPs / matmul peak")
            if sweep == "batch":
                ax.set_xscale("log", base=2)
            ax.set_xticks([row[xkey] for row in rows])
            ax.set_xticklabels([str(row[xkey]) for row in rows])
            ax.set_xlabel(xlabel)
            ax.set_ylabel(ylabel)
            ax.set_title(f"{ylabel} {fixed}", fontsize=9)
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
