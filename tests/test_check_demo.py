""".ci/check_demo.py: passes on consistent demo outputs, names the first number that disagrees."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECKER = os.path.join(ROOT, ".ci", "check_demo.py")
HEADER = "epoch,train_loss,lr,top1,top5,val_loss,images,seconds\n"


def _demo_outputs(out, eval_top1=351, mindir_top1=351, best=351):
    (out / "infer").mkdir(parents=True)
    rows = [(1, 300), (2, best), (3, 340)]  # the best epoch is not the last
    (out / "metrics.csv").write_text(HEADER + "".join(
        f"{epoch},1.0,0.1,{format(c / 359, '.10g')},1,0.5,1408,8.0\n" for epoch, c in rows))
    for path, correct in ((out / "eval.json", eval_top1), (out / "infer" / "acc.json", mindir_top1)):
        path.write_text(json.dumps({"top1": correct / 359, "top5": 1.0, "count": 359, "correct_top1": correct,
                                    "correct_top5": 359}))


def _check(out, *args):
    return subprocess.run([sys.executable, CHECKER, str(out), *args], capture_output=True, text=True, timeout=60)


def test_consistent_outputs_pass(tmp_path):
    _demo_outputs(tmp_path)
    result = _check(tmp_path)
    assert result.returncode == 0, result.stderr
    assert "best top1 0.9777 (351/359) at epoch 2" in result.stdout


@pytest.mark.parametrize("change,message", [
    (dict(eval_top1=350), "eval.py counts 350/359, training logged 351/359"),
    (dict(mindir_top1=352), "the MINDIR counts 352/359, training logged 351/359"),
    (dict(best=330, eval_top1=340, mindir_top1=340), "best top1 0.9471 is below the floor 0.95"),
])
def test_a_disagreeing_number_fails_with_one_line(tmp_path, change, message):
    _demo_outputs(tmp_path, **change)
    result = _check(tmp_path)
    assert result.returncode == 1 and result.stderr.strip() == f"error: demo check: {message}"


def test_missing_outputs_fail(tmp_path):
    result = _check(tmp_path)
    assert result.returncode == 1 and result.stderr.startswith("error: demo check:") and "metrics.csv" in result.stderr
