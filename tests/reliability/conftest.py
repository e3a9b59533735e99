"""Fixtures shared by the reliability tests."""
import pytest

from reliability_helpers import TINY, entry, succeeded


@pytest.fixture(scope="session")
def uninterrupted_run(tiny_digits, tmp_path_factory):
    """The run directory of train.py over 2 epochs of TINY (14 steps), never interrupted: the reference of the
    resume tests, and the source of a good epoch-1 checkpoint (dm_nfnet_nano-1_7.ckpt)."""
    out = tmp_path_factory.mktemp("uninterrupted") / "run"
    succeeded(entry("train.py", "--data_path", tiny_digits, "--output_dir", out, *TINY))
    return out
