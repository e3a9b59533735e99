"""Case 7, distributed faults, for real with 2 CPU workers (slow: `make test-slow`).

Measured with MindSpore 2.10 on this 2-core machine: when a worker dies, msrun kills the other workers of its
node within a second, but then waits for its scheduler, which gives up on the lost worker only after the node
timeout (MindSpore's MS_NODE_TIMEOUT, about 30 s when unset); a worker that is not msrun's child (another node)
is stopped by MindSpore itself (SIGTERM) after that same timeout. train.py sets MS_NODE_TIMEOUT from
cluster_timeout, and scripts/run_distribute_train_msrun.sh stops the scheduler as soon as msrun reports the
failure and names the worker in one line."""
import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest

from reliability_helpers import CONFIG, ROOT, TINY, free_port, read_text

pytestmark = pytest.mark.slow
LAUNCHER = os.path.join(ROOT, "scripts", "run_distribute_train_msrun.sh")
# 40 images, 2 workers x batch 4: 5 steps per epoch; many epochs, so the job is still running when it is hit
ARGS = [*TINY, "--batch_size", "4", "--epochs", "30", "--device_target", "CPU", "--cluster_timeout", "30"]


def start_msrun(run_dir, *args):
    env = dict(os.environ, PYTHON=sys.executable, RUN_DIR=str(run_dir), MASTER_PORT=free_port())
    return subprocess.Popen(["bash", LAUNCHER, "2", CONFIG, *map(str, args)], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def job_processes(launcher):
    """{role and rank: psutil.Process} of the scheduler and workers under the launcher."""
    found = {}
    for child in psutil.Process(launcher.pid).children(recursive=True):
        try:
            env, cmdline = child.environ(), " ".join(child.cmdline())
        except psutil.NoSuchProcess:
            continue
        if "train.py" in cmdline and env.get("MS_ROLE"):
            found[f"{env['MS_ROLE']} {env.get('RANK_ID')}"] = child
    return found


def wait_for_step(log, proc, step="step 3/", timeout=600):
    deadline = time.time() + timeout
    while not (os.path.exists(log) and step in read_text(log)):
        assert proc.poll() is None and time.time() < deadline, "the job ended or stalled before training"
        time.sleep(0.2)


def all_gone(processes, timeout=10):
    _, alive = psutil.wait_procs(list(processes), timeout=timeout)
    return not alive


@pytest.mark.timeout(900)
def test_a_killed_worker_ends_the_msrun_job_at_once_with_a_line_naming_it(digits_subset, tmp_path):
    """Provokes: kill -9 of worker 1 at step 3 of a 2-worker msrun training."""
    run_dir = tmp_path / "job"
    launcher = start_msrun(run_dir, "--data_path", digits_subset(4, 3), *ARGS)
    wait_for_step(run_dir / "output" / "train.log", launcher)
    processes = job_processes(launcher)
    assert sorted(processes) == ["MS_SCHED 0", "MS_WORKER 0", "MS_WORKER 1"]
    victim = processes["MS_WORKER 1"].pid
    os.kill(victim, signal.SIGKILL)
    killed_at = time.monotonic()
    _, stderr = launcher.communicate(timeout=600)
    ended = time.monotonic()
    seconds = ended - killed_at
    assert launcher.returncode == 128 + 9
    assert stderr.strip().splitlines()[-1] == (
        f"error: worker 1 (pid {victim}) was killed by signal 9; the other workers were stopped; "
        f"see {run_dir / 'logs' / 'msrun' / 'worker_1.log'}")
    assert all_gone(processes.values())
    # msrun ends the job itself, well before the cluster timeout (measured 4-5 s of the 30 s; without stopping the
    # scheduler the launcher waited for the timeout). Not asserted as a time: on a busy machine any bound flakes;
    # the error line above (the launcher's own verdict, not a timeout's) and the test's timeout hold it.
    print(f"job ended {seconds:.1f} s after the kill")


@pytest.mark.timeout(900)
def test_a_worker_that_cannot_read_its_shard_ends_the_job_the_same_way(digits_subset, tmp_path):
    """Provokes: a truncated image that only worker 1's shard holds, with --strict_data true."""
    import shutil

    from src.data.sources import EpochShardSampler
    from src.data.folder import scan_image_folder

    data = tmp_path / "data"
    shutil.copytree(digits_subset(4, 3), data)
    bad = data / "train" / "4" / "zz_truncated.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n cut short")
    samples, _ = scan_image_folder(str(data / "train"))
    index = [path for path, _ in samples].index(str(bad))
    # a seed whose epoch-1 order puts the bad image in worker 1's first batch (and nowhere in worker 0's shard)
    seed = next(s for s in range(100) if index in EpochShardSampler(len(samples), 2, 1, seed=s).epoch_indices(0)[:4])
    run_dir = tmp_path / "job"
    launcher = start_msrun(run_dir, "--data_path", data, *ARGS, "--strict_data", "true", "--seed", seed)
    _, stderr = launcher.communicate(timeout=600)
    assert launcher.returncode == 2
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("error: worker 1 (pid ") and f"exited with status 2 (error: unreadable image {bad}: " in last
    assert last.endswith(f"); the other workers were stopped; see {run_dir / 'logs' / 'msrun' / 'worker_1.log'}")


