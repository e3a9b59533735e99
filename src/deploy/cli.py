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
