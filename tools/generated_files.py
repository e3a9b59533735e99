"""Files generated from the code (the Parameters tables, the F1-F6 YAMLs): write them, or check them.

A generator gives `{path: expected text}`; `stale` keeps the paths whose file is missing or
differs, and `generator_cli` is the `python -m <module> [--root DIR] [--check]` both use.
"""
import argparse
import sys


def stale(expected):
    """{path: text} of the `expected` files that are missing or not current."""
    out = {}
    for path, text in expected.items():
        try:
            with open(path, encoding="utf-8") as f:
                if f.read() == text:
                    continue
        except FileNotFoundError:
            pass
        out[path] = text
    return out


def generator_cli(argv, module, description, stale_files):
    """Rewrite what `stale_files(root)` reports, or with --check list it and exit 1; 2 on an unreadable source."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=description)
    parser.add_argument("--root", default=".", help="repository root (default: the current folder)")
    parser.add_argument("--check", action="store_true", help="only check that the files are current (exit 1 if not)")
    args = parser.parse_args(argv)
    try:
        found = stale_files(args.root)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for path, text in found.items():
        if args.check:
            print(f"{path}: not current; run python -m {module}", file=sys.stderr)
        else:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            print(f"updated {path}")
    return 1 if args.check and found else 0
