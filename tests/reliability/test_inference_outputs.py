"""Round 3 of the hostile-user cases (issue 24) for the inference entry points: predict.py, eval.py, export.py,
preprocess.py, postprocess.py and src.deploy.infer_cpu. An output that is an input, an existing file, a folder, an
unwritable or missing folder is refused in one `error:` line before any work (MindSpore not even imported) and
nothing of the user's changes; unreadable inputs end in one line naming the file; class counts are checked against
the model; unreadable images are skipped and listed, never stopping the run; a name holding a newline stays on one
line. Real processes on a real (random-weight) dm_nfnet_nano, its real MINDIR / ONNX exports and real PNGs: the
strongest check that runs here (no reference implementation exists for these messages).
"""
import io
import json
import os
import re
import shutil

import numpy as np
import pytest
from PIL import Image

from reliability_helpers import entry, mindspore_imported, read_text, succeeded, user_error

CLASSES = ["cat", "dog", "eel"]
UNWRITABLE = "/sys/kernel"  # no file can be created there, not even by root (os.access says yes to root)


def predict(*args, probe_imports=False):
    # a checkpoint's network runs PyNative here: half the CPU of a graph compile per process (6 of 13 s,
    # measured), and these cases are about files and messages; the graph route: tests/test_predict.py
    mode = ["--mode", "PYNATIVE"] if "--checkpoint" in args else []
    return entry("predict.py", "--device_target", "CPU", *args, *mode, config=None, probe_imports=probe_imports)


def refused_before_work(result):
    """The error line of a run stopped before MindSpore was imported (so before any model or image)."""
    line = user_error(result)
    assert not mindspore_imported(result), result.stderr[-2000:]
    return line


def write_png(path, seed, size=(70, 50)):
    rng = np.random.default_rng(seed)
    Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(path, format="PNG")


@pytest.fixture(scope="module")
def nano(tmp_path_factory):
    """A random dm_nfnet_nano with 3 named classes, its data settings (64 px, squash) in the checkpoint."""
    import mindspore as ms

    from src.config import load_config
    from src.data.data_settings import checkpoint_entry, settings_from_config
    from src.models import create_model
    from src.run.checkpointing import save_checkpoint_atomic

    cfg = load_config(overrides={"arch": "dm_nfnet_nano", "num_classes": 3, "test_input_size": 64,
                                 "eval_crop_mode": "squash", "crop_pct": 0.875})
    network = create_model("dm_nfnet_nano", num_classes=3)
    rng = np.random.default_rng(0)
    for name, param in network.parameters_and_names():
        value = rng.uniform(0.5, 1.5, param.shape) if "gain" in name else rng.normal(0, 0.1, param.shape)
        param.set_data(ms.Tensor(value.astype(np.float32)))
    path = str(tmp_path_factory.mktemp("nano") / "nano.ckpt")
    save_checkpoint_atomic(network, path, checkpoint_entry(settings_from_config(cfg, CLASSES)))
    os.chmod(path, 0o644)
    return path


@pytest.fixture(scope="module")
def exported(nano, tmp_path_factory):
    """{"MINDIR": path, "ONNX": path} exported from `nano` by export.py, each with its <model>.json."""
    folder = tmp_path_factory.mktemp("exported")
    models = {}
    for fmt in ("MINDIR", "ONNX"):
        succeeded(entry("export.py", "--checkpoint", nano, "--device_target", "CPU", "--file_format", fmt,
                        "--file_name", folder / "nano", config=None))
        models[fmt] = str(folder / f"nano.{fmt.lower()}")
    return models


@pytest.fixture()
def pictures(tmp_path):
    folder = tmp_path / "pictures"
    folder.mkdir()
    write_png(folder / "a.png", 1)
    write_png(folder / "b.png", 2)
    return folder


def model_copy(model, folder, sidecar=None):
    """A copy of an exported model in `folder`; `sidecar` None keeps its <model>.json, False drops it, a dict
    replaces it."""
    copy = os.path.join(folder, os.path.basename(model))
    shutil.copy(model, copy)
    if sidecar is None:
        shutil.copy(model + ".json", copy + ".json")
    elif sidecar:
        with open(copy + ".json", "w", encoding="utf-8") as f:
            json.dump(sidecar, f)
    return copy


