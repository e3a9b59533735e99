"""The dataset listed once (issue 28 item 5), and a mid-epoch resume as one pass (item 4): train.py walks each split
folder once per start-up, also when it resumes in the middle of an epoch, and eval.py walks its split once. Real
train.py / eval.py processes on the tiny digits; os.scandir is counted on each split folder (a listing begins
there: src/data/folder.py find_classes, then one os.walk per class folder). Before the change a start-up listed
train three times (the layout check, the class split, the source) and val twice, eval.py val twice; a mid-epoch
resume added a fourth train walk. The same processes count the training pipelines built (create_dataset with
is_training) and the Model.train calls: a mid-epoch resume was two of each (the rest of the epoch, then the next
epochs), it is one pipeline that starts at the saved batch and one Model.train."""
import subprocess
import sys

import pytest

from reliability_helpers import CONFIG, ROOT, TINY, succeeded

# Runs `python <script> <args>` with os.scandir counted on the split folders, create_dataset(is_training=True) and
# Model.train counted; prints the counts at exit.
_COUNTING = ("import atexit, os, runpy, sys\n"
             "data = os.path.abspath(sys.argv[1]); del sys.argv[1]\n"
             "counts = {'train': 0, 'val': 0, 'pipelines': 0, 'model_train': 0}\n"
             "scandir = os.scandir\n"
             "def counted(path='.'):\n"
             "    folder = os.path.abspath(os.fspath(path))\n"
             "    if os.path.dirname(folder) == data and os.path.basename(folder) in ('train', 'val'):\n"
             "        counts[os.path.basename(folder)] += 1\n"
             "    return scandir(path)\n"
             "os.scandir = counted\n"
             "import src.data\n"
             "create_dataset = src.data.create_dataset\n"
             "def counted_dataset(data_path, split, is_training, *args, **kwargs):\n"
             "    counts['pipelines'] += bool(is_training)\n"
             "    return create_dataset(data_path, split, is_training, *args, **kwargs)\n"
             "src.data.create_dataset = counted_dataset\n"
             "from mindspore.train import Model\n"
             "model_train = Model.train\n"
             "def counted_train(*args, **kwargs):\n"
             "    counts['model_train'] += 1\n"
             "    return model_train(*args, **kwargs)\n"
             "Model.train = counted_train\n"
             "pid = os.getpid()\n"
             "atexit.register(lambda: os.getpid() == pid and print('counts:', *counts.values()))\n"
             "sys.argv = sys.argv[1:]\n"
             "runpy.run_path(sys.argv[0], run_name='__main__')\n")


def counts(data, script, *args):
    """(train walks, val walks, training pipelines, Model.train calls) of one `python <script>` process on `data`."""
    result = succeeded(subprocess.run([sys.executable, "-c", _COUNTING, data, script, "--config", CONFIG,
                                       "--data_path", data, *map(str, args)], cwd=ROOT, capture_output=True,
                                      text=True, timeout=900))
    line = [line for line in result.stdout.splitlines() if line.startswith("counts:")][-1]
    return tuple(int(n) for n in line.split()[1:])


@pytest.mark.timeout(1500)
def test_each_split_is_walked_once_and_a_mid_epoch_resume_is_one_pass(tiny_digits, tmp_path):
    run = tmp_path / "run"
    args = ["--output_dir", run, *TINY, "--eval_while_train", "true"]
    assert counts(tiny_digits, "train.py", *args, "--max_steps", 3) == (1, 1, 1, 1)  # stops in epoch 1, step 3 of 7
    # resumes mid-epoch: one pipeline, one Model.train
    assert counts(tiny_digits, "train.py", *args, "--max_steps", 5, "--resume", "auto") == (1, 1, 1, 1)
    log = (run / "train.log").read_text()
    assert "epoch 1/2 step 4/7" in log and "epoch 1/2 step 5/7" in log
    checkpoint = sorted(run.glob("*.ckpt"))[-1]
    assert counts(tiny_digits, "eval.py", "--checkpoint", checkpoint, "--output", tmp_path / "eval.json") == \
        (0, 1, 0, 0)