@pytest.mark.timeout(900)
def test_without_msrun_the_surviving_worker_stops_within_cluster_timeout(digits_subset, tmp_path):
    """Provokes: kill -9 of worker 1 in a dynamic cluster started without msrun (as the workers of another node
    would see it), with --cluster_timeout 10. Worker 0 ends after the kill, on the error that the timeout fired."""
    env = dict(os.environ, MS_SCHED_HOST="127.0.0.1", MS_SCHED_PORT=free_port(), MS_WORKER_NUM="2")
    env.pop("MS_NODE_TIMEOUT", None)
    cmd = [sys.executable, "train.py", "--config", CONFIG, "--data_path", digits_subset(4, 3), *ARGS,
           "--cluster_timeout", "10", "--output_dir", tmp_path / "output"]
    procs, logs = {}, {}
    for name, role in (("scheduler", {"MS_ROLE": "MS_SCHED"}),
                       ("worker 0", {"MS_ROLE": "MS_WORKER", "MS_NODE_ID": "0"}),
                       ("worker 1", {"MS_ROLE": "MS_WORKER", "MS_NODE_ID": "1"})):
        logs[name] = open(tmp_path / f"{name}.log", "w")
        procs[name] = subprocess.Popen(list(map(str, cmd)), cwd=ROOT, env=dict(env, **role), stdout=logs[name],
                                       stderr=subprocess.STDOUT)
    try:
        wait_for_step(tmp_path / "output" / "train.log", procs["worker 0"])
        procs["worker 1"].send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        procs["worker 0"].wait(timeout=120)
        stopped = time.monotonic()
        seconds = stopped - killed_at
        procs["scheduler"].wait(timeout=60)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
        for log in logs.values():
            log.close()
    # Whichever comes first: its all-reduce fails (train.py exits 1 with one error line; left to MindSpore the
    # process would linger 25 s more), or MindSpore's scheduler declares worker 1 lost and has worker 0 end itself.
    log = read_text(tmp_path / "worker 0.log")
    if procs["worker 0"].returncode == 1:  # the failed all-reduce, or the next step after the heartbeat's verdict
        assert re.search(r"error: rank 0: (AllReduce failed|MindSpore's heartbeat lost 1 of 2 nodes): another rank "
                         r"stopped or did not answer within cluster_timeout \(10 s\); stopping this rank too", log), log
        assert "Traceback" not in log, log
    else:
        assert procs["worker 0"].returncode == -signal.SIGTERM and "Kill this process with SIGTERM" in log
    assert procs["scheduler"].returncode != 0
    # measured 8-13 s after the kill with 10 s (MindSpore's default timeout took 30 s, + 25 s in its shutdown);
    # not asserted as a time (a busy machine stretches it): the error line names the 10 s timeout that fired
    print(f"surviving worker stopped {seconds:.1f} s after the kill")