# --------------------------------------------------------------------------- predict.py --output


@pytest.mark.parametrize("case", ["the checkpoint", "the input list", "a link to the checkpoint",
                                  "a hard link to the checkpoint"])
def test_predict_refuses_an_output_that_is_an_input_even_with_overwrite(case, nano, pictures, tmp_path):
    """Provokes: `--output victim.ckpt --format json` (the issue: the checkpoint replaced by 807 bytes of JSON), and
    `--output inputs.txt` with inputs.txt the list; compared by inode, so other names of the file are caught too."""
    checkpoint = tmp_path / "victim.ckpt"
    shutil.copy(nano, checkpoint)
    listing = tmp_path / "inputs.txt"
    listing.write_text("pictures/a.png\n")
    output = {"the checkpoint": checkpoint, "the input list": listing, "a link to the checkpoint": tmp_path / "v.json",
              "a hard link to the checkpoint": tmp_path / "h.json"}[case]
    if case == "a link to the checkpoint":
        os.symlink(checkpoint, output)
    if case == "a hard link to the checkpoint":
        os.link(checkpoint, output)
    before = {p: p.read_bytes() for p in (checkpoint, listing)}
    line = refused_before_work(predict("--checkpoint", checkpoint, listing, "--output", output, "--format", "json",
                                       "--overwrite", probe_imports=True))
    source = listing if case == "the input list" else checkpoint
    assert line == f"error: --output {output}: is the input {source}; name another file"
    assert {p: p.read_bytes() for p in before} == before


@pytest.mark.parametrize("case", ["an existing file", "a folder", "an unwritable folder", "a missing folder",
                                  "an existing list of unreadable images"])
def test_predict_checks_the_output_path_before_any_prediction(case, nano, pictures, tmp_path):
    """Provokes: --output an existing file (kept unless --overwrite), a directory (was IsADirectoryError), a folder
    where nothing can be created (was FileNotFoundError on the .partial name), a missing folder (was refused only
    after every image was predicted) and an existing <output>_bad_files.txt beside a new output."""
    mine = tmp_path / "mine.json"
    mine.write_text("the user's own file\n")
    output, expected = {
        "an existing file": (mine, "already exists; pass --overwrite to replace it"),
        "a folder": (pictures, "is a folder; name a file"),
        "an unwritable folder": (f"{UNWRITABLE}/preds.json", f"cannot write in folder {UNWRITABLE} ("),
        "a missing folder": (tmp_path / "nowhere" / "preds.json", f"folder {tmp_path / 'nowhere'} does not exist"),
        "an existing list of unreadable images": (tmp_path / "mine.csv", "already exists; pass --overwrite"),
    }[case]
    listed = tmp_path / "mine_bad_files.txt"
    if case == "an existing list of unreadable images":
        listed.write_text("the user's list\n")
    line = refused_before_work(predict("--checkpoint", nano, pictures / "a.png", "--output", output,
                                       probe_imports=True))
    named = listed if case == "an existing list of unreadable images" else output
    assert line.startswith("error: ") and f" {named}: {expected}" in line, line
    assert mine.read_text() == "the user's own file\n"
    assert not os.path.exists(tmp_path / "nowhere")


def test_predict_with_overwrite_replaces_an_earlier_output_and_its_stale_list(nano, pictures, tmp_path):
    """Provokes: the same command twice, the second with --overwrite and no unreadable image left."""
    output = tmp_path / "preds.json"
    (pictures / "bad.png").write_bytes(b"not a png")
    succeeded(predict("--checkpoint", nano, pictures, "--output", output))
    listed = tmp_path / "preds_bad_files.txt"
    assert read_text(listed) == f"{pictures / 'bad.png'}\n"
    (pictures / "bad.png").unlink()
    assert "already exists" in user_error(predict("--checkpoint", nano, pictures, "--output", output))
    succeeded(predict("--checkpoint", nano, pictures, "--output", output, "--overwrite"))
    report = json.loads(read_text(output))
    assert (report["count"], report["unreadable"]) == (2, []) and not listed.exists()


