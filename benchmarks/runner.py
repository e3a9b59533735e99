"""Running the bench's workers: each in its own subprocess and process group, with a timeout and a
memory guard, and the machine the numbers come from."""
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import time
from importlib import metadata

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "benchmarks", "bench.py")


# --isa avx2: what each framework is limited to (oneDNN in MindSpore and PyTorch, PyTorch's own kernels and its
# MKL BLAS, our C++ kernels' -march). ONNX Runtime's MLAS picks its kernels from CPUID and has no such switch.
# Without MKL's limit, the avx2 run on an Intel Xeon (Ice Lake) measured PyTorch's float32 matmul at 220 GFLOP/s
# (AVX-512; MindSpore's 130) and took that as the AVX2 machine's limit.
ISA_LIMITS = {"native": {},
              "avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
                       "NFNET_KERNEL_MARCH": "x86-64-v3"}}


def inductor_cache_dir(isa):
    """torch.compile's cache for the --isa ``isa`` runs: a folder of its own in Inductor's cache folder.

    Inductor's cache key leaves these limits out, so one cache shared by both runs hands kernels
    compiled under one limit to the other. Measured on the Zen 4 (torch 2.14.1): the avx2 run's
    `torch.compile` training step, on the cache of a native run, had NaN losses from its first
    forward (and was the fastest train row, 3.03 img/s); a native run on an avx2 run's cache died
    of a segmentation fault. Each with a cache of its own computes eager's logits within 2e-7.
    """
    import getpass
    import tempfile

    default = os.path.join(tempfile.gettempdir(), f"torchinductor_{getpass.getuser()}")  # Inductor's default
    return os.path.join(os.environ.get("TORCHINDUCTOR_CACHE_DIR") or default, f"bench_{isa}")


