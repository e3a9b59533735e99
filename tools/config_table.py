"""The Parameters tables, generated from the config schema in src/config.py.

    python -m tools.config_table            # rewrite both tables
    python -m tools.config_table --check    # exit 1 if one is not current

README.md holds a compact table (one row per group: keys and defaults) between the two
marker comments below, the rest of the file left as it is; docs/parameters.md is the full
table (key, default, meaning), generated whole. tests/test_readme.py checks both.
"""
import os
import sys

from src.config import GROUPS
from tools.generated_files import generator_cli, stale

BEGIN = "<!-- parameters: generated from src/config.py by `python -m tools.config_table` -->"
END = "<!-- end of parameters -->"
GENERATED = "Generated from `src/config.py` by `python -m tools.config_table`"
README, DOCS = "README.md", os.path.join("docs", "parameters.md")


def _cell(text):
    return str(text).replace("|", "\\|")


def _default(field):
    if field.default is None:
        return "null"
    if isinstance(field.default, list):
        return "[" + ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in field.default) + "]"
    if isinstance(field.default, bool):
        return str(field.default).lower()
    if isinstance(field.default, float):
        return f"{field.default:g}"
    return str(field.default)


def compact_table():
    """One row per group: each key with its default."""
    lines = ["| group | keys (defaults) |", "|---|---|"]
    for group, fields in GROUPS.items():
        keys = " · ".join(f"`{f.name}` {_cell(_default(f))}" for f in fields)
        lines.append(f"| {group} | {keys} |")
    return "\n".join(lines)


def full_document():
    """docs/parameters.md: the full table with a title."""
    return ("# Parameters\n\n"
            f"{GENERATED}. Every key can be set in the YAML given by `--config` or on the command\n"
            "line as `--key value`; the YAMLs in `src/configs/` comment each value they choose.\n\n"
            + markdown_table() + "\n")


def markdown_table():
    """One row per config key, in schema order: group (on its first key), key, default, meaning."""
    lines = ["| group | key | default | meaning |", "|---|---|---|---|"]
    for group, fields in GROUPS.items():
        for i, f in enumerate(fields):
            meaning = f.help
            if f.choices and not all(c in f.help for c in f.choices):
                meaning += f" ({', '.join(f.choices)})"
            lines.append(f"| {group if i == 0 else ''} | `{f.name}` | `{_cell(_default(f))}` | {_cell(meaning)} |")
    return "\n".join(lines)


def with_table(text):
    """`text` with the part between the markers replaced by the current table."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the parameters markers are missing: {BEGIN!r} ... {END!r}")
    return text[:start + len(BEGIN)] + "\n" + compact_table() + "\n" + text[end:]


def stale_files(root="."):
    """{path: current text} for the generated files under `root` that are not current."""
    readme = os.path.join(root, README)
    with open(readme, encoding="utf-8") as f:
        text = f.read()
    return stale({readme: with_table(text), os.path.join(root, DOCS): full_document()})


def main(argv=None):
    return generator_cli(argv, "tools.config_table", "Write the config schema as the Parameters tables of "
                         "README.md and docs/parameters.md.", stale_files)


if __name__ == "__main__":
    sys.exit(main())