# --------------------------------------------------------------------------- predict.py inputs and agreements


@pytest.mark.parametrize("case", ["image list", "class names"])
def test_predict_names_a_text_input_that_is_not_utf8(case, nano, pictures, tmp_path):
    """Provokes: a Latin-1 .txt list and a Latin-1 --class_names file (was UnicodeDecodeError)."""
    text = tmp_path / "latin1.txt"
    text.write_bytes("pictures/a.png\n" .encode() + "caf\u00e9\n".encode("latin-1"))
    args = [text] if case == "image list" else [pictures / "a.png", "--class_names", text]
    flag = "image list" if case == "image list" else "--class_names"
    line = refused_before_work(predict("--checkpoint", nano, *args, probe_imports=True))
    assert line == f"error: {flag} {text}: not UTF-8 text (byte 18: b'\\xe9'); save it as UTF-8"


@pytest.mark.timeout(900)
def test_predict_names_a_truncated_mindir(exported, pictures, tmp_path):
    """Provokes: a MINDIR cut at a protobuf field boundary, so it parses but MindSpore fails ('Load MindIR failed.',
    a RuntimeError traceback before)."""
    data = open(exported["MINDIR"], "rb").read()
    ends, f = [], io.BytesIO(data)  # the end of every top-level field of the ModelProto

    def varint():
        value = shift = 0
        while True:
            byte = f.read(1)[0]
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return value

    while f.tell() < len(data):
        key = varint()
        if key & 7 == 0:
            varint()
        else:
            f.seek(varint(), 1)
        ends.append(f.tell())
    cut = model_copy(exported["MINDIR"], tmp_path)
    with open(cut, "wb") as out:
        out.write(data[:ends[-3]])  # the last two primitives left out
    line = user_error(predict("--model", cut, pictures / "a.png"))
    assert line.startswith(f"error: {cut} is not a readable MINDIR file (MindSpore: Load MindIR failed.")


@pytest.mark.timeout(900)
@pytest.mark.parametrize("names", [["cat", "dog"], ["cat", "dog", "eel", "fox"]])
def test_predict_checks_class_names_against_the_models_class_count(names, nano, exported, pictures, tmp_path):
    """Provokes: --class_names with too few and too many lines (was accepted), with a checkpoint and a MINDIR."""
    names_file = tmp_path / "names.txt"
    names_file.write_text("".join(n + "\n" for n in names))
    for source in (["--checkpoint", nano], ["--model", exported["MINDIR"]]):
        line = user_error(predict(*source, pictures / "a.png", "--class_names", names_file))
        assert line == (f"error: --class_names {names_file}: {len(names)} names for the model's 3 classes "
                        "(one name per line, in label order)")


@pytest.mark.timeout(900)
@pytest.mark.parametrize("fmt", ["ONNX", "MINDIR"])
def test_predict_checks_a_models_output_size_against_its_sidecar(fmt, exported, pictures, tmp_path):
    """Provokes: a <model>.json saying 10 classes beside a 3-class model (was accepted)."""
    record = json.loads(read_text(exported[fmt] + ".json"))
    model = model_copy(exported[fmt], tmp_path, sidecar=dict(record, num_classes=10, classes=None))
    line = user_error(predict("--model", model, pictures / "a.png"))
    assert line == (f"error: {model} gives 3 logits per image, but its data settings {model}.json say num_classes "
                    "10: not the model they were written for (export it again)")