def cpu_isa():
    """The widest x86 vector ISA the CPU reports (avx512, avx2, sse), or the machine's name elsewhere."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), []))
    except OSError:
        flags = set()
    for isa, flag in (("avx512", "avx512f"), ("avx2", "avx2"), ("sse", "sse4_2")):
        if flag in flags:
            return isa
    return platform.machine()


def cpu_identity(cpuinfo):
    """(model name, "vendor family F model M stepping S") of the first CPU in /proc/cpuinfo's text.

    A KVM guest often reports a generic model name ("Intel(R) Xeon(R) Processor", "AMD EPYC Processor"),
    so the family and model numbers are what say which CPU the numbers come from (family 6 model 106:
    Ice Lake server, 6/143: Sapphire Rapids, 6/207: Emerald Rapids, 23/1: AMD Zen 1, 25/1: Zen 3,
    25/17: Zen 4, 26/2: Zen 5).
    """
    fields = {}
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if not key and fields:
            break  # the end of the first CPU's block
        fields.setdefault(key, value.strip())
    numbers = [f"{label} {fields[key]}" for key, label in (("cpu family", "family"), ("model", "model"),
                                                            ("stepping", "stepping")) if fields.get(key)]
    identity = " ".join(filter(None, [fields.get("vendor_id", ""), *numbers])) or None
    return fields.get("model name", "unknown"), identity


def machine_info(threads):
    model, identity = "unknown", None
    try:
        with open("/proc/cpuinfo") as f:
            model, identity = cpu_identity(f.read())
    except OSError:
        pass
    versions = {}
    for package in ("mindspore", "torch", "timm", "numpy", "torchvision", "pillow", "onnxruntime", "openvino",
                    "onnx", "opencv-python-headless", "matplotlib"):
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
    return {"cpu": model, "cpu_id": identity, "cores": os.cpu_count(), "usable_cores": available_cores(),
            "threads": threads, "memory_gb": mem_gb, "isa": cpu_isa(), "load_avg_at_start": list(os.getloadavg()),
            "platform": platform.platform(), "python": platform.python_version(), **versions, "git_commit": commit}


def wait_until_quiet(threshold, max_wait_s, poll_s=5.0, loadavg=os.getloadavg, sleep=time.sleep):
    """Wait at most `max_wait_s` for the 1-minute load average to fall to `threshold`; return the seconds waited.

    `make bench` on a fresh clone starts right after pip has installed the environment, which leaves
    the load average at 1.1-1.4 on 2 cores (measured); idle, it decays with a 60 s time constant, so
    below 0.5 in about a minute. Another job's load does not go away: the wait gives up and the run
    is flagged as noisy.
    """
    waited = 0.0
    if loadavg()[0] > threshold and max_wait_s > 0:
        print(f"waiting up to {max_wait_s:.0f} s for the machine to settle (1-minute load average "
              f"{loadavg()[0]:.1f}, want <= {threshold})", flush=True)
    while loadavg()[0] > threshold and waited < max_wait_s:
        step = min(poll_s, max_wait_s - waited)
        sleep(step)
        waited += step
    return waited


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


def start_worker(name, opt, workdir, key=None, args=(), steps=None, pass_fds=(), env=None):
    """Start worker ``name`` of bench.py in its own process group: (process, json path, log path).

    ``key`` names its json and log files (default: ``name``; a worker run several times needs one
    per run); ``args`` are more bench.py options (a curve point's --batch, --size); ``steps``
    replaces --steps; ``pass_fds`` and ``env`` (more variables) are for benchmarks/turns.py.
    """
    key = key or name
    json_out = os.path.join(workdir, f"{key}.json")
    log_path = os.path.join(workdir, f"{key}.log")
    command = [sys.executable, BENCH, "--worker", name, "--json-out", json_out,
               "--threads", str(opt.threads), "--steps", str(steps or opt.steps), *map(str, args)]
    if opt.data_dir:
        command += ["--data-dir", opt.data_dir]
    if opt.quick:
        command.append("--quick")
    full_env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
                    **ISA_LIMITS[getattr(opt, "isa", "native")], **(env or {}))
    full_env["TORCHINDUCTOR_CACHE_DIR"] = inductor_cache_dir(getattr(opt, "isa", "native"))
    full_env.setdefault("GLOG_v", "3")  # MindSpore: errors only in the log
    with open(log_path, "w") as log:
        # cwd: MindSpore's kernel-meta and rank directories go to the scratch directory, not the checkout
        proc = subprocess.Popen(command, cwd=workdir, stdout=log, stderr=subprocess.STDOUT, env=full_env,
                                start_new_session=True, pass_fds=pass_fds)
    return proc, json_out, log_path


def over_limit(proc, started, timeout, peak_mb, opt):
    """The reason to stop a running worker (its time or its process group's memory), or None."""
    if time.perf_counter() - started > timeout:
        return f"timed out after {timeout:.0f} s"
    if peak_mb > opt.max_rss_gb * 1024:
        return f"stopped at {peak_mb / 1024:.1f} GB resident, over --max-rss-gb {opt.max_rss_gb:g}"
    return None


def kill_group(proc):
    try:  # the worker's children (data workers) may outlive it
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def worker_record(proc, json_out, log_path, error, duration_s, timeout, peak_mb):
    """{ok, error, duration_s, timeout_s, group_rss_peak_mb_sampled, result[, log_tail]} of a finished worker."""
    record = {"ok": False, "error": error, "duration_s": round(duration_s, 1),
              "timeout_s": timeout, "group_rss_peak_mb_sampled": round(peak_mb), "result": None}
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


def run_worker(name, opt, timeout, workdir, key=None, args=(), steps=None):
    """Run worker ``name`` of bench.py alone (start_worker), with its timeout and memory guard: its record."""
    proc, json_out, log_path = start_worker(name, opt, workdir, key=key, args=args, steps=steps)
    start, peak_seen, error = time.perf_counter(), 0.0, None
    while proc.poll() is None:
        time.sleep(0.5)
        peak_seen = max(peak_seen, group_rss_mb(proc.pid))
        error = over_limit(proc, start, timeout, peak_seen, opt)
        if error:
            break
    kill_group(proc)
    return worker_record(proc, json_out, log_path, error, time.perf_counter() - start, timeout, peak_seen)


def memory_available_gb():
    with open("/proc/meminfo") as f:
        fields = dict(line.split(":", 1) for line in f)
    return int(fields["MemAvailable"].split()[0]) / 2 ** 20



def _merged_record(records):
    """The record of a worker run in several rounds, without its result: ok when every round is."""
    failed = [record for record in records if not record["ok"]]
    return {"ok": bool(records) and not failed, "error": failed[0]["error"] if failed else None,
            "duration_s": round(sum(record["duration_s"] for record in records), 1), "result": None,
            "rounds": records}


def _merge_results(records, combine):
    """One round's record as it is; else the rounds' record with ``combine(results)`` as its result when
    every round is ok."""
    if len(records) == 1:
        return records[0]
    merged = _merged_record(records)
    if merged["ok"]:
        merged["result"] = combine([record["result"] for record in records])
    return merged


def merge_rounds(records):
    """One record for a worker run in several rounds (the pipelines): ok when every round is.

    Its result: img_s, the median over every timed epoch of every round; rounds_img_s, each
    round's own median; epochs_img_s, every timed epoch; the rounds' records under "rounds".
    """
    merged = _merged_record(records)
    if merged["ok"]:
        epochs = [rate for record in records for rate in record["result"]["epochs_img_s"]]
        merged["result"] = {"img_s": statistics.median(epochs), "epochs_img_s": epochs,
                            "rounds_img_s": [record["result"]["img_s"] for record in records]}
    return merged


def merge_train_rounds(records, batch, warmup):
    """One record for a train worker run in several rounds, as merge_eval_rounds does for the eval rows.

    Its result: step_s and img_s, from the median over every round's timed steps (each round's first
    `warmup` steps left out); compile_s and first_step_s, the rounds' medians (every round compiles);
    rounds_img_s, each round's own; steps_s, every step; peak_rss_mb, the largest round's; the first
    round's other fields (losses, form, ...). One round's record is returned as it is.
    """
    def combine(results):
        step_s = statistics.median([t for r in results for t in r["steps_s"][warmup:]])
        return {**results[0], "step_s": step_s, "img_s": batch / step_s,
                "first_step_s": statistics.median(r["first_step_s"] for r in results),
                "compile_s": statistics.median(r["compile_s"] for r in results),
                "steps_s": [t for r in results for t in r["steps_s"]],
                "rounds_img_s": [r["img_s"] for r in results],
                "peak_rss_mb": max(r["peak_rss_mb"] for r in results)}

    return _merge_results(records, combine)


def merge_peak_rounds(records):
    """One record for a matmul-peak worker run in several rounds: every round's timed calls of each shape
    together (matmul_peak.merge_peaks); the rounds' records under "rounds". One round's record as it is."""
    from benchmarks.matmul_peak import merge_peaks

    return _merge_results(records, merge_peaks)


def merge_eval_rounds(records, batch, warmup):
    """One record for an eval-network worker run in several rounds, as merge_rounds does for the pipelines.

    Its result: img_s (batch `batch`) and b1_ms, the medians over every round's timed calls (each round's
    first `warmup` calls left out); rounds_img_s and rounds_b1_ms, each round's own; b{batch}_steps_s and
    b1_steps_s, every timed call; peak_rss_mb, the largest round's. One round's record is returned as it is.
    """
    def combine(results):
        steps = {n: [t for r in results for t in r[f"b{n}_steps_s"][warmup:]] for n in (batch, 1)}
        return {"img_s": batch / statistics.median(steps[batch]), "b1_ms": statistics.median(steps[1]) * 1000,
                f"b{batch}_steps_s": steps[batch], "b1_steps_s": steps[1],
                "rounds_img_s": [r["img_s"] for r in results], "rounds_b1_ms": [r["b1_ms"] for r in results],
                "peak_rss_mb": max(r["peak_rss_mb"] for r in results)}

    return _merge_results(records, combine)
