"""Where the augmentations draw their random numbers from.

Every augmentation takes an optional ``rng`` argument:

* ``None`` (the default) draws from NumPy's global random state
  (``np.random.random()``, ``np.random.randint()``...). That is the state
  ``mindspore.dataset.config.set_seed(seed)`` seeds, and MindSpore's Python
  worker processes re-seed it with ``seed + worker_id``, so a seeded pipeline
  is reproducible and its workers still draw different numbers.
* a ``np.random.RandomState`` instance: used as is. Tests pass
  ``np.random.RandomState(0)``; a fixed instance shared by forked workers
  repeats the same stream in each of them, so pipelines should use ``None``.

NumPy, unlike Python's ``random`` module, does not re-seed its global state in
a forked child, so without ``set_seed`` every worker would apply the same
"random" augmentations. Importing this module therefore registers a fork hook
that re-seeds NumPy's global state from OS entropy in each forked child, the way
``random`` does for itself. MindSpore's re-seeding runs after the fork, so a
seed set with ``set_seed`` still wins.
"""
import os

import numpy as np


def resolve_rng(rng):
    """Return ``rng``, or the ``np.random`` module (global state) when it is None.

    The module is resolved at call time instead of being stored on the
    transforms because modules cannot be pickled (spawned workers pickle them).
    """
    return np.random if rng is None else rng


def _reseed_global_numpy_state():
    np.random.seed()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reseed_global_numpy_state)