@pytest.mark.timeout(900)
def test_predict_runs_a_model_without_its_sidecar_saying_which_transform_it_uses(exported, pictures, tmp_path):
    """Provokes: an ONNX model without <model>.json (was run with the config's transform without a word). Chosen:
    run, with a warning naming the transform, since the input size comes from the graph and the rest can be given
    on the command line; refusing would leave a model exported elsewhere no way to run."""
    from src.config import load_config
    from src.data.data_settings import describe_transform

    model = model_copy(exported["ONNX"], tmp_path, sidecar=False)
    result = succeeded(predict("--model", model, pictures))
    transform = describe_transform(load_config(overrides={"test_input_size": 64}))
    assert (f"warning: {model} has no {model}.json (the data settings export.py writes beside it): using the "
            f"config's evaluation transform, {transform}; give --crop_pct") in result.stderr
    assert [line.split(":")[0] for line in result.stdout.splitlines()] == [str(pictures / n) for n in ("a.png",
                                                                                                      "b.png")]
    assert all(line.split(": ")[1][0] in "012" for line in result.stdout.splitlines())  # no names: class indices


@pytest.mark.timeout(900)
def test_predict_skips_and_lists_40_unreadable_files_beside_one_good_image(nano, tmp_path):
    """Provokes: 40 unreadable files before 1 good image (was '32 consecutive unreadable images', the run stopped);
    --strict_data stops at the first one instead, naming it."""
    folder = tmp_path / "mixed"
    folder.mkdir()
    bad = [folder / f"bad{i:02d}.png" for i in range(40)]
    for path in bad:
        path.write_bytes(b"not an image")
    write_png(folder / "good.png", 3)
    output = tmp_path / "preds.json"
    result = succeeded(predict("--checkpoint", nano, folder, "--output", output, "--batch_size", "8"))
    report = json.loads(read_text(output))
    assert [p["path"] for p in report["predictions"]] == [str(folder / "good.png")]
    assert report["unreadable"] == [str(p) for p in bad]
    assert read_text(tmp_path / "preds_bad_files.txt") == "".join(f"{p}\n" for p in bad)
    assert f"skipped 40 unreadable image(s), listed in {tmp_path / 'preds_bad_files.txt'}" in result.stderr
    line = user_error(predict("--checkpoint", nano, folder, "--strict_data", "true", "--batch_size", "8"))
    # the decode workers run in parallel: the first unreadable file one of them meets, not always bad00
    named = re.match(r"error: unreadable image (\S+): ", line)
    assert named and named.group(1) in {str(p) for p in bad}, line


@pytest.mark.timeout(600)
def test_predict_keeps_a_name_with_a_newline_on_one_stdout_line(nano, tmp_path):
    """Provokes: an image named 'new<LF>line.png' (its stdout line was split in two); the JSON keeps the name."""
    folder = tmp_path / "odd"
    folder.mkdir()
    write_png(folder / "new\nline.png", 4)
    write_png(folder / "plain.png", 5)
    (folder / "bad\nname.png").write_bytes(b"not an image")
    result = succeeded(predict("--checkpoint", nano, folder, "--topk", "1"))
    lines = result.stdout.splitlines()
    assert len(lines) == 2 and lines[0].startswith(f"{folder}/new\\nline.png: ") and lines[1].startswith(
        f"{folder}/plain.png: ")
    assert f"skipped 1 unreadable image(s): {folder}/bad\\nname.png" in result.stderr
    output = tmp_path / "preds.json"
    succeeded(predict("--checkpoint", nano, folder, "--topk", "1", "--output", output))
    report = json.loads(read_text(output))
    assert report["predictions"][0]["path"] == str(folder / "new\nline.png")
    assert report["unreadable"] == [str(folder / "bad\nname.png")]
    assert read_text(tmp_path / "preds_bad_files.txt") == f"{folder}/bad\\nname.png\n"


# --------------------------------------------------------------------------- eval.py


@pytest.fixture(scope="module")
def nano10(tmp_path_factory):
    """A random dm_nfnet_nano for the digits config's 10 classes (no data settings: the config's are used)."""
    import mindspore as ms

    from src.models import create_model

    path = str(tmp_path_factory.mktemp("nano10") / "nano10.ckpt")
    ms.save_checkpoint(create_model("dm_nfnet_nano", num_classes=10), path)
    return path


