"""preprocess.py: the eval transform's tensors as .bin files, labels, batching and user errors."""
import importlib
import json
import os
import shutil

import numpy as np
import pytest

from deploy_helpers import DIGITS_CONFIG, F0_CONFIG, error_lines, run_python, write_image_folder
from src.config import load_config
from src.errors import UserError
from src.data.folder import scan_image_folder
from src.data.transforms import create_eval_transform, load_image
from src.deploy.binio import read_labels, read_tensor

preprocess_script = importlib.import_module("preprocess")


def preprocess(data_path, output_path, *extra, config=DIGITS_CONFIG):
    preprocess_script.main(["--config", config, "--data_path", str(data_path), "--output_path", str(output_path),
                            *extra])
    return str(output_path)


def eval_transform(config):
    cfg = load_config(config)
    return create_eval_transform(cfg.test_input_size, crop_pct=cfg.crop_pct, crop_mode=cfg.eval_crop_mode,
                                 interpolation=cfg.interpolation)


@pytest.mark.parametrize("config", [DIGITS_CONFIG, F0_CONFIG], ids=["digits_64", "f0_256"])
def test_bins_equal_the_eval_transform_bit_for_bit(tmp_path, image_folder, config):
    out = preprocess(image_folder, tmp_path / "pre", config=config)
    transform = eval_transform(config)
    size = load_config(config).test_input_size
    labels = read_labels(os.path.join(out, "labels.json"))
    with open(os.path.join(out, "sources.json"), encoding="utf-8") as f:
        sources = json.load(f)
    samples, _ = scan_image_folder(image_folder)
    assert len(labels) == len(samples) == 20
    for (path, label), name in zip(samples, sorted(labels)):
        assert sources[name] == [os.path.relpath(path, image_folder)]
        assert labels[name] == [label]
        stored = read_tensor(os.path.join(out, "images", name + ".bin"), (1, 3, size, size))[0]
        expected = transform(load_image(path))
        assert expected.dtype == np.float32
        assert stored.tobytes() == expected.tobytes()


def test_batched_files_pad_the_last_batch_and_list_its_labels(tmp_path, image_folder):
    out = preprocess(image_folder, tmp_path / "pre", "--batch_size", "3")
    labels = read_labels(os.path.join(out, "labels.json"))
    samples, _ = scan_image_folder(image_folder)
    assert sorted(labels) == [f"batch_{i:08d}" for i in range(7)]  # 20 images = 6 x 3 + 2
    assert [v for name in sorted(labels) for v in labels[name]] == [label for _, label in samples]
    last = read_tensor(os.path.join(out, "images", "batch_00000006.bin"), (3, 3, 64, 64))
    assert len(labels["batch_00000006"]) == 2 and not last[2].any()
    expected = eval_transform(DIGITS_CONFIG)(load_image(samples[19][0]))
    assert last[1].tobytes() == expected.tobytes()


def test_dataset_root_with_a_val_folder_is_accepted(tmp_path, image_folder):
    root = tmp_path / "digits"
    shutil.copytree(image_folder, root / "val")
    out = preprocess(root, tmp_path / "pre")
    assert len(read_labels(os.path.join(out, "labels.json"))) == 20


def test_unreadable_images_are_skipped_or_fatal_with_strict_data(tmp_path, capsys):
    folder = write_image_folder(tmp_path / "val", classes=2, per_class=2)
    with open(os.path.join(folder, "c1", "broken.jpg"), "wb") as f:
        f.write(b"not a jpeg")
    out = preprocess(folder, tmp_path / "pre")
    assert len(read_labels(os.path.join(out, "labels.json"))) == 4
    assert "warning: skipping" in capsys.readouterr().err
    with pytest.raises(UserError, match="broken.jpg"):
        preprocess(folder, tmp_path / "strict", "--strict_data")


def test_bins_of_an_earlier_run_are_kept_unless_overwrite(tmp_path, image_folder):
    out = preprocess(image_folder, tmp_path / "pre")
    with pytest.raises(UserError, match="--overwrite"):
        preprocess(image_folder, out)
    small = write_image_folder(tmp_path / "small", classes=2, per_class=1)
    preprocess(small, out, "--overwrite")
    assert sorted(os.listdir(os.path.join(out, "images"))) == ["img_00000000.bin", "img_00000001.bin"]


@pytest.mark.parametrize("case", ["missing", "empty", "no_images"])
def test_missing_or_empty_folder_is_a_one_line_error(tmp_path, case):
    folder = tmp_path / "val"
    if case != "missing":
        folder.mkdir()
    if case == "no_images":
        (folder / "c0").mkdir()
        (folder / "c0" / "notes.txt").write_text("no image here")
    result = run_python(["preprocess.py", "--config", DIGITS_CONFIG, "--data_path", str(folder),
                         "--output_path", str(tmp_path / "pre")])
    assert result.returncode == 2
    lines = error_lines(result.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(folder) in lines[0], result.stderr


def test_progress_bar_reports_on_stderr(tmp_path, image_folder):
    result = run_python(["preprocess.py", "--config", DIGITS_CONFIG, "--data_path", image_folder,
                         "--output_path", str(tmp_path / "pre")])
    assert result.returncode == 0, result.stderr
    assert "preprocess: 20/20" in result.stderr and "100%" in result.stderr
    assert "preprocessed 20 images" in result.stdout


def test_output_path_is_required(image_folder):
    with pytest.raises(UserError, match="--output_path"):
        preprocess_script.main(["--config", DIGITS_CONFIG, "--data_path", image_folder])


def test_the_settings_written_beside_a_model_replace_the_configs(tmp_path, image_folder):
    """--model: the <model>.json export.py writes (a squash crop at 72 px and reversed class names here)."""
    from src.data.data_settings import effective_settings, write_sidecar

    cfg = load_config(DIGITS_CONFIG).replace(test_input_size=72, eval_crop_mode="squash", crop_pct=0.9)
    _, classes = scan_image_folder(image_folder)
    model = tmp_path / "net.mindir"
    model.write_bytes(b"the model itself is not read")
    write_sidecar(str(model), effective_settings(cfg, {"classes": classes[::-1]}))
    out = preprocess(image_folder, tmp_path / "pre", "--model", str(model))
    transform = create_eval_transform(72, crop_pct=0.9, crop_mode="squash")
    labels = read_labels(os.path.join(out, "labels.json"))
    with open(os.path.join(out, "sources.json"), encoding="utf-8") as f:
        sources = json.load(f)
    for name, (source,) in sources.items():
        expected = transform(load_image(os.path.join(image_folder, source)))
        assert np.array_equal(read_tensor(os.path.join(out, "images", name + ".bin"), (1, 3, 72, 72))[0], expected)
        assert labels[name] == [classes[::-1].index(source.split(os.sep)[0])]  # the model's class order
