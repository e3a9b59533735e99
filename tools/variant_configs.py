"""The F1-F6 YAMLs of each recipe, generated from its F0 YAML and the variant table.

    python -m tools.variant_configs            # rewrite src/configs{,/deepmind}/dm_nfnet_f[1-6].yaml
    python -m tools.variant_configs --check    # exit 1 if one is not current

A recipe (the model zoo's in src/configs/, DeepMind's in src/configs/deepmind/) is written once,
as its dm_nfnet_f0.yaml; each larger variant is the same file with the variant's row of
src/variants.py put in: arch, dropout, train/test sizes, the RandAugment magnitude, the
output folder and the comments naming them. Every generated YAML still spells out every key,
so one file shows a whole run. Edit an F0 YAML or the table, then run this;
tests/tools/test_variant_configs.py checks the files are current.
"""
import os
import re
import sys

from tools.generated_files import generator_cli, stale
from src.variants import F_VARIANTS, VARIANTS

F0 = "dm_nfnet_f0"
# recipe folder -> a header line the larger variants add after F0's header (or None)
RECIPES = {
    os.path.join("src", "configs"):
        "# The larger variants may need a smaller per-device batch_size; the peak lr follows the global batch.",
    os.path.join("src", "configs", "deepmind"): None,
}
GENERATED = "Generated from dm_nfnet_f0.yaml and src/variants.py by `python -m tools.variant_configs`"
_LINE = re.compile(r"(?P<key>\w+): (?P<value>.*?) +# (?P<note>.*)")


def _line(key, value, note):
    """A YAML line as src.config.format_yaml writes it: the note aligned at column 45."""
    return f"{f'{key}: {value}':<44} # {note}"


def _auto_augment(value, note, magnitude, f0_magnitude):
    """F0's RandAugment string and note at another magnitude, in the same syntax."""
    if value.startswith("randaugment_"):  # DeepMind's 'randaugment_<layers><MM>'
        value = f"{value[:len('randaugment_') + 1]}{magnitude:02d}"
    else:  # timm's rand-m<M>-...; magnitudes above 10 need -mmax, else timm clamps them to 10
        value = value.replace(f"-m{f0_magnitude}-", f"-m{magnitude}-")
        if magnitude > 10:
            value += f"-mmax{magnitude}"
            note += f", clamped at {magnitude}"
    return value, note.replace(f"magnitude {f0_magnitude}", f"magnitude {magnitude}")


def variant_yaml(f0_text, name, extra_header=None):
    """The YAML of variant `name`: `f0_text` with the variant's row of the table put in."""
    v, f0 = VARIANTS[name], VARIANTS[F0]
    title = f"NFNet-F{name[-1]}"
    text = f0_text.replace(F0, name)
    text = text.replace(f"randaugment_4{f0.ra_magnitude:02d}", f"randaugment_4{v.ra_magnitude:02d}")
    lines = []
    for i, line in enumerate(text.split("\n")):
        m = _LINE.fullmatch(line)
        if i == 0:  # the title; the rest of the header names F0's recipe as the source
            line = line.replace("NFNet-F0", title)
        elif m is not None:
            key, value, note = m.group("key", "value", "note")
            note = note.replace("NFNet-F0", title)
            if key == "drop_rate":
                value = str(v.drop_rate)
            elif key == "input_size":
                value = str(v.train_size)
            elif key == "test_input_size":
                value = str(v.test_size)
            elif key == "crop_pct":
                pad = int(value)
                note = note.replace(f"{f0.test_size}+{pad}={f0.test_size + pad}, center crop {f0.test_size}",
                                    f"{v.test_size}+{pad}={v.test_size + pad}, center crop {v.test_size}")
            elif key == "auto_augment":
                value, note = _auto_augment(value, note, v.ra_magnitude, f0.ra_magnitude)
            line = _line(key, value, note)
        lines.append(line)
    header = [extra_header] if extra_header else []
    header.append(f"# {GENERATED}; edit those, not this file.")
    end = next(i for i, line in enumerate(lines) if not line.startswith("#"))
    lines[end:end] = header
    return "\n".join(lines)


def expected_files(root="."):
    """{path: text} of every generated YAML, from the F0 YAMLs under `root`."""
    files = {}
    for folder, extra_header in RECIPES.items():
        with open(os.path.join(root, folder, f"{F0}.yaml"), encoding="utf-8") as f:
            f0_text = f.read()
        for name in F_VARIANTS:
            if name != F0:
                files[os.path.join(root, folder, f"{name}.yaml")] = variant_yaml(f0_text, name, extra_header)
    return files


def stale_files(root="."):
    """{path: current text} for the generated YAMLs under `root` that are missing or not current."""
    return stale(expected_files(root))


def main(argv=None):
    return generator_cli(argv, "tools.variant_configs", "Write each recipe's F1-F6 YAMLs from its F0 YAML "
                         "and the variant table (src/variants.py).", stale_files)


if __name__ == "__main__":
    sys.exit(main())
