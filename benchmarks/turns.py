"""Workers that run side by side and take turns: one call at a time, each next to the others' in time.

A shared cloud machine changes speed over minutes (this KVM guest with steal time: the same F0
train worker measured 0.54 and 0.81 s per batch-1 step in two runs a minute apart, the batch-16
step 5.4-7.9 s), so two frameworks timed one after the other can land in different minutes, and
single curve points flipped either way between runs. Here the workers of one comparison (a curve
point's three train forms, the main train rows, the eval rows) are alive together, but only one
computes at a time:

- each starts alone and parks before its first timed call (start-up, model build and compile
  overlap nothing);
- then the calls take turns, A B C A B C ...: each worker's i-th call runs next to the others'
  i-th calls, so a slow minute hits every framework alike, and every call follows another worker's
  call. (A worker's calls back to back ran faster: ONNX Runtime's threads spin on after a call and
  took the cores from the next worker. F0 b1 at 256 px on the Ice Lake, ours and timm's ONNX in
  ONNX Runtime in turns A B B A: 147-155 ms after its own call, 189-202 ms after the other's;
  in turns A B A B: 131-168 ms. A 0.1 s pause between turns made OpenVINO's calls vary 104-209 ms.)

A parked worker blocks on a pipe read (no thread of it runs). Each call is still timed by the worker
itself (timed_calls), and each keeps its own peak memory, timeout (its own active time) and
memory guard. Before starting another worker, the driver wants the memory the largest of this
set holds free again; otherwise that worker runs alone afterwards (its record says "turns": false).

The protocol, over two pipes per worker (file descriptors in NFNET_BENCH_TURNS="read,write"): the
worker writes "r" when it parks and reads "g" to go; its end of file means it finished.
"""
import os
import select
import time

from benchmarks.runner import group_rss_mb, kill_group, memory_available_gb, over_limit, start_worker, worker_record

TURNS_ENV = "NFNET_BENCH_TURNS"
POLL_S = 0.5  # how often a running worker's memory and time are checked


class WorkerTurns:
    """The worker's side: ``take()`` before each call parks the worker until the driver says go."""

    def __init__(self, spec):
        self.read_fd, self.write_fd = map(int, spec.split(","))

    @classmethod
    def from_environment(cls):
        spec = os.environ.get(TURNS_ENV)
        return cls(spec) if spec else None

    def take(self):
        os.write(self.write_fd, b"r")
        if os.read(self.read_fd, 1) != b"g":
            raise SystemExit("the bench driver is gone")


def timed_calls(fn, warmup, steps):
    """Seconds of each of warmup + steps calls of ``fn``; run in turns (NFNET_BENCH_TURNS set), each call
    waits for its turn first."""
    turns = WorkerTurns.from_environment()
    times = []
    for _ in range(warmup + steps):
        if turns:
            turns.take()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


class _Running:
    """The driver's view of one worker: its process, pipes, active time and memory."""

    def __init__(self, entry, opt, workdir):
        self.key, self.timeout = entry["key"], entry["timeout"]
        go_read, self.go_write = os.pipe()
        self.parked_read, parked_write = os.pipe()
        env = {TURNS_ENV: f"{go_read},{parked_write}"}
        self.proc, self.json_out, self.log_path = start_worker(entry["name"], opt, workdir, key=entry["key"],
                                                               args=entry["args"], steps=entry["steps"],
                                                               pass_fds=(go_read, parked_write), env=env)
        os.close(go_read)
        os.close(parked_write)
        self.active_s, self.peak_mb, self.error, self.finished, self.turns = 0.0, 0.0, None, False, 0

    def run_until_parked(self, opt):
        """Let the worker run (started, or just told to go) until it parks again or ends."""
        start = time.perf_counter()
        while not self.finished:
            ready, _, _ = select.select([self.parked_read], [], [], POLL_S)
            if ready:
                if os.read(self.parked_read, 1) != b"r":
                    self.stop()  # end of file: the worker exited (or died)
                break
            self.peak_mb = max(self.peak_mb, group_rss_mb(self.proc.pid))
            self.error = over_limit(self.proc, start - self.active_s, self.timeout, self.peak_mb, opt)
            if self.error:
                self.stop()
        self.active_s += time.perf_counter() - start

    def go(self, opt):
        try:
            os.write(self.go_write, b"g")
        except BrokenPipeError:  # it died while parked
            self.stop()
            return
        self.turns += 1
        self.run_until_parked(opt)

    def stop(self):
        kill_group(self.proc)
        self.finished = True

    def record(self):
        for fd in (self.go_write, self.parked_read):
            os.close(fd)
        kill_group(self.proc)
        record = worker_record(self.proc, self.json_out, self.log_path, self.error, self.active_s, self.timeout,
                               self.peak_mb)
        return {**record, "turns": True, "turns_taken": self.turns}


def run_in_turns(entries, opt, workdir, run_alone, headroom=1.2):
    """{key: record} of the workers ``entries`` ([{name, key, args, steps, timeout}]) run in turns.

    ``run_alone(entry)`` runs a worker on its own (the fallback when memory is short). Before the
    second and later workers start, MemAvailable must hold ``headroom`` times the largest worker's
    peak so far.
    """
    running, alone = [], []
    for entry in entries:
        largest_mb = max((worker.peak_mb for worker in running), default=0.0)
        if running and memory_available_gb() * 1024 < headroom * largest_mb:
            alone.append(entry)
            continue
        worker = _Running(entry, opt, workdir)
        worker.run_until_parked(opt)
        running.append(worker)
    while any(not worker.finished for worker in running):
        for worker in running:
            if not worker.finished:
                worker.go(opt)
    records = {worker.key: worker.record() for worker in running}
    for entry in alone:
        records[entry["key"]] = {**run_alone(entry), "turns": False}
    return records
