"""Launch scripts (standalone, hccl rank table, msrun, mpirun, evaluation): argument checks,
shellcheck, and what the rank-table and mpirun launchers start (with stand-ins for the
devices' processes). Real runs through the CPU and msrun scripts: tests/distributed/."""
import os
import shutil
import socket
import stat
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(ROOT, "scripts")
CONFIG = os.path.join(ROOT, "src", "configs", "dm_nfnet_nano_digits.yaml")

# script -> (its required arguments as usage shows them, a valid set of them)
LAUNCHERS = {
    "run_standalone_train_ascend.sh": ("[DEVICE_ID] [CONFIG_PATH]", ["0", CONFIG]),
    "run_standalone_train_gpu.sh": ("[DEVICE_ID] [CONFIG_PATH]", ["0", CONFIG]),
    "run_standalone_train_cpu.sh": ("[CONFIG_PATH]", [CONFIG]),
    "run_distribute_train_ascend.sh": ("[RANK_TABLE_FILE] [CONFIG_PATH]", ["RANK_TABLE", CONFIG]),
    "run_distribute_train_msrun.sh": ("[WORKER_NUM] [CONFIG_PATH]", ["2", CONFIG]),
    "run_distribute_train_gpu.sh": ("[DEVICE_NUM] [CONFIG_PATH]", ["2", CONFIG]),
    "run_eval_ascend.sh": ("[DEVICE_ID] [CONFIG_PATH] [CHECKPOINT_PATH]", ["0", CONFIG, "CKPT"]),
    "run_eval_gpu.sh": ("[DEVICE_ID] [CONFIG_PATH] [CHECKPOINT_PATH]", ["0", CONFIG, "CKPT"]),
    "run_eval_cpu.sh": ("[CONFIG_PATH] [CHECKPOINT_PATH]", [CONFIG, "CKPT"]),
}


