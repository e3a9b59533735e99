"""train.py, then this rank's network weights to $SAVE_WEIGHTS_DIR/weights_rank<r>.npz and the
files it wrote to $SAVE_WEIGHTS_DIR/writes_rank<r>.json.

Rank 0 alone writes checkpoints; the 2-rank test launches this through
scripts/run_distribute_train_msrun.sh (ENTRY_SCRIPT) to compare every rank's weights. The ranks
share one run directory, so what each wrote is recorded from inside the process: a Python audit
hook (sys.addaudithook) sees every open for writing, rename and removal made from Python.
"""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

import train  # noqa: E402
from src import builders  # noqa: E402


WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def record_writes(root):
    """A set that receives the paths (relative to `root`) this process opens for writing, renames
    to or removes under `root`."""
    root = os.path.realpath(root) + os.sep
    written = set()

    def hook(event, args):
        if event == "open":
            path, mode, flags = args
            if not (mode and any(c in mode for c in "wax+")) and not (mode is None and flags & WRITE_FLAGS):
                return
        elif event in ("os.rename", "os.remove"):
            path = args[1] if event == "os.rename" else args[0]
        else:
            return
        if isinstance(path, (str, bytes)):
            path = os.path.realpath(os.fsdecode(path))
            if path.startswith(root):
                written.add(path[len(root):])

    sys.addaudithook(hook)
    return written


def main():
    written = record_writes(os.environ["SAVE_WEIGHTS_DIR"])
    networks = []
    build_trainer = builders.build_trainer

    def capturing_build_trainer(cfg, network, *args, **kwargs):
        networks.append(network)
        return build_trainer(cfg, network, *args, **kwargs)

    builders.build_trainer = capturing_build_trainer
    status = train.main(sys.argv[1:])
    from mindspore.communication import get_rank

    (network,) = networks
    found = sorted(written)
    np.savez(os.path.join(os.environ["SAVE_WEIGHTS_DIR"], f"weights_rank{get_rank()}.npz"),
             **{p.name: p.asnumpy() for p in network.get_parameters()})
    with open(os.path.join(os.environ["SAVE_WEIGHTS_DIR"], f"writes_rank{get_rank()}.json"), "w") as f:
        json.dump(found, f, indent=1)
    return status


if __name__ == "__main__":
    sys.exit(main())
