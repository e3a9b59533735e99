"""MindRecord sources (python -m src.data.to_mindrecord, then train.py / eval.py on the shards): a conversion never
replaces another one unasked, and a converted split is read only as the one set of files its conversion recorded
in <split>.classes.json; anything else is one `error:` line naming the file, exit 2. The conversions and the
damage are real (MindSpore's FileWriter, truncated and overwritten bytes, removed and copied files); the entry
points run as real processes."""
import os
import shutil
import subprocess
import sys

import pytest

from reliability_helpers import ROOT, entry, mindspore_imported, snapshot, succeeded, user_error

CONVERT_TIMEOUT = 600


def to_mindrecord(*args):
    """`python -m src.data.to_mindrecord <args>` as a real process."""
    return subprocess.run([sys.executable, "-m", "src.data.to_mindrecord", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=CONVERT_TIMEOUT)


def convert(data, out, shards, *more):
    """The conversion, in this process (MindSpore is imported here already)."""
    from src.data.to_mindrecord import main

    assert main(["--data_path", str(data), "--output", str(out), "--shards", str(shards), *map(str, more)]) == 0
    return out


def train_on(data_path, tmp_path, probe_imports=True):
    """train.py on ``data_path``, stopped by its layout checks in these tests (nothing is trained)."""
    return entry("train.py", "--data_path", data_path, "--output_dir", tmp_path / "run", "--epochs", "1",
                 "--batch_size", "8", probe_imports=probe_imports)


def rows(data_path, split):
    """The rows a reader finds in a converted split (its files checked first)."""
    from src.data.folder import mindrecord_files
    from src.data.sources import MindRecordSource

    return len(MindRecordSource(mindrecord_files(str(data_path), split)))


@pytest.mark.timeout(900)
def test_a_second_conversion_into_the_same_output_is_refused_and_overwrite_replaces_exactly_the_old_set(
        tiny_digits, tmp_path):
    """Provokes: a 1-shard conversion, then the same command and a 2-shard one into the same --output; then
    --overwrite with 2 shards beside a file of the user's and a train split converted earlier."""
    out = convert(tiny_digits, tmp_path / "mr", 1)
    (out / "notes.txt").write_text("mine")
    before = snapshot(out)
    for shards in (1, 2):
        result = to_mindrecord("--data_path", tiny_digits, "--output", out, "--shards", shards)
        assert user_error(result) == (f"error: --output {out} holds a conversion of train already "
                                      f"({out / 'train.classes.json'} and 2 more files): give --overwrite to replace "
                                      f"it, or another --output")
        assert snapshot(out) == before  # nothing written, nothing removed
    result = succeeded(to_mindrecord("--data_path", tiny_digits, "--output", out, "--shards", 2, "--splits", "val",
                                     "--overwrite"))
    assert f"val: 30 images -> {out / 'val.mindrecord0'} (+1 shards)" in result.stdout
    names = sorted(os.listdir(out))
    assert names == ["notes.txt", "train.classes.json", "train.mindrecord", "train.mindrecord.db",
                     "val.classes.json", "val.mindrecord0", "val.mindrecord0.db", "val.mindrecord1",
                     "val.mindrecord1.db"]  # the old val.mindrecord and its .db gone, nothing else touched
    assert {n: before[n] for n in ("notes.txt", "train.mindrecord", "train.mindrecord.db")} == {
        n: snapshot(out)[n] for n in ("notes.txt", "train.mindrecord", "train.mindrecord.db")}
    assert rows(out, "val") == 30 and rows(out, "train") == 60


@pytest.mark.timeout(900)
def test_a_split_that_is_not_one_conversions_set_is_named(tiny_digits, tmp_path):
    """Provokes: an earlier 1-shard conversion's val.mindrecord copied beside a 2-shard conversion (what a second
    conversion into the same folder left before); an old class list without the recorded files."""
    old = convert(tiny_digits, tmp_path / "one", 1)
    mixed = convert(tiny_digits, tmp_path / "two", 2)
    for name in ("val.mindrecord", "val.mindrecord.db"):
        shutil.copy(old / name, mixed / name)
    assert user_error(train_on(mixed, tmp_path)) == (
        f"error: {mixed / 'val.mindrecord'} is not one of the files of the conversion recorded in "
        f"{mixed / 'val.classes.json'} (val.mindrecord0, val.mindrecord0.db, val.mindrecord1, val.mindrecord1.db): a "
        f"leftover of another conversion? Remove it, or convert the images again (python -m src.data.to_mindrecord "
        f"... --overwrite)")
    legacy = convert(tiny_digits, tmp_path / "legacy", 1)
    (legacy / "train.classes.json").write_text('["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"]\n')
    assert user_error(train_on(legacy, tmp_path)) == (
        f"error: {legacy / 'train.classes.json'}: a class list without the conversion's files (written by an older "
        f"to_mindrecord); convert the images again (python -m src.data.to_mindrecord ... --overwrite)")


@pytest.mark.timeout(900)
def test_eval_names_a_leftover_shard_instead_of_reading_it(tiny_digits, uninterrupted_run, tmp_path):
    """Provokes: eval.py on a 2-shard val split with a 1-shard conversion's val.mindrecord beside it (read before,
    with the new class list)."""
    old = convert(tiny_digits, tmp_path / "one", 1, "--splits", "val")
    mixed = convert(tiny_digits, tmp_path / "two", 2, "--splits", "val")
    shutil.copy(old / "val.mindrecord", mixed / "val.mindrecord")
    result = entry("eval.py", "--data_path", mixed, "--checkpoint", uninterrupted_run / "dm_nfnet_nano-1_7.ckpt",
                   "--output", tmp_path / "eval.json")
    assert user_error(result).startswith(f"error: {mixed / 'val.mindrecord'} is not one of the files of the "
                                         f"conversion recorded in {mixed / 'val.classes.json'} ")
    assert not (tmp_path / "eval.json").exists()


@pytest.mark.timeout(900)
@pytest.mark.parametrize("damage", ["truncated shard", "grown shard", "missing .db", "missing classes.json",
                                    "missing shard"])
def test_a_damaged_split_is_named_before_mindspore_is_imported(tiny_digits, tmp_path, damage):
    """Provokes: a shard cut to half its size or with bytes appended, a removed .db index, class list or shard
    (the sizes recorded at conversion are compared before anything is read)."""
    out = convert(tiny_digits, tmp_path / "mr", 2)
    shard = out / "train.mindrecord1"
    size = os.path.getsize(shard)
    again = "convert the images again (python -m src.data.to_mindrecord ... --overwrite)"
    if damage == "truncated shard":
        os.truncate(shard, size // 2)
        expected = (f"MindRecord file {shard} is {size // 2} bytes, the conversion wrote {size} (recorded in "
                    f"{out / 'train.classes.json'}): truncated or changed; {again}")
    elif damage == "grown shard":
        with open(shard, "ab") as f:
            f.write(b"\0" * 10)
        expected = (f"MindRecord file {shard} is {size + 10} bytes, the conversion wrote {size} (recorded in "
                    f"{out / 'train.classes.json'}): truncated or changed; {again}")
    elif damage == "missing .db":
        os.remove(f"{shard}.db")
        expected = (f"MindRecord file missing: {shard}.db (the index of train.mindrecord1, one of the 4 files "
                    f"recorded in {out / 'train.classes.json'}); {again}")
    elif damage == "missing shard":
        os.remove(shard)
        expected = (f"MindRecord file missing: {shard} (a shard, one of the 4 files recorded in "
                    f"{out / 'train.classes.json'}); {again}")
    else:
        os.remove(out / "train.classes.json")
        expected = (f"{out / 'train.classes.json'}: missing (src.data.to_mindrecord writes it last, beside "
                    f"train.mindrecord*: the conversion did not finish or the file was removed); {again}")
    result = train_on(out, tmp_path)
    assert user_error(result) == f"error: {expected}"
    assert not mindspore_imported(result)
    assert not (tmp_path / "run").exists()


@pytest.mark.timeout(900)
@pytest.mark.parametrize("damage", ["shard header", "index"])
def test_a_corrupt_shard_is_named_when_opened(tiny_digits, tmp_path, damage):
    """Provokes: bytes of a shard's header or of its .db index overwritten in place (the size unchanged). train.py
    names it before MindSpore is imported (the first 64 KiB differ from the recorded ones); and when the damage is
    done after that check, opening the shards (MindRecordSource, before the first step) names it instead of
    MindSpore's 'Exception thrown from dataset pipeline' traceback."""
    from src.data.folder import DatasetError
    from src.data.sources import MindRecordSource

    out = convert(tiny_digits, tmp_path / "mr", 2)
    files = [str(out / "train.mindrecord0"), str(out / "train.mindrecord1")]
    target = out / ("train.mindrecord1" if damage == "shard header" else "train.mindrecord1.db")
    with open(target, "r+b") as f:
        f.seek(10)
        f.write(b"\xff" * 50)
    result = train_on(out, tmp_path)
    assert user_error(result) == (
        f"error: MindRecord file {target} is not the one the conversion recorded in {out / 'train.classes.json'} (its "
        f"first 64 KiB differ: a file of another conversion, or a damaged header); convert the images again (python "
        f"-m src.data.to_mindrecord ... --overwrite)")
    assert not mindspore_imported(result)
    with pytest.raises(DatasetError) as info:
        MindRecordSource(files)
    line = str(info.value)
    assert line.startswith(f"MindRecord file {target} cannot be read (") and "\n" not in line
    assert line.endswith("): corrupt; convert the images again (python -m src.data.to_mindrecord ... --overwrite)")


@pytest.mark.timeout(900)
def test_an_image_damaged_inside_a_shard_stops_training_with_one_line(tiny_digits, tmp_path):
    """Provokes: bytes of a stored PNG (past the first 64 KiB, the size unchanged) overwritten: not seen before
    use; the row that does not decode stops train.py with one line naming the row and the shard, no traceback."""
    out = convert(tiny_digits, tmp_path / "mr", 1)
    shard = out / "train.mindrecord"
    with open(shard, "r+b") as f:
        data = f.read()
        start = data.find(b"\x89PNG", 1 << 16)
        f.seek(start + 8)
        f.write(b"\xff" * 64)
    line = user_error(train_on(out, tmp_path, probe_imports=False))
    assert line.startswith("error: unreadable image in MindRecord row ") and f" of {shard} (" in line
    assert line.endswith("): a corrupt shard; convert the images again (python -m src.data.to_mindrecord ... "
                         "--overwrite)")


@pytest.mark.timeout(900)
def test_a_shard_of_another_conversion_under_the_same_name_is_named(digits_subset, tmp_path):
    """Provokes: train.mindrecord1 of a conversion of other images copied over a conversion's own (what copying
    or syncing two conversions into one folder leaves)."""
    mine = convert(digits_subset(6, 3), tmp_path / "mine", 2)
    other = convert(digits_subset(6, 3, short_val_class="0"), tmp_path / "other", 2, "--splits", "val")
    shutil.copy(other / "val.mindrecord1", mine / "val.mindrecord1")
    assert os.path.getsize(mine / "val.mindrecord1") == os.path.getsize(other / "val.mindrecord1")
    assert user_error(train_on(mine, tmp_path)) == (
        f"error: MindRecord file {mine / 'val.mindrecord1'} is not the one the conversion recorded in "
        f"{mine / 'val.classes.json'} (its first 64 KiB differ: a file of another conversion, or a damaged header); "
        f"convert the images again (python -m src.data.to_mindrecord ... --overwrite)")


def test_to_mindrecord_names_a_missing_path_and_a_folder_of_class_folders(tmp_path):
    """Provokes: to_mindrecord on a path that does not exist, and on a folder of class folders (no train/ val/);
    train.py on the latter."""
    missing = tmp_path / "missing"
    result = to_mindrecord("--data_path", missing, "--output", tmp_path / "mr")
    assert user_error(result) == f"error: dataset path not found: {missing}"
    flat = tmp_path / "flat"
    from PIL import Image

    for name in ("cat", "dog"):
        os.makedirs(flat / name)
        Image.new("RGB", (8, 8)).save(flat / name / "0.png")
    result = to_mindrecord("--data_path", flat, "--output", tmp_path / "mr")
    assert user_error(result) == (f"error: no train/ folder in {flat}: it holds class folders with images directly "
                                  f"(cat, dog): a single split, not a dataset root; expected {flat}/train/<class>/"
                                  f"<image> and {flat}/val/<class>/<image> (or give --splits)")
    result = entry("train.py", "--data_path", flat, "--num_classes", "2", "--output_dir", tmp_path / "run")
    assert user_error(result) == (f"error: no train/ folder in {flat}: it holds class folders with images directly "
                                  f"(cat, dog): a single split, not a dataset root; expected {flat}/train/<class>/"
                                  f"<image> and {flat}/val/<class>/<image>")
    assert not (tmp_path / "mr").exists() and not (tmp_path / "run").exists()


def test_to_mindrecord_refuses_an_output_inside_the_images(tiny_digits, tmp_path):
    """Provokes: --output inside the train split (it would become a class folder of it)."""
    inside = os.path.join(tiny_digits, "train", "mr")
    result = to_mindrecord("--data_path", tiny_digits, "--output", inside)
    assert user_error(result) == (f"error: --output {inside} is inside the images it converts "
                                  f"({os.path.join(tiny_digits, 'train')}): give a folder outside {tiny_digits}")
    assert not os.path.exists(inside)
