"""Command-line helpers shared by the inference entry points (predict, eval, export, preprocess, postprocess)."""
from src.atomic import output_problem
from src.errors import ConfigError

from .errors import DeployError


def alias_flag(argv, alias, key):
    """Rewrite `--alias V` / `--alias=V` in `argv` as the config flag `--key`.

    export.py and preprocess.py accept the model zoo's `--batch_size N`, which for them
    means the batch of the exported graph (config key export_batch_size), not the
    training batch that the config key batch_size holds.
    """
    out, seen = [], set()
    for arg in argv:
        flag = arg.split("=", 1)[0]
        if flag in (alias, key):
            seen.add(flag)
        out.append(key + arg[len(alias):] if flag == alias else arg)
    if len(seen) > 1:
        raise ConfigError(f"command line: {alias} is an alias of {key}; give one of them")
    return out


def resolve_checkpoint(checkpoint, pretrained):
    """The checkpoint to load: --checkpoint, or the seed's --pretrained (config key); both must agree."""
    if checkpoint and pretrained and checkpoint != pretrained:
        raise ConfigError(f"command line: --checkpoint {checkpoint} and --pretrained {pretrained} differ; "
                          f"--pretrained is the seed's name for --checkpoint, give one")
    path = checkpoint or pretrained
    if not path:
        raise ConfigError("command line: no weights to export; pass --checkpoint <ckpt> (or --pretrained <ckpt>)")
    return path


def check_output(flag, path, inputs=(), overwrite=False, make_parents=False, folder=False):
    """One `error:` line naming `flag` and `path` when the output may not be written (src.atomic.output_problem:
    an input, a folder, an existing file without --overwrite, a missing or unwritable folder); call it
    before any work, with every input the run reads."""
    problem = output_problem(path, inputs, overwrite=overwrite, make_parents=make_parents, folder=folder)
    if problem:
        raise DeployError(f"{flag} {path}: {problem}")


def print_model_value(config_path, model_path, key):
    """Print ``key`` of the exported model at ``model_path``: the value its ``<model>.json`` (export.py's record
    of the checkpoint's settings) holds, else the config's. The inference scripts take the class count and
    the transform from here, so a fine-tuned model is scored with its own (issue 27)."""
    import os

    from src.config import load_config
    from src.data.data_settings import apply_settings, read_sidecar, sidecar_path

    cfg = load_config(config_path)
    if os.path.isfile(sidecar_path(model_path)):
        cfg, _ = apply_settings(cfg, read_sidecar(model_path))
    print(getattr(cfg, key))


def check_label_range(labels_path, num_classes, model_path):
    """Refuse, before inference, labels that the model's ``num_classes`` outputs cannot score."""
    import json

    with open(labels_path, encoding="utf-8") as f:
        labels = json.load(f)
    flat = [label for value in labels.values() for label in (value if isinstance(value, list) else [value])]
    top = max(flat, default=-1)
    if top >= int(num_classes):
        raise ConfigError(f"{labels_path}: the dataset has {top + 1} classes, the model {model_path} has "
                          f"{num_classes} outputs: give the dataset the model was trained for (its class "
                          f"folders), or the model trained for this dataset")