@pytest.mark.parametrize("case", ["a missing folder", "the checkpoint", "an existing file"])
def test_eval_checks_its_output_before_the_evaluation(case, nano10, tiny_digits, tmp_path):
    """Provokes: eval.py --output into a missing folder (was a FileNotFoundError traceback after the whole
    evaluation), --output the checkpoint itself, and an existing file (kept unless --overwrite)."""
    checkpoint = tmp_path / "run.ckpt"
    shutil.copy(nano10, checkpoint)
    mine = tmp_path / "mine.json"
    mine.write_text("{}\n")
    output, expected = {
        "a missing folder": (tmp_path / "nowhere" / "m.json", f"folder {tmp_path / 'nowhere'} does not exist"),
        "the checkpoint": (checkpoint, f"is the input {checkpoint}; name another file"),
        "an existing file": (mine, "already exists; pass --overwrite to replace it"),
    }[case]
    before = checkpoint.read_bytes()
    line = refused_before_work(entry("eval.py", "--data_path", tiny_digits, "--checkpoint", checkpoint,
                                     "--output", output, probe_imports=True))
    assert line == f"error: --output {output}: {expected}"
    assert checkpoint.read_bytes() == before and mine.read_text() == "{}\n"


@pytest.fixture(scope="module")
def linked_eval(nano10, tiny_digits, tmp_path_factory):
    """eval.py on tiny_digits with, in val/0, a dangling symlink and a symlink to another image of the folder:
    (val folder, the run's stdout, its metrics, its bad_files.txt lines)."""
    root = tmp_path_factory.mktemp("linked") / "data"
    shutil.copytree(tiny_digits, root)
    zero = root / "val" / "0"
    first = sorted(zero.iterdir())[0]
    os.symlink("gone.png", zero / "dangling.png")
    os.symlink(first.name, zero / "zz_again.png")
    output = root.parent / "metrics.json"
    result = succeeded(entry("eval.py", "--data_path", root, "--checkpoint", nano10, "--output", output,
                             "--num_parallel_workers", "1"))
    lines = read_text(root.parent / "metrics_bad_files.txt").splitlines()
    return root / "val", result.stdout, json.loads(read_text(output)), lines


@pytest.mark.timeout(600)
def test_eval_lists_a_dangling_symlink_in_bad_files(linked_eval):
    """Provokes: val/0/dangling.png -> gone.png (was left out of bad_files.txt)."""
    val, stdout, metrics, lines = linked_eval
    assert f"{val / '0' / 'dangling.png'}\tbroken link" in lines
    assert metrics["count"] == 30 and metrics["skipped_entries"] == 2
    assert f"skipped 0 unreadable image(s) and 2 entries of the folder (broken links, duplicates, ...), listed in " \
           f"{val.parent.parent / 'metrics_bad_files.txt'}" in stdout


@pytest.mark.timeout(600)
def test_eval_lists_a_second_link_to_the_same_image_as_a_duplicate(linked_eval):
    """Provokes: val/0/zz_again.png -> another image of val/0 (was silently counted once)."""
    val, _, metrics, lines = linked_eval
    first = sorted(p for p in (val / "0").iterdir() if not p.is_symlink())[0]
    assert f"{val / '0' / 'zz_again.png'}\tthe same file as {first}" in lines
    assert metrics["count"] == 30  # each image once


# --------------------------------------------------------------------------- export.py, preprocess.py, postprocess.py


@pytest.mark.parametrize("case", ["the checkpoint", "an existing sidecar", "a folder", "an unwritable folder"])
def test_export_checks_its_outputs_before_building_the_network(case, nano, tmp_path):
    """Provokes: a checkpoint named weights.onnx exported as ONNX to 'weights' with --overwrite (the export would
    replace its own input), a left-over <model>.json, a folder of the model's name, an unwritable folder."""
    weights = tmp_path / "weights.onnx"
    shutil.copy(nano, weights)
    name = {"the checkpoint": tmp_path / "weights", "an existing sidecar": tmp_path / "m", "a folder": tmp_path / "f",
            "an unwritable folder": f"{UNWRITABLE}/m"}[case]
    extra = ["--overwrite"] if case == "the checkpoint" else []
    if case == "an existing sidecar":
        (tmp_path / "m.onnx.json").write_text("{}\n")
    if case == "a folder":
        (tmp_path / "f.onnx").mkdir()
    expected = {"the checkpoint": f"{weights}: is the input {weights}; name another file",
                "an existing sidecar": f"{tmp_path / 'm.onnx.json'}: already exists; pass --overwrite to replace it",
                "a folder": f"{tmp_path / 'f.onnx'}: is a folder; name a file",
                "an unwritable folder": f"{UNWRITABLE}/m.onnx: cannot write in folder {UNWRITABLE} ("}[case]
    before = weights.read_bytes()
    line = user_error(entry("export.py", "--checkpoint", weights, "--device_target", "CPU", "--file_format", "ONNX",
                            "--file_name", name, *extra, config=None))
    assert line.startswith(f"error: --file_name {expected}"), line
    assert weights.read_bytes() == before


