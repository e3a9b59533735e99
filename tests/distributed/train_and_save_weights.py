"""train.py, then this rank's network weights to $SAVE_WEIGHTS_DIR/weights_rank<r>.npz.

Rank 0 alone writes checkpoints; the 2-rank test launches this through
scripts/run_distribute_train_msrun.sh (ENTRY_SCRIPT) to compare every rank's weights.
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

import train  # noqa: E402
from src import builders  # noqa: E402


def main():
    networks = []
    build_trainer = builders.build_trainer

    def capturing_build_trainer(cfg, network, *args, **kwargs):
        networks.append(network)
        return build_trainer(cfg, network, *args, **kwargs)

    builders.build_trainer = capturing_build_trainer
    status = train.main(sys.argv[1:])
    from mindspore.communication import get_rank

    (network,) = networks
    np.savez(os.path.join(os.environ["SAVE_WEIGHTS_DIR"], f"weights_rank{get_rank()}.npz"),
             **{p.name: p.asnumpy() for p in network.get_parameters()})
    return status


if __name__ == "__main__":
    sys.exit(main())
