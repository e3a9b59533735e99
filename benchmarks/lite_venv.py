"""PyPI's MindSpore Lite wheel in a Python 3.7 venv of its own, where its CPU runtime runs: for
`make test-lite` (tests/deploy/test_lite_runtime.py) and for the bench's Lite route (benchmarks/lite_cpu.py).

    python -m benchmarks.lite_venv    # make lite-venv; make bench and make test-lite make it too

mindspore-lite 2.0.0 is the only MindSpore Lite a package registry carries: a CPython 3.7 x86_64 wheel
(169 MB). It and a venv holding it (+ numpy, 16 MB) are made once in $NFNET_LITE_CACHE (default
~/.cache/nfnet-mindspore/lite); a venv without its .installed stamp is a half-made one and is made again.
Standard library only: the bench and the tests import it from their own interpreters.
"""
import glob
import os
import shutil
import subprocess
import sys

LITE_VERSION = "2.0.0"
WHEEL = f"mindspore_lite-{LITE_VERSION}-cp37-cp37m-manylinux1_x86_64.whl"
MISSING = ("skipped: no MindSpore Lite venv at {} (run `make lite-venv` once: it downloads PyPI's "
           f"mindspore-lite {LITE_VERSION} and makes that Python 3.7 venv)")


def lite_cache():
    return os.environ.get("NFNET_LITE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "nfnet-mindspore",
                                                               "lite")


def venv_dir():
    return os.path.join(lite_cache(), "py37")


def venv_python():
    """The venv's Python, or None when the venv is not made (no .installed stamp)."""
    return os.path.join(venv_dir(), "bin", "python") if os.path.isfile(os.path.join(venv_dir(), ".installed")) else None


def run(command, timeout=600, **kwargs):
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, **kwargs)


def cause(result):
    """pip's ERROR line, else the last line of the output."""
    lines = [line.strip() for line in (result.stderr + result.stdout).splitlines() if line.strip()]
    return next((line for line in lines if line.startswith("ERROR")), lines[-1] if lines else
                f"exit status {result.returncode}")


def find_python37():
    """A working Python 3.7: pyenv's 3.7.x, else python3.7 on PATH (a pyenv shim without 3.7 selected fails
    the probe); None when there is none."""
    pyenv_root = os.environ.get("PYENV_ROOT") or os.path.join(os.path.expanduser("~"), ".pyenv")
    candidates = sorted(glob.glob(os.path.join(pyenv_root, "versions", "3.7*", "bin", "python3.7")), reverse=True)
    candidates += [shutil.which("python3.7")] if shutil.which("python3.7") else []
    probe = "import sys; assert sys.version_info[:2] == (3, 7)"
    return next((c for c in candidates if run([c, "-c", probe], timeout=60).returncode == 0), None)


def make_venv():
    """(the venv's Python, None), made if it is not yet; (None, why not) without Python 3.7 or the wheel."""
    python = venv_python()
    if python:
        return python, None
    python37 = find_python37()
    if python37 is None:
        return None, ("Python 3.7 is missing (mindspore-lite 2.0.0 is a cp37 wheel): install it, e.g. "
                      "`pyenv install 3.7.16`, or put python3.7 on PATH")
    wheel = os.path.join(lite_cache(), "wheel", WHEEL)
    if not os.path.isfile(wheel):
        result = run([python37, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version",
                      "3.7", "--platform", "manylinux1_x86_64", f"mindspore-lite=={LITE_VERSION}", "-d",
                      os.path.dirname(wheel)], timeout=1200)
        if result.returncode != 0 or not os.path.isfile(wheel):
            return None, f"PyPI's mindspore-lite=={LITE_VERSION} wheel cannot be downloaded: {cause(result)}"
    venv = venv_dir()
    python = os.path.join(venv, "bin", "python")  # the venv's, once made
    shutil.rmtree(venv, ignore_errors=True)  # a venv without its stamp is a half-made one
    for command in ([python37, "-m", "venv", venv], [python, "-m", "pip", "install", "-q", wheel]):
        result = run(command, timeout=1200)
        if result.returncode != 0:
            return None, f"cannot install {WHEEL} into a Python 3.7 venv ({' '.join(command[:3])}): {cause(result)}"
    with open(os.path.join(venv, ".installed"), "w", encoding="utf-8") as f:
        f.write(WHEEL + "\n")
    return python, None


def main():
    python, reason = make_venv()
    if python is None:
        print(f"error: MindSpore Lite venv: {reason}", file=sys.stderr)
        return 1
    print(f"MindSpore Lite {LITE_VERSION} venv: {venv_dir()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
