"""benchmarks/turns.py: bench workers alive together, one call at a time; what happens when memory is short
or a worker is stopped. Real --quick workers (nano), no timing compared with anything."""
import os
import threading

import pytest

from benchmarks.bench import parse_args, run_worker
from benchmarks.turns import WorkerTurns, run_in_turns


def entry(name, key, steps=1):
    return {"name": name, "key": key, "args": (), "steps": steps, "timeout": 300}


def run_alone(opt, workdir):
    return lambda e: run_worker(e["name"], opt, e["timeout"], workdir, key=e["key"], args=e["args"], steps=e["steps"])


def test_a_worker_parks_before_each_call_until_it_is_told_to_go():
    go_read, go_write = os.pipe()
    parked_read, parked_write = os.pipe()
    turns = WorkerTurns(f"{go_read},{parked_write}")
    calls = []

    def worker():
        for index in range(3):
            turns.take()
            calls.append(index)

    thread = threading.Thread(target=worker)
    thread.start()
    for index in range(3):
        assert os.read(parked_read, 1) == b"r"  # parked: the call has not run
        assert calls == list(range(index))
        os.write(go_write, b"g")
    thread.join(timeout=30)
    assert calls == [0, 1, 2]
    os.write(go_write, b"x")  # anything else than "go": the driver is gone, the worker stops
    with pytest.raises(SystemExit, match="driver is gone"):
        turns.take()
    for fd in (go_read, go_write, parked_read, parked_write):
        os.close(fd)


@pytest.mark.timeout(600)
def test_workers_in_turns_take_one_turn_per_call(tmp_path):
    opt = parse_args(["--quick"])
    records = run_in_turns([entry("train_timm", "a", steps=2), entry("eval_timm", "b")], opt, str(tmp_path),
                           run_alone(opt, str(tmp_path)))
    assert list(records) == ["a", "b"]
    # eval: batch 2, then batch 1 with twice the timed calls (scaling.point_steps: half the pixels per call)
    for key, calls in (("a", opt.warmup + 2), ("b", (opt.warmup + 1) + (opt.warmup + 2))):
        record = records[key]
        assert record["ok"] and record["error"] is None, record
        assert record["turns"] and record["turns_taken"] == calls, record
    assert len(records["a"]["result"]["steps_s"]) == opt.warmup + 2
    assert len(records["b"]["result"]["b1_steps_s"]) == opt.warmup + 2


@pytest.mark.timeout(600)
def test_without_memory_for_both_the_second_worker_runs_alone_afterwards(tmp_path):
    opt = parse_args(["--quick"])
    records = run_in_turns([entry("train_timm", "a"), entry("train_timm", "b")], opt, str(tmp_path),
                           run_alone(opt, str(tmp_path)), headroom=1e6)  # no machine has a million times its peak
    assert records["a"]["ok"] and records["a"]["turns"]
    assert records["b"]["ok"] and records["b"]["turns"] is False and "turns_taken" not in records["b"]


@pytest.mark.timeout(600)
def test_a_worker_over_the_memory_guard_is_stopped_and_the_others_finish(tmp_path):
    opt = parse_args(["--quick", "--max-rss-gb", "0.05"])  # no worker starts in 50 MB
    records = run_in_turns([entry("train_timm", "a"), entry("eval_timm", "b")], opt, str(tmp_path),
                           run_alone(opt, str(tmp_path)))
    for record in records.values():
        assert not record["ok"] and record["error"].startswith("stopped at ") and "--max-rss-gb 0.05" in record["error"]
        assert record["log_tail"] is not None
