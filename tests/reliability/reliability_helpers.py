"""Running the entry points as real processes and reading what they leave behind."""
import csv
import os
import random
import signal
import socket
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = os.path.join(ROOT, "src", "configs", "dm_nfnet_nano_digits.yaml")
PAUSE_IN_WRITE = os.path.join(ROOT, "tests", "reliability", "pause_in_checkpoint_write.py")
# A small deterministic run: batch 8 of 60 training images (7 steps per epoch), no dropout or drop
# path (their random streams restart on resume), one data worker, a progress line every step.
TINY = ["--batch_size", "8", "--epochs", "2", "--warmup_length", "0", "--drop_rate", "0", "--drop_path_rate", "0",
        "--num_parallel_workers", "1", "--log_interval", "1", "--base_lr", "1.6", "--seed", "3",
        "--eval_while_train", "false"]

# Runs `python <script> <args>` and prints, at exit, whether MindSpore was imported by then.
_IMPORT_PROBE = ("import atexit, runpy, sys\n"
                 "atexit.register(lambda: print('mindspore imported:', 'mindspore' in sys.modules))\n"
                 "sys.argv = sys.argv[1:]\n"
                 "runpy.run_path(sys.argv[0], run_name='__main__')\n")


def entry(script, *args, config=CONFIG, timeout=600, probe_imports=False):
    """`python <script> --config <config> <args>` in the repository; the CompletedProcess (text)."""
    head = [sys.executable, "-c", _IMPORT_PROBE] if probe_imports else [sys.executable]
    config_args = ["--config", config] if config else []
    return subprocess.run([*head, script, *config_args, *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def mindspore_imported(result):
    """What the import probe of entry(..., probe_imports=True) reported."""
    return result.stdout.strip().splitlines()[-1] == "mindspore imported: True"


def user_error(result):
    """The one `error: ...` line of a process stopped by a user mistake (exit 2, no traceback)."""
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    return errors[0]


def succeeded(result):
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result


def read_metrics(output_dir):
    with open(os.path.join(output_dir, "metrics.csv"), newline="") as f:
        return list(csv.DictReader(f))


def read_text(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def checkpoint_values(path):
    """name -> numpy array of every entry of a checkpoint (weights, optimizer state, counters; text
    entries such as the data settings are left out)."""
    import mindspore as ms

    return {k: v.asnumpy() for k, v in ms.load_checkpoint(str(path)).items() if not isinstance(v, str)}


def assert_same_training_state(expected, actual, rel=1e-6):
    """Equal entries (the config-derived lr array left out): floats within `rel` of the largest magnitude."""
    expected = {k: v for k, v in expected.items() if not k.startswith("learning_rate")}
    actual = {k: v for k, v in actual.items() if not k.startswith("learning_rate")}
    assert set(expected) == set(actual)
    for name, value in expected.items():
        if value.dtype.kind == "f":
            scale = max(float(np.abs(value).max()), 1e-12)
            assert float(np.abs(value - actual[name]).max()) <= rel * scale, name
        else:
            assert np.array_equal(value, actual[name]), name


def start_entry(script, *args, config=CONFIG, env=None, stdout=subprocess.DEVNULL):
    """`python <script> --config <config> <args>` started in the background (stdout=subprocess.PIPE to read it)."""
    return subprocess.Popen([sys.executable, script, "--config", config, *map(str, args)], cwd=ROOT, text=True,
                            stdout=stdout, stderr=subprocess.DEVNULL, env=dict(os.environ, **(env or {})))


def wait_until(condition, proc, timeout=600, poll=0.05):
    """Poll `condition()` until it is true while `proc` runs; fail if the process ends or time runs out."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if condition():
            return
        assert proc.poll() is None, f"the process ended (exit {proc.returncode}) before the awaited moment"
        time.sleep(poll)
    raise AssertionError(f"not reached within {timeout} s")


def kill9(proc):
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)


def fault_rng(name):
    """A random.Random for a test's fault points, seeded from $FAULT_SEED or afresh; the seed is printed
    (pytest shows it with a failure) so that a failing kill point can be replayed."""
    seed = int(os.environ.get("FAULT_SEED") or random.SystemRandom().randrange(2 ** 32))
    print(f"{name}: fault seed {seed} (replay with FAULT_SEED={seed})")
    return random.Random(seed)


def start_logged(script, *args, config=CONFIG, env=None):
    """start_entry with stdout and stderr to one pipe (text), for tests that read what the process says as it
    runs: read it continuously, or the process blocks once the pipe is full."""
    return subprocess.Popen([sys.executable, script, "--config", config, *map(str, args)], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=dict(os.environ, **(env or {})))


def snapshot(directory):
    """name -> (size, mtime_ns) of every entry of a directory: to show that nothing was rewritten."""
    return {e.name: (e.stat().st_size, e.stat().st_mtime_ns) for e in os.scandir(directory)}


def cluster_timeout_of(args, config=CONFIG):
    """The cluster_timeout a run with these command-line arguments resolves (the one timeout of launcher and
    train.py): timing checks are orderings bounded by it, not wall-clock constants."""
    from src.config import parse_cli

    return parse_cli(["--config", str(config), *map(str, args)])[1].cluster_timeout


def free_port():
    """A TCP port free on 127.0.0.1 now (for a launcher's MASTER_PORT)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])
