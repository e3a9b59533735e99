"""Loading weights into a network with a clear account of what did not fit (the file format: src/checkpoint_file.py)."""
from mindspore import Tensor

from src.checkpoint_file import EMA_PREFIX, CheckpointError, read_checkpoint

__all__ = ["EMA_PREFIX", "CheckpointError", "read_checkpoint", "describe_mismatch", "load_model_weights",
           "has_prefix"]


def _head_names(network):
    return {name for name, _ in network.parameters_and_names() if name.startswith("head.")}


def _short_list(items, limit=6):
    items = sorted(items)
    text = ", ".join(items[:limit])
    return text + (f" (+{len(items) - limit} more)" if len(items) > limit else "")


def describe_mismatch(missing, unexpected, misshaped):
    """'N missing (a, b, ...); N unexpected (...); N mis-shaped (...)' for a one-line error.

    `misshaped` holds ready-made "name: shapes" strings.
    """
    parts = []
    if missing:
        parts.append(f"{len(missing)} missing ({_short_list(missing)})")
    if unexpected:
        parts.append(f"{len(unexpected)} unexpected ({_short_list(unexpected)})")
    if misshaped:
        parts.append(f"{len(misshaped)} mis-shaped ({_short_list(misshaped, 3)})")
    return "; ".join(parts)


def load_model_weights(network, checkpoint_path, prefix="", drop_head=False, report=None, stored=None):
    """Copy the weights stored under `prefix` in `checkpoint_path` into `network`.

    Entries whose top-level name is not a child of the network (optimizer moments, step
    counters, loss scale, EMA copies under another prefix) are training state and are
    ignored. Every network parameter must be present with the same shape, and no entry
    under the network's own top-level names may be left over; otherwise CheckpointError
    lists the missing, unexpected and mis-shaped names. With drop_head=True (fine-tuning)
    a classifier of another class count keeps its fresh initialization instead.
    Returns the list of parameter names that kept their initialization. A `report` dict
    receives what happened, for the log: loaded (names), kept {name: (checkpoint shape,
    model shape)}, ignored (count of stored entries that are not this network's weights).
    `stored`: the file's read_checkpoint() when the caller has read it already (one read per command).
    """
    stored = read_checkpoint(checkpoint_path) if stored is None else stored
    own = dict(network.parameters_and_names())
    top_level = {name.split(".", 1)[0] for name in own}
    weights = {}
    for name, value in stored.items():
        if prefix and not name.startswith(prefix):
            continue
        key = name[len(prefix):]
        if key.split(".", 1)[0] in top_level:
            weights[key] = value
    if not weights:
        raise CheckpointError(f"{checkpoint_path} holds no weights for this network"
                              + (f" under prefix {prefix!r}" if prefix else ""))
    missing = set(own) - set(weights)
    unexpected = set(weights) - set(own)
    misshaped = {n for n in set(own) & set(weights) if tuple(weights[n].shape) != tuple(own[n].shape)}
    kept = []
    if drop_head and misshaped and misshaped <= _head_names(network):
        kept, misshaped = sorted(misshaped), set()
    if missing or unexpected or misshaped:
        shapes = [f"{n}: checkpoint {tuple(weights[n].shape)} vs model {tuple(own[n].shape)}"
                  for n in sorted(misshaped)]
        hint = ""
        if misshaped and misshaped <= _head_names(network) and not drop_head:
            hint = "; the classifier has another class count: fine-tune with the head re-initialized (--finetune)"
        raise CheckpointError(f"{checkpoint_path} does not fit the network: "
                              + describe_mismatch(missing, unexpected, shapes) + hint)
    for name, param in own.items():
        if name in kept:
            continue
        param.set_data(Tensor(weights[name].reshape(param.shape), dtype=param.dtype))
    if report is not None:
        report.update(loaded=sorted(set(own) - set(kept)), ignored=len(stored) - len(weights),
                      kept={n: (tuple(weights[n].shape), tuple(own[n].shape)) for n in kept})
    return kept


def has_prefix(stored, prefix):
    """True when a read checkpoint (name -> array) holds entries named prefix* (e.g. "ema." for EMA weights)."""
    return any(name.startswith(prefix) for name in stored)
