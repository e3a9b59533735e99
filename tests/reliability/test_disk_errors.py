"""Case 11, the filesystem refuses a write: a full disk while a checkpoint is written, a read-only output
directory. Each ends in one `error:` line naming the path and what was kept; the atomic writes leave the earlier
checkpoint complete. Real filesystems: a small tmpfs and a read-only bind mount (needs root and mount(8),
skipped otherwise)."""
import os
import subprocess

import pytest

from reliability_helpers import TINY, checkpoint_values, entry, mindspore_imported, user_error


def mount(*args):
    result = subprocess.run(["mount", *map(str, args)], capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount here ({result.stderr.strip()}): needs root")


@pytest.fixture()
def mounted(tmp_path):
    points = []

    def make(*args):
        point = tmp_path / f"mount{len(points)}"
        point.mkdir()
        mount(*args, point)
        points.append(point)
        return point

    yield make
    for point in reversed(points):
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


@pytest.mark.timeout(600)
def test_a_full_disk_during_a_checkpoint_write_ends_in_one_line_keeping_the_last_checkpoint(tiny_digits, mounted):
    """Provokes: a 12 MB filesystem, room for one 7.7 MB checkpoint of dm_nfnet_nano but not for a second."""
    out = mounted("-t", "tmpfs", "-o", "size=12m", "tmpfs") / "run"
    line = user_error(entry("train.py", "--data_path", tiny_digits, "--output_dir", out, *TINY))
    kept = out / "dm_nfnet_nano-1_7.ckpt"
    assert line == (f"error: cannot write {out / 'dm_nfnet_nano-2_14.ckpt'}: No space left on device; kept the "
                    f"last complete checkpoint {kept} (continue with --resume auto once the problem is fixed)")
    assert sorted(n for n in os.listdir(out) if n.endswith(".ckpt")) == ["dm_nfnet_nano-1_7.ckpt"]
    assert not [n for n in os.listdir(out) if ".partial-" in n]  # the half-written file was removed
    assert checkpoint_values(kept)["epoch_num"] == 1  # complete and readable


def test_a_read_only_output_dir_is_refused_before_the_work(tiny_digits, tmp_path, mounted):
    """Provokes: output_dir inside a read-only bind mount of an empty folder."""
    source = tmp_path / "folder"
    source.mkdir()
    read_only = mounted("--bind", "-o", "ro", source)
    result = entry("train.py", "--data_path", tiny_digits, "--output_dir", read_only / "run", *TINY,
                   probe_imports=True)
    assert user_error(result) == (f"error: output_dir {read_only / 'run'} is not writable (its parent {read_only} "
                                  "is not): a read-only filesystem or no permission")
    assert not mindspore_imported(result)