@pytest.mark.parametrize("case", ["inside the images", "the checkpoint", "unwritable"])
def test_preprocess_checks_its_output_folder_before_any_image(case, nano, tmp_path):
    """Provokes: --output_path inside the split it reads (images/ would become a class folder), the checkpoint
    itself, an unwritable folder."""
    split = tmp_path / "val"
    for c in range(3):
        (split / CLASSES[c]).mkdir(parents=True)
        write_png(split / CLASSES[c] / "x.png", c)
    output, expected = {"inside the images": (split / "cat" / "out", f"is inside the input folder {split}"),
                        "the checkpoint": (nano, f"is the input {nano}; name another folder"),
                        "unwritable": (f"{UNWRITABLE}/out", f"cannot write in folder {UNWRITABLE} (")}[case]
    before = sorted(os.listdir(split / "cat"))
    line = refused_before_work(entry("preprocess.py", "--data_path", split, "--checkpoint", nano, "--output_path",
                                     output, config=None, probe_imports=True))
    assert line.startswith(f"error: --output_path {output}: {expected}"), line
    assert sorted(os.listdir(split / "cat")) == before


@pytest.mark.parametrize("case", ["the labels", "an existing file", "overwrite"])
def test_postprocess_refuses_to_replace_its_inputs_or_an_existing_report(case, tmp_path):
    """Provokes: postprocess.py --output labels.json (the labels replaced by the report), --output an existing
    file (was replaced silently), and the same with --overwrite (replaced)."""
    results = tmp_path / "result_Files"
    results.mkdir()
    np.eye(10, dtype="<f4")[3:4].tofile(results / "img_00000000_0.bin")
    labels = tmp_path / "labels.json"
    labels.write_text('{"img_00000000": 3}\n')
    report = tmp_path / "acc.json"
    report.write_text("an earlier report\n")
    output = labels if case == "the labels" else report
    extra = ["--overwrite"] if case in ("the labels", "overwrite") else []
    result = entry("postprocess.py", "--result_path", results, "--label_path", labels, "--output", output, *extra,
                   config=None)
    if case == "overwrite":
        succeeded(result)
        assert json.loads(read_text(report))["top1"] == 1.0
        return
    expected = f"is the input {labels}; name another file" if case == "the labels" else "already exists; pass " \
                                                                                          "--overwrite to replace it"
    assert user_error(result) == f"error: --output {output}: {expected}"
    assert read_text(labels) == '{"img_00000000": 3}\n' and read_text(report) == "an earlier report\n"


@pytest.mark.timeout(600)
def test_cpu_inference_refuses_to_write_results_among_its_inputs(exported, tmp_path):
    """Provokes: src.deploy.infer_cpu --result_path equal to --input_path (the results would be read as inputs by
    the next run)."""
    inputs = tmp_path / "images"
    inputs.mkdir()
    np.zeros((1, 3, 64, 64), "<f4").tofile(inputs / "img_00000000.bin")
    result = entry("-m", "src.deploy.infer_cpu", "--mindir_path", exported["MINDIR"], "--input_path", inputs,
                   "--result_path", inputs, config=None)
    assert user_error(result) == f"error: --result_path {inputs}: is the input {inputs}; name another folder"
    assert os.listdir(inputs) == ["img_00000000.bin"]
