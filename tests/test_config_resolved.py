"""Every shipped YAML resolves to the same settings as when the variant table was made one.

tests/fixtures/resolved_configs.json is the resolved config of every YAML under src/configs/,
dumped on the code before src/variants.py and the generated variant YAMLs: any change
of an effective value by a refactoring shows up here, key by key.
"""
import glob
import json
import os

import pytest

from src.config import RETIRED_KEYS, load_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "resolved_configs.json")
with open(FIXTURE, encoding="utf-8") as _f:
    EXPECTED = json.load(_f)


def test_fixture_covers_every_shipped_yaml():
    shipped = sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "src", "configs", "**", "*.yaml"),
                                                                  recursive=True))
    assert shipped == sorted(EXPECTED)


@pytest.mark.parametrize("path", sorted(EXPECTED))
def test_resolved_config_is_unchanged(path):
    resolved, expected = load_config(os.path.join(ROOT, path)).to_dict(), dict(EXPECTED[path])
    for key, (_, follows) in RETIRED_KEYS.items():  # a retired key's value is now what it follows
        assert expected.pop(key) == follows(resolved)
    assert resolved == expected
