"""eval.py shows its progress: on a terminal one line redrawn in place with img/s and ETA, in a log
a plain line at the start, at most every 10 s and at the end; the last line counts the images really
scored (padding rows left out)."""
import os
import pty
import re
import subprocess
import sys

import pytest

from src.run.progress import ProgressBar

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "src", "configs", "dm_nfnet_nano_digits.yaml")
LINE = re.compile(r"eval: (\d+)/(\d+) \[[#.]{30}\] +(\d+)% ([\d.]+) img/s(, eta \d+:\d\d)?")


class Stream:
    def __init__(self, tty):
        self.tty, self.text = tty, ""

    def isatty(self):
        return self.tty

    def write(self, text):
        self.text += text

    def flush(self):
        pass


class Clock:
    """A clock the test moves: the bar's lines depend on the seconds between updates, not on this machine."""

    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_bar_in_a_log_writes_a_line_at_most_every_interval_and_finish_gives_the_true_count():
    stream, clock = Stream(tty=False), Clock()
    bar = ProgressBar(40, "eval", stream=stream, unit="img", interval_s=10.0, clock=clock)
    for _ in range(9):
        clock.now += 3.0  # 3 s per update: lines at the first update, then once 10 s have passed
        bar.update(4)  # 36 of an upper bound of 40
    bar.finish()
    lines = stream.text.splitlines()
    assert "\r" not in stream.text
    assert [LINE.match(line)[1] for line in lines] == ["4", "20", "36", "36"]  # t = 3, 15, 27 s; then finish
    assert LINE.match(lines[-1])[2] == "36" and LINE.match(lines[-1])[3] == "100"
    assert all(LINE.match(line)[5] for line in lines[1:-1]) and not LINE.match(lines[-1])[5]  # eta until done
    assert LINE.match(lines[1])[4] == f"{16 / 12:.1f}"  # 16 images in the 12 s after the first


def test_bar_in_a_log_of_a_fast_run_writes_the_first_and_the_last_line():
    stream, clock = Stream(tty=False), Clock()
    bar = ProgressBar(100, "eval", stream=stream, unit="img", clock=clock)
    for _ in range(100):
        clock.now += 0.01
        bar.update(1)
    assert [LINE.match(line)[1] for line in stream.text.splitlines()] == ["1", "100"]


def test_bar_on_a_terminal_redraws_one_line():
    stream = Stream(tty=True)
    bar = ProgressBar(3, "eval", stream=stream, unit="img")
    for _ in range(3):
        bar.update(1)
    assert stream.text.startswith("\r") and stream.text.endswith("\n") and stream.text.count("\n") == 1


@pytest.fixture(scope="module")
def nano_checkpoint(tmp_path_factory):
    import mindspore as ms

    from src.models import create_model

    path = str(tmp_path_factory.mktemp("ckpt") / "nano.ckpt")
    ms.save_checkpoint(create_model("dm_nfnet_nano", num_classes=10), path)
    return path


def eval_args(data, checkpoint, tmp_path):
    # 20 images in batches of 6: 4 batches, the last padded with 4 rows that are not counted
    return [sys.executable, "eval.py", "--config", CONFIG, "--data_path", data, "--checkpoint", checkpoint,
            "--eval_batch_size", "6", "--num_parallel_workers", "1", "--output", str(tmp_path / "m.json")]


@pytest.mark.timeout(600)
def test_eval_writes_progress_lines_to_a_log(digits_subset, nano_checkpoint, tmp_path):
    result = subprocess.run(eval_args(digits_subset(1, 2), nano_checkpoint, tmp_path), cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("eval:")]
    # the first update, any every 10 s on a slow machine, then the true count
    assert [LINE.fullmatch(line)[1] for line in lines][0] == "6" and LINE.fullmatch(lines[-1])[1] == "20"
    # issue 27: the total is the 20 images from the first line on, not the 24 padded rows
    assert LINE.fullmatch(lines[0])[2] == "20" and LINE.fullmatch(lines[-1])[2] == "20", result.stderr
    assert float(LINE.fullmatch(lines[-1])[4]) > 0
    assert "on 20 images" in result.stdout


@pytest.mark.timeout(600)
def test_eval_on_a_terminal_redraws_its_progress_line(digits_subset, nano_checkpoint, tmp_path):
    leader, follower = pty.openpty()
    proc = subprocess.Popen(eval_args(digits_subset(1, 2), nano_checkpoint, tmp_path), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=follower, text=True)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the terminal closed with the process
            break
        if not chunk:
            break
        chunks.append(chunk)
    out, _ = proc.communicate(timeout=600)
    os.close(leader)
    assert proc.returncode == 0
    terminal = b"".join(chunks).decode()
    drawn = [part.strip() for part in terminal.split("\r") if part.strip().startswith("eval:")]
    assert len(drawn) >= 2 and LINE.fullmatch(drawn[-1])[1] == "20", terminal
    assert terminal.count("eval:") == len(drawn) and "\n" not in terminal.split("\r")[1].rstrip("\n")
    assert "on 20 images" in out
