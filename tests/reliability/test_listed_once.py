"""The dataset listed once (issue 28 item 5): train.py walks each split folder once per start-up, also when it
resumes in the middle of an epoch (two training pipelines then read the same listing). Real train.py processes on
the tiny digits; os.scandir is counted on each split folder (a listing begins there: src/data/folder.py
find_classes, then one os.walk per class folder). Before the change a start-up listed train three times
(the layout check, the class split, the source) and val twice; a mid-epoch resume added a fourth train walk."""
import subprocess
import sys

import pytest

from reliability_helpers import CONFIG, ROOT, TINY, succeeded

# Runs `python train.py <args>` with os.scandir counted on the split folders; prints the counts at exit.
_COUNTING = ("import atexit, os, runpy, sys\n"
             "data = os.path.abspath(sys.argv[1]); del sys.argv[1]\n"
             "counts = {'train': 0, 'val': 0}\n"
             "scandir = os.scandir\n"
             "def counted(path='.'):\n"
             "    folder = os.path.abspath(os.fspath(path))\n"
             "    if os.path.dirname(folder) == data and os.path.basename(folder) in counts:\n"
             "        counts[os.path.basename(folder)] += 1\n"
             "    return scandir(path)\n"
             "os.scandir = counted\n"
             "pid = os.getpid()\n"
             "atexit.register(lambda: os.getpid() == pid and print('listings:', counts['train'], counts['val']))\n"
             "sys.argv = sys.argv[1:]\n"
             "runpy.run_path(sys.argv[0], run_name='__main__')\n")


def listings(data, *args):
    """(train walks, val walks) of one train.py process on `data`."""
    result = succeeded(subprocess.run([sys.executable, "-c", _COUNTING, data, "train.py", "--config", CONFIG,
                                       "--data_path", data, *map(str, args)], cwd=ROOT, capture_output=True,
                                      text=True, timeout=900))
    line = [line for line in result.stdout.splitlines() if line.startswith("listings:")][-1]
    return tuple(int(n) for n in line.split()[1:])


@pytest.mark.timeout(1200)
def test_each_split_is_walked_once_per_start_up_also_by_a_mid_epoch_resume(tiny_digits, tmp_path):
    args = ["--output_dir", tmp_path / "run", *TINY, "--eval_while_train", "true"]
    assert listings(tiny_digits, *args, "--max_steps", 3) == (1, 1)  # stops in epoch 1, step 3 of 7
    assert listings(tiny_digits, *args, "--max_steps", 5, "--resume", "auto") == (1, 1)  # resumes mid-epoch
    assert "epoch 1/2 step 5/7" in (tmp_path / "run" / "train.log").read_text()
