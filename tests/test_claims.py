"""docs/claims.md stays in sync with the README and docs: quotes found, tests exist, every "Verified" covered."""
import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = ["README.md"] + sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md"))
                             if not p.endswith("claims.md"))
ROW = re.compile(r'^\| "(?P<quote>.+)" \((?P<file>[\w./-]+)\) \| (?P<tests>.+) \|$')
TEST_REF = re.compile(r"`((?:tests|\.ci)/[\w./-]+\.py)(?:::(\w+))?`")


def _flat(text):
    return " ".join(text.split())


def _read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


def claims():
    """(quote, file, [(test file, function or None)]) of each row of docs/claims.md."""
    rows = []
    for line in _read("docs/claims.md").splitlines():
        match = ROW.match(line)
        if match:
            rows.append((_flat(match["quote"].replace("\\|", "|")), match["file"], TEST_REF.findall(match["tests"])))
    return rows


def verified_blocks(text):
    """The paragraphs and list items that state what is verified: a paragraph with "Verified" in it,
    each item of a list introduced by "Verified ...:", each paragraph under a "Verified" heading.
    Items that say something was not run claim nothing."""
    blocks, found, under_heading = re.split(r"\n\s*\n", text), [], False
    for i, block in enumerate(blocks):
        if block.startswith("#"):
            under_heading = "Verified" in block.splitlines()[0]
            continue
        if "Verified" in block and block.rstrip().endswith(":") and i + 1 < len(blocks):
            found += ["- " + item for item in re.split(r"(?m)^- ", blocks[i + 1]) if item.strip()]
        elif "Verified" in block or under_heading:
            found.append(block)
    return [_flat(b) for b in found if "not run here" not in b]


def test_every_quoted_claim_is_in_its_file_and_every_named_test_exists():
    rows = claims()
    assert len(rows) >= 15
    for quote, path, tests in rows:
        assert path in DOCS, path
        assert quote in _flat(_read(path)), f"{path} no longer says: {quote}"
        assert tests, quote
        for test_file, function in tests:
            assert os.path.isfile(os.path.join(ROOT, test_file)), test_file
            if function:
                assert re.search(rf"^def {function}\(", _read(test_file), re.M), f"{test_file}::{function}"


def test_every_verified_sentence_of_the_readme_and_docs_has_a_row():
    quotes = {}
    for quote, path, _ in claims():
        quotes.setdefault(path, []).append(quote)
    checked = 0
    for path in DOCS:
        for block in verified_blocks(_read(path)):
            checked += 1
            assert any(q in block for q in quotes.get(path, [])), f"docs/claims.md has no row for {path}: {block}"
    assert checked >= 5
