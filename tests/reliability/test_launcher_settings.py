"""The msrun launcher's environment (scripts/run_distribute_train_msrun.sh, scripts/launch_common.sh): a node rank
outside the job, a port outside [1, 65535], worker counts that do not make a job and a cluster timeout out of range
end in one `error:` line naming the setting, exit 2, before any process starts (no msrun, no worker, no run
directory). Real bash runs of the launcher; the launches that would start are not started (the test looks for a
run directory, which the launcher creates before msrun)."""
import os
import re
import subprocess
import sys

import pytest

from reliability_helpers import CONFIG, ROOT, free_port

LAUNCHER = os.path.join(ROOT, "scripts", "run_distribute_train_msrun.sh")

# (WORKER_NUM, environment, the one line)
CASES = {
    "NODE_RANK on a one-node job": (
        "2", {"NODE_RANK": "5"},
        "error: NODE_RANK 5 is not a node of this job: WORKER_NUM 2 with LOCAL_WORKER_NUM 2 per node is one node "
        "(NODE_RANK 0)"),
    "NODE_RANK past the nodes": (
        "4", {"NODE_RANK": "2", "LOCAL_WORKER_NUM": "2", "JOB_ID": "j"},
        "error: NODE_RANK 2 is not a node of this job: WORKER_NUM 4 with LOCAL_WORKER_NUM 2 per node is 2 nodes "
        "(NODE_RANK 0 to 1)"),
    "NODE_RANK not a number": (
        "2", {"NODE_RANK": "first"}, "error: NODE_RANK must be an integer in [0, 999999999], got 'first'"),
    "MASTER_PORT above 65535": (
        "2", {"MASTER_PORT": "70000"}, "error: MASTER_PORT must be an integer in [1, 65535], got '70000'"),
    "MASTER_PORT 0": ("2", {"MASTER_PORT": "0"}, "error: MASTER_PORT must be an integer in [1, 65535], got '0'"),
    "MASTER_PORT huge": (
        "2", {"MASTER_PORT": "99999999999999999999"},
        "error: MASTER_PORT must be an integer in [1, 65535], got '99999999999999999999'"),
    "LOCAL_WORKER_NUM 0": (
        "2", {"LOCAL_WORKER_NUM": "0"}, "error: LOCAL_WORKER_NUM must be an integer in [1, 100000], got '0'"),
    "LOCAL_WORKER_NUM above WORKER_NUM": (
        "2", {"LOCAL_WORKER_NUM": "3"}, "error: LOCAL_WORKER_NUM 3 exceeds WORKER_NUM 2"),
    "WORKER_NUM not a multiple of LOCAL_WORKER_NUM with NODE_RANK": (
        "5", {"LOCAL_WORKER_NUM": "2", "NODE_RANK": "0", "JOB_ID": "j"},
        "error: WORKER_NUM 5 is not a multiple of LOCAL_WORKER_NUM 2: with NODE_RANK every node runs "
        "LOCAL_WORKER_NUM workers (ranks NODE_RANK * LOCAL_WORKER_NUM + i); unset NODE_RANK to number the workers in "
        "join order"),
    "CLUSTER_TIMEOUT out of range": (
        "2", {"CLUSTER_TIMEOUT": "9999999999"},
        "error: CLUSTER_TIMEOUT must be an integer in [1, 604800], got '9999999999'"),
}


def launch(worker_num, env, cwd):
    full_env = {k: v for k, v in os.environ.items()
                if k not in ("RUN_DIR", "JOB_ID", "SLURM_JOB_ID", "NODE_RANK", "LOCAL_WORKER_NUM", "MASTER_PORT",
                             "CLUSTER_TIMEOUT")}
    full_env.update(PYTHON=sys.executable, **env)
    return subprocess.run(["bash", LAUNCHER, worker_num, CONFIG, "--device_target", "CPU"], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_launcher_setting_that_makes_no_job_is_one_line_before_anything_starts(case, tmp_path):
    """Provokes: each setting above (NODE_RANK=5 on a one-node job ran before; MASTER_PORT=70000 ended in a
    worker's failure)."""
    worker_num, env, line = CASES[case]
    result = launch(worker_num, env, tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr == line + "\n" and result.stdout == ""
    assert os.listdir(tmp_path) == []  # no run directory: nothing was started


@pytest.mark.timeout(600)
def test_a_worker_that_refuses_its_settings_is_named_with_its_error_line(tmp_path):
    """Provokes: both workers of a 2-worker msrun job stop on train.py's own check (a missing dataset), before
    MindSpore logs their pids: the launcher's last line names a worker, quotes its `error:` line and points at its
    log, not at msrun.log (issue 27)."""
    run_dir = tmp_path / "run"
    env = dict(os.environ, PYTHON=sys.executable, RUN_DIR=str(run_dir), MASTER_PORT=str(free_port()))
    result = subprocess.run(["bash", LAUNCHER, "2", CONFIG, "--data_path", str(tmp_path / "missing"),
                             "--device_target", "CPU"], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=580)
    assert result.returncode == 2, result.stdout + result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert re.fullmatch(r"error: worker [01] \(pid \d+\) exited with status 2 \(error: dataset path not found: .*"
                        r"missing.*\); the other workers were stopped; see .*/worker_[01]\.log", last), last
