"""postprocess.py: top-1/top-5 counts from result .bin files, and its errors for broken inputs."""
import importlib
import json
import os

import numpy as np
import pytest

from deploy_helpers import error_lines, run_python
from src.errors import UserError
from src.deploy.binio import write_json, write_tensor
from src.accuracy import correct_topk

postprocess_script = importlib.import_module("postprocess")


def write_results(tmp_path, logits_per_file, labels):
    """result_Files/<name>_0.bin and labels.json for {name: logits} and {name: label(s)}."""
    results = tmp_path / "result_Files"
    results.mkdir()
    for name, logits in logits_per_file.items():
        write_tensor(str(results / f"{name}_0.bin"), np.asarray(logits, np.float32))
    write_json(str(tmp_path / "labels.json"), labels)
    return str(results), str(tmp_path / "labels.json")


def one_hot_logits(winner, classes=10, runner_ups=()):
    logits = np.zeros(classes, np.float32)
    logits[winner] = 10
    for rank, c in enumerate(runner_ups):
        logits[c] = 9 - rank
    return logits[None]


def postprocess(results, labels, tmp_path, *extra):
    output = str(tmp_path / "acc.json")
    postprocess_script.main(["--result_path", results, "--label_path", labels, "--output", output, *extra])
    with open(output, encoding="utf-8") as f:
        return json.load(f)


def test_counts_top1_and_top5_and_writes_the_eval_keys(tmp_path, capsys):
    logits = {
        "img_00000000": one_hot_logits(3),                           # top-1 right
        "img_00000001": one_hot_logits(0, runner_ups=(1, 2, 3, 4)),  # label 4: 5th -> top-5 only
        "img_00000002": one_hot_logits(0, runner_ups=(1, 2, 3, 4)),  # label 5: neither
    }
    results, labels = write_results(tmp_path, logits, {"img_00000000": 3, "img_00000001": 4, "img_00000002": 5})
    report = postprocess(results, labels, tmp_path)
    assert report == {"top1": 1 / 3, "top5": 2 / 3, "count": 3, "correct_top1": 1, "correct_top5": 2}
    assert "top-1 33.33% (1/3), top-5 66.67% (2/3), 3 images" in capsys.readouterr().out


def test_batched_results_score_only_the_real_images(tmp_path):
    full = np.concatenate([one_hot_logits(1), one_hot_logits(2)])
    padded = np.concatenate([one_hot_logits(7), one_hot_logits(7)])  # 2nd row is padding
    results, labels = write_results(tmp_path, {"batch_00000000": full, "batch_00000001": padded},
                                    {"batch_00000000": [1, 0], "batch_00000001": [7]})
    report = postprocess(results, labels, tmp_path)
    assert (report["count"], report["correct_top1"]) == (3, 2)


def test_ties_and_non_finite_logits_count_as_in_eval_py():
    logits = np.array([[1.0, 1.0, 0.0], [np.nan, 5.0, 0.0]], np.float32)
    assert correct_topk(logits[:1], [0], 1) == 1  # an equal logit at a higher index does not pass it
    assert correct_topk(logits[:1], [1], 1) == 0  # ... one at a lower index does
    assert correct_topk(logits[:1], [1], 2) == 1
    assert correct_topk(logits[1:], [1], 1) == 0  # a row with a NaN is never correct


def test_more_results_than_labels_is_an_error_naming_the_file(tmp_path):
    results, labels = write_results(tmp_path, {"img_00000000": one_hot_logits(0), "img_00000001": one_hot_logits(1)},
                                    {"img_00000000": 0})
    with pytest.raises(UserError, match=r"2 results .* 1 labels .*no label for img_00000001_0\.bin"):
        postprocess(results, labels, tmp_path)


def test_missing_result_is_an_error(tmp_path):
    results, labels = write_results(tmp_path, {"img_00000000": one_hot_logits(0)},
                                    {"img_00000000": 0, "img_00000001": 1})
    with pytest.raises(UserError, match="no result for img_00000001"):
        postprocess(results, labels, tmp_path)


def test_wrong_size_result_is_an_error_naming_the_file(tmp_path):
    results, labels = write_results(
        tmp_path, {"img_00000000": one_hot_logits(0), "img_00000001": one_hot_logits(1),
                   "img_00000002": np.zeros((1, 7), np.float32)},
        {"img_00000000": 0, "img_00000001": 1, "img_00000002": 2})
    with pytest.raises(UserError, match=r"img_00000002_0\.bin: 28 bytes, but the other results have 40"):
        postprocess(results, labels, tmp_path)


def test_class_count_can_be_checked(tmp_path):
    results, labels = write_results(tmp_path, {"img_00000000": one_hot_logits(0)}, {"img_00000000": 0})
    with pytest.raises(UserError, match="10 logits per image, expected 1000"):
        postprocess(results, labels, tmp_path, "--num_classes", "1000")


@pytest.mark.parametrize("labels_text, message", [
    ("{\"img_00000000\": 12}", "out of range for 10 classes"),
    ("{\"img_00000000\": \"cat\"}", "must be a class index"),
    ("[1, 2]", "non-empty JSON object"),
    ("{not json", "not a readable JSON label file"),
])
def test_bad_labels_are_errors(tmp_path, labels_text, message):
    results, labels = write_results(tmp_path, {"img_00000000": one_hot_logits(0)}, {"img_00000000": 0})
    with open(labels, "w", encoding="utf-8") as f:
        f.write(labels_text)
    with pytest.raises(UserError, match=message):
        postprocess(results, labels, tmp_path)


def test_missing_inputs_are_one_line_errors_with_exit_code_2(tmp_path):
    result = run_python(["postprocess.py", "--result_path", str(tmp_path / "none"),
                         "--label_path", str(tmp_path / "labels.json")])
    assert result.returncode == 2
    lines = error_lines(result.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: label file not found"), result.stderr
    os.makedirs(tmp_path / "empty")
    write_json(str(tmp_path / "labels.json"), {"img_00000000": 0})
    result = run_python(["postprocess.py", "--result_path", str(tmp_path / "empty"),
                         "--label_path", str(tmp_path / "labels.json")])
    assert result.returncode == 2 and "error: no _0.bin files in" in result.stderr


def test_wrong_arguments_print_usage_and_fail():
    result = run_python(["postprocess.py", "--result_path", "x"])
    assert result.returncode != 0 and "usage:" in result.stderr