def bash(script, *args, cwd, env=None, timeout=60):
    full_env = dict(os.environ, PYTHON=sys.executable)
    full_env.pop("RUN_DIR", None)
    full_env.update(env or {})
    return subprocess.run(["bash", os.path.join(SCRIPTS, script), *map(str, args)], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("script", sorted(LAUNCHERS))
def test_too_few_arguments_print_usage_and_exit_1_without_writing(script, tmp_path):
    shown, valid = LAUNCHERS[script]
    for count in range(len(valid)):
        result = bash(script, *valid[:count], cwd=tmp_path)
        assert result.returncode == 1, (count, result.stderr)
        assert f"Usage: bash {os.path.join(SCRIPTS, script)} {shown}" in result.stderr
    assert os.listdir(tmp_path) == []


def _bad_values(script, tmp_path):
    """(arguments, expected message) pairs for the script's required arguments."""
    shown, valid = LAUNCHERS[script]
    names = shown.strip("[]").split("] [")
    cases = []
    for i, name in enumerate(names):
        args = list(valid)
        if name in ("DEVICE_ID",):
            args[i] = "one"
            cases.append((args, "DEVICE_ID must be a non-negative integer, got 'one'"))
        elif name in ("WORKER_NUM", "DEVICE_NUM"):
            args[i] = "0"
            cases.append((args, f"{name} must be a positive integer, got '0'"))
        else:
            args[i] = str(tmp_path / "missing")
            cases.append((args, f"{name} not found: {tmp_path / 'missing'}"))
    return cases


@pytest.mark.parametrize("script", sorted(LAUNCHERS))
def test_bad_argument_values_name_the_argument_print_usage_and_exit_1(script, tmp_path):
    ckpt = tmp_path / "net.ckpt"
    ckpt.write_bytes(b"x")
    table = tmp_path / "rank_table.json"
    table.write_text("{}")
    for args, message in _bad_values(script, tmp_path):
        args = [str(ckpt) if a == "CKPT" else str(table) if a == "RANK_TABLE" else a for a in args]
        result = bash(script, *args, cwd=tmp_path)
        assert result.returncode == 1, (args, result.stderr)
        assert f"error: {message}" in result.stderr and "Usage: bash" in result.stderr, (args, result.stderr)
    assert sorted(os.listdir(tmp_path)) == ["net.ckpt", "rank_table.json"]


def test_msrun_refuses_more_local_workers_than_workers(tmp_path):
    result = bash("run_distribute_train_msrun.sh", "2", CONFIG, cwd=tmp_path, env={"LOCAL_WORKER_NUM": "3"})
    assert result.returncode == 2 and result.stderr == "error: LOCAL_WORKER_NUM 3 exceeds WORKER_NUM 2\n"


def test_rank_table_that_is_not_one_is_refused(tmp_path):
    table = tmp_path / "rank_table.json"
    table.write_text('{"server_list": []}')
    result = bash("run_distribute_train_ascend.sh", table, CONFIG, cwd=tmp_path)
    assert result.returncode == 1
    assert f"RANK_TABLE_FILE {table} is not an hccl rank table with server 0" in result.stderr


def _recording_python(tmp_path):
    """A PYTHON stand-in: runs inline code (`python - ...`) for real, records any other start."""
    record = tmp_path / "starts"
    record.mkdir()
    stub = tmp_path / "python"
    stub.write_text(f"""#!/bin/bash
if [ "$1" = - ]; then exec {sys.executable} "$@"; fi
echo "RANK_SIZE=${{RANK_SIZE:-}} RANK_ID=${{RANK_ID:-}} DEVICE_ID=${{DEVICE_ID:-}} \
RANK_TABLE_FILE=${{RANK_TABLE_FILE:-}} CORES=$(taskset -pc $$ | sed 's/.*: //') ARGS=$*" \
  > {record}/rank_${{RANK_ID:-x}}
""")
    stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    return str(stub), record


@pytest.mark.skipif(shutil.which("taskset") is None, reason="needs taskset (util-linux)")
def test_rank_table_launcher_starts_one_process_per_device_of_this_server(tmp_path):
    import json

    devices = [[{"device_id": "4", "rank_id": "0"}, {"device_id": "6", "rank_id": "1"}],
               [{"device_id": "0", "rank_id": "2"}, {"device_id": "1", "rank_id": "3"}]]
    table = tmp_path / "hccl_4p.json"
    table.write_text(json.dumps({"version": "1.0", "server_count": "2", "status": "completed",
                                 "server_list": [{"server_id": f"10.0.0.{i}", "device": d}
                                                 for i, d in enumerate(devices)]}))
    stub, record = _recording_python(tmp_path)
    run_dir = tmp_path / "run"
    result = bash("run_distribute_train_ascend.sh", table, CONFIG, "--epochs", "3", cwd=tmp_path,
                  env={"PYTHON": stub, "SERVER_ID": "1", "RUN_DIR": str(run_dir),
                       "ASCEND_DEVICE_NODE": str(table)})  # stands for /dev/davinci_manager
    assert result.returncode == 0, result.stderr
    starts = {name: (record / name).read_text() for name in sorted(os.listdir(record))}
    assert sorted(starts) == ["rank_2", "rank_3"]
    for rank, device in ((2, 0), (3, 1)):
        line = starts[f"rank_{rank}"]
        assert f"RANK_SIZE=4 RANK_ID={rank} DEVICE_ID={device} RANK_TABLE_FILE={table} " in line
        assert (f"ARGS={ROOT}/train.py --config {CONFIG} --device_target Ascend --device_id {device} "
                f"--output_dir {run_dir}/output --epochs 3") in line
    cores = os.cpu_count()
    if cores >= 2:  # each process gets its own slice of the cores
        per = cores // 2
        assert "CORES=" + (f"0-{per - 1}" if per > 1 else "0") in starts["rank_2"]
    assert sorted(os.listdir(run_dir / "logs")) == ["train_rank2.log", "train_rank3.log"]


def test_mpirun_launcher_passes_the_processes_and_the_hostfile(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "mpirun"
    fake.write_text(f"#!/bin/bash\necho \"$*\" > {tmp_path}/mpirun_args\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node1 slots=8\n")
    run_dir = tmp_path / "run"
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "HOSTFILE": str(hostfile), "RUN_DIR": str(run_dir)}
    result = bash("run_distribute_train_gpu.sh", "8", CONFIG, "--epochs", "3", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    args = (tmp_path / "mpirun_args").read_text().split()
    assert args[:5] == ["-n", "8", "--allow-run-as-root", "--hostfile", str(hostfile)]
    assert args[-10:] == [sys.executable, f"{ROOT}/train.py", "--config", CONFIG, "--device_target", "GPU",
                          "--output_dir", f"{run_dir}/output", "--epochs", "3"]


def test_shellcheck_passes_on_the_launch_scripts():
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed (Debian package shellcheck: sudo make shellcheck)")
    scripts = [os.path.join("scripts", s) for s in sorted(LAUNCHERS)] + ["scripts/launch_common.sh"]
    result = subprocess.run(["shellcheck", "-x", *scripts], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_msrun_over_several_nodes_needs_a_shared_run_dir_name(tmp_path):
    """Each node's launcher would otherwise name RUN_DIR after its own clock."""
    result = bash("run_distribute_train_msrun.sh", "2", CONFIG, cwd=tmp_path,
                  env={"LOCAL_WORKER_NUM": "1", "NODE_RANK": "1", "SLURM_JOB_ID": ""})
    assert result.returncode == 2
    assert ("error: a job over several nodes (LOCAL_WORKER_NUM 1 of WORKER_NUM 2) needs RUN_DIR or JOB_ID, the same "
            "on every node") in result.stderr
    assert os.listdir(tmp_path) == []


def test_msrun_has_one_cluster_timeout(tmp_path):
    """CLUSTER_TIMEOUT and --cluster_timeout are the same setting: two different values are refused."""
    result = bash("run_distribute_train_msrun.sh", "2", CONFIG, "--cluster_timeout", "600", cwd=tmp_path,
                  env={"CLUSTER_TIMEOUT": "120"})
    assert result.returncode == 2
    assert "error: CLUSTER_TIMEOUT 120 differs from --cluster_timeout 600: give one" in result.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster_timeout: 0\n")
    result = bash("run_distribute_train_msrun.sh", "2", bad, cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.strip().splitlines()[-1] == (
        f"error: {bad}: cluster_timeout: must be in [1, 604800], got 0")


@pytest.mark.timeout(600)
def test_the_eval_launcher_shows_eval_py_output_once_and_keeps_it_in_its_log(digits_subset, tmp_path):
    import mindspore as ms

    from src.models import create_model

    checkpoint = str(tmp_path / "nano.ckpt")
    ms.save_checkpoint(create_model("dm_nfnet_nano", num_classes=10), checkpoint)
    run_dir = tmp_path / "run"
    result = bash("run_eval_cpu.sh", CONFIG, checkpoint, "--data_path", digits_subset(1, 1),
                  "--num_parallel_workers", "1", cwd=tmp_path, env={"RUN_DIR": str(run_dir)}, timeout=580)
    assert result.returncode == 0, result.stdout + result.stderr
    summary = [line for line in result.stdout.splitlines() if line.startswith("top1 ")]
    assert len(summary) == 1, result.stdout  # tee'd once, not printed again from the log (issue 27)
    assert summary[0] in (run_dir / "logs" / "eval.log").read_text()


@pytest.mark.parametrize("script, args, device, cpu_launcher", [
    ("run_standalone_train_ascend.sh", ["0", CONFIG], "Ascend", "run_standalone_train_cpu.sh"),
    ("run_standalone_train_gpu.sh", ["0", CONFIG], "GPU", "run_standalone_train_cpu.sh"),
    ("run_distribute_train_gpu.sh", ["8", CONFIG], "GPU", "run_distribute_train_msrun.sh"),
    ("run_eval_ascend.sh", ["0", CONFIG, "CKPT"], "Ascend", "run_eval_cpu.sh"),
    ("run_eval_gpu.sh", ["0", CONFIG, "CKPT"], "GPU", "run_eval_cpu.sh"),
])
def test_a_device_launcher_refuses_another_device_before_any_folder(script, args, device, cpu_launcher, tmp_path):
    ckpt = tmp_path / "net.ckpt"
    ckpt.write_bytes(b"x")
    args = [str(ckpt) if a == "CKPT" else a for a in args]
    for override in (["--device_target", "CPU"], ["--device_target=CPU"]):
        result = bash(script, *args, "--epochs", "1", *override, cwd=tmp_path)
        assert result.returncode == 2 and result.stderr == (
            f"error: {script} runs on {device}, not --device_target CPU: on the CPU use scripts/{cpu_launcher}\n")
    assert sorted(os.listdir(tmp_path)) == ["net.ckpt"]  # no runs/ folder


@pytest.mark.parametrize("script, args", [("run_standalone_train_ascend.sh", ["0", CONFIG]),
                                          ("run_eval_ascend.sh", ["0", CONFIG, "CKPT"])])
def test_an_ascend_launcher_on_a_machine_without_the_driver_stops_before_any_folder(script, args, tmp_path):
    ckpt = tmp_path / "net.ckpt"
    ckpt.write_bytes(b"x")
    args = [str(ckpt) if a == "CKPT" else a for a in args]
    result = bash(script, *args, cwd=tmp_path, env={"ASCEND_DEVICE_NODE": str(tmp_path / "davinci_manager")})
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: no Ascend device on this machine ({tmp_path / 'davinci_manager'} is "
                                    f"missing: no Ascend driver): {script} runs train.py on Ascend devices")
    assert sorted(os.listdir(tmp_path)) == ["net.ckpt"]


def test_a_failing_launch_that_wrote_nothing_leaves_no_run_folder(tmp_path):
    result = bash("run_standalone_train_cpu.sh", CONFIG, "--epochs", "0", cwd=tmp_path)
    assert result.returncode == 2
    assert "error: " in result.stdout + result.stderr and "removed" in result.stderr
    assert os.listdir(tmp_path) == []  # runs/train_cpu-* is gone


# MindSpore 2.10's report when a SIGTERM to the process group (a scheduler's stop, Ctrl-C) ends a dataset
# worker, captured from train.py with two workers on CPU; and the same report for a worker the OOM killer ended
MD_STOPPED = ("[ERROR] MD(20232,7f5e0da1cb80,python):2026-12-02-01:29:47.413.511 [mindspore/ccsrc/minddata/dataset/"
              "util/sig_handler.cc:556] SIGCHLDHandler] Dataset worker process 20284 was killed by signal: "
              "Terminated. Main process will be terminated.",
              "[WARNING] MD(20232,7f5e0da1cb80,python):2026-12-02-01:29:47.413.649 [mindspore/ccsrc/minddata/"
              "dataset/util/sig_handler.cc:559] SIGCHLDHandler] Main process may not respond to the SIGTERM signal, "
              "please check if it is blocked.")
MD_KILLED = MD_STOPPED[0].replace("Terminated.", "Killed.")


def test_run_logged_keeps_the_dataset_workers_stop_reports_off_the_console_and_in_the_log(tmp_path):
    """Issue 27: after our own SIGTERM, MindSpore's `Dataset worker process ... killed by signal: Terminated`
    lines are not shown on the launcher's console; a worker killed otherwise (Killed) and every other line are,
    and the log keeps all of them. The command is a real process printing MindSpore's lines as captured."""
    lines = ["epoch 1/2 step 13/44 loss 2.3016", *MD_STOPPED, MD_KILLED, "error: a real one"]
    printer = tmp_path / "lines.txt"
    printer.write_text("\n".join(lines) + "\n")
    log = tmp_path / "train.log"
    result = subprocess.run(["bash", "-c", f'source "{SCRIPTS}/launch_common.sh"; run_logged "$1" cat "$2"',
                             "bash", str(log), str(printer)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"log: {log}", lines[0], MD_KILLED, "error: a real one", f"done: {log}"]
    assert log.read_text().splitlines() == lines


def test_train_py_keeps_off_the_console_what_the_launchers_keep_off(tmp_path):
    """Issue 27: a plain `python train.py` passes MindSpore's native stderr through src/run/console_filter.py
    (run here as train.py runs it, a process reading a pipe); it drops exactly the lines console_lines drops."""
    lines = ["epoch 1/2 step 13/44 loss 2.3016", *MD_STOPPED, MD_KILLED, "error: a real one", "no newline at the end"]
    text = "\n".join(lines)
    script = os.path.join(ROOT, "src", "run", "console_filter.py")
    filtered = subprocess.run([sys.executable, "-S", script], input=text, capture_output=True, text=True, timeout=60)
    shell = subprocess.run(["bash", "-c", f'source "{SCRIPTS}/launch_common.sh"; console_lines'], input=text,
                           capture_output=True, text=True, timeout=60)
    assert filtered.returncode == 0 and filtered.stderr == "", filtered.stderr
    assert filtered.stdout.splitlines() == [lines[0], MD_KILLED, "error: a real one", "no newline at the end"]
    assert filtered.stdout.splitlines() == shell.stdout.splitlines()


@pytest.mark.timeout(300)
def test_the_msrun_run_directory_names_the_device(tmp_path):
    """Issue 27: the default run directory says the device the workers run on: the config's (dm_nfnet_f0.yaml:
    Ascend) when no --device_target is given. The workers stop at once on this machine (no Ascend: train.py's
    one line); the launcher names the worker and its line."""
    f0 = os.path.join(ROOT, "src", "configs", "dm_nfnet_f0.yaml")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    result = bash("run_distribute_train_msrun.sh", "2", f0, "--data_path", str(tmp_path), cwd=tmp_path,
                  env={"JOB_ID": "t", "MASTER_PORT": port, "CLUSTER_TIMEOUT": "60"}, timeout=240)
    assert f"run directory: {tmp_path}/runs/train_msrun_ascend_2p-t" in result.stdout, result.stdout + result.stderr
    assert result.returncode == 2 and "device_target Ascend is not available" in result.stderr, result.stderr
