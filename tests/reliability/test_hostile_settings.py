"""Case 13, every setting treated as hostile: for each key of src/config.py's schema, out-of-range, wrong-type,
huge and empty values, on the command line and in a YAML file. Each is refused with one line naming the key, or
accepted as a value of the key's type and range (null spellings for nullable keys); never a traceback. No
MindSpore: the checks run before it is imported. End-to-end samples through train.py at the end."""
import math

import pytest

from src.config import SCHEMA, ConfigError, load_config, parse_cli
from reliability_helpers import TINY, entry, mindspore_imported, user_error

HUGE_INT, HUGE_TEXT = 10 ** 30, "x" * 100_000


def hostile_values(field):
    """(command-line text, YAML value) pairs a careless or hostile user might give this key."""
    values = [("", ""), ("   ", "   "), (HUGE_TEXT, HUGE_TEXT), ("\x00", "a\x00b")]
    if field.type in (int, float) or field.item in (int, float):
        values += [("abc", "abc"), ("true", True), (str(HUGE_INT), HUGE_INT), ("-" + str(HUGE_INT), -HUGE_INT),
                   ("1e400", "1e400"), ("nan", float("nan")), ("[1, 2]", [1, 2]), ("{a: 1}", {"a": 1})]
        for bound, step in ((field.low, -1), (field.high, 1)):
            if bound is not None:
                values.append((str(bound + step), bound + step))
        if field.type is int:
            values.append(("1.5", 1.5))
    if field.type is bool:
        values += [("maybe", "maybe"), ("2", 2), ("[true]", [True])]
    if field.type is str:
        values += [("[a, b]", ["a", "b"]), ("7", 7), ("{a: 1}", {"a": 1})]
    if field.type is list:
        values += [("[]", []), ("[[1]]", [[1]]), ("[" + ",".join(["1"] * 10_000) + "]", [1] * 10_000)]
    return values


def accepted(field, value):
    """A value the key may hold: its type, within its range and choices."""
    if value is None:
        return field.nullable
    items = value if field.type is list else [value]
    kind = field.item if field.type is list else field.type
    for item in items:
        if kind is float:
            assert isinstance(item, float) and math.isfinite(item)
        else:
            assert type(item) is kind
        if kind is str:
            assert item.strip() and "\x00" not in item
        if field.low is not None:
            assert item >= field.low
        if field.high is not None:
            assert item <= field.high
    return True


def outcome(parse, key):
    try:
        cfg = parse()
    except ConfigError as exc:
        message = str(exc)
        assert "\n" not in message and key in message, message
        return None
    return getattr(cfg, key)


CASES = [(name, cli, yml) for name, field in SCHEMA.items() for cli, yml in hostile_values(field)]


@pytest.mark.parametrize("key, cli, yml", CASES, ids=[f"{k}={c[:12]!r}" for k, c, _ in CASES])
def test_a_hostile_value_is_refused_in_one_line_or_is_a_valid_value(key, cli, yml, tmp_path):
    field = SCHEMA[key]
    for parse in (lambda: parse_cli([f"--{key}", cli])[1], lambda: load_config(None, {key: yml})):
        value = outcome(parse, key)
        if value is not None or field.nullable:
            assert accepted(field, value), (key, value)


def test_every_key_is_tried(tmp_path):
    assert {name for name, _, _ in CASES} == set(SCHEMA)


@pytest.mark.parametrize("flag, value, message", [
    ("--output_dir", "", "error: command line: --output_dir: must not be empty"),
    ("--data_path", " ", "error: command line: --data_path: must not be empty"),
    ("--epochs", str(HUGE_INT), f"error: command line: --epochs: {HUGE_INT} is out of range"),
    ("--batch_size", "1e9", "error: command line: --batch_size: expected an integer, got '1e9' (str)"),
    ("--agc_exclude", "[head, '']", "error: command line: --agc_exclude: must not be empty"),
    ("--seed", str(2 ** 32), "error: command line: --seed: 4294967296 is out of range (at most 4294967295)"),
])
def test_train_py_refuses_hostile_settings_before_importing_mindspore(tiny_digits, tmp_path, flag, value, message):
    result = entry("train.py", "--data_path", tiny_digits, "--output_dir", tmp_path / "run", *TINY, flag, value,
                   probe_imports=True)
    assert user_error(result).startswith(message)
    assert not mindspore_imported(result) and not (tmp_path / "run").exists()
