"""The fused CPU kernels' library: cache key, concurrent builds, NFNET_CPU_KERNELS=0 (README, Performance)."""
import os
import subprocess
import sys
import textwrap
import time

import pytest

from src.models.layers import cpu_kernels

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_cache_key_follows_source_flags_and_cpu(tmp_path, monkeypatch):
    name = cpu_kernels.library_name()
    assert name == cpu_kernels.library_name()  # stable
    source = tmp_path / "cpu_kernels.cc"
    source.write_bytes(open(cpu_kernels.SOURCE, "rb").read() + b"\n")
    with monkeypatch.context() as m:
        m.setattr(cpu_kernels, "SOURCE", str(source))
        assert cpu_kernels.library_name() != name  # one byte of source
    with monkeypatch.context() as m:
        m.setattr(cpu_kernels, "CXX_FLAGS", cpu_kernels.CXX_FLAGS + ("-DX",))
        assert cpu_kernels.library_name() != name
    with monkeypatch.context() as m:
        m.setattr(cpu_kernels, "_cpu_signature", lambda: "model name : another CPU\n")
        assert cpu_kernels.library_name() != name


def test_cache_directory_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("NFNET_KERNEL_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cpu_kernels.cache_dir() == str(tmp_path / "xdg" / "nfnet-mindspore")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cpu_kernels.cache_dir() == str(tmp_path / "home" / ".cache" / "nfnet-mindspore")
    monkeypatch.setenv("NFNET_KERNEL_CACHE", str(tmp_path / "mine"))
    assert cpu_kernels.cache_dir() == str(tmp_path / "mine")


# Each "rank" waits for a common start time, builds into the same empty cache and loads the result.
RANK = textwrap.dedent("""
    import ctypes, sys, time
    from src.models.layers import cpu_kernels
    time.sleep(max(0.0, float(sys.argv[2]) - time.time()))
    path = cpu_kernels.build(sys.argv[1])
    ctypes.CDLL(path)
    print(path)
""")


@pytest.mark.timeout(300)
def test_concurrent_ranks_build_into_one_cache_safely(tmp_path, fused_kernels):
    cache = tmp_path / "cache"
    start = time.time() + 15  # after the imports of every process
    procs = [subprocess.Popen([sys.executable, "-c", RANK, str(cache), str(start)], cwd=ROOT, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(3)]
    outs = [p.communicate(timeout=240) for p in procs]
    for proc, (out, err) in zip(procs, outs):
        assert proc.returncode == 0, err[-2000:]
    assert time.time() > start  # they really started together
    paths = {out.strip().splitlines()[-1] for out, _ in outs}
    assert paths == {str(cache / cpu_kernels.library_name())}
    assert os.listdir(cache) == [cpu_kernels.library_name()]  # no temporary file left behind


@pytest.mark.timeout(120)
def test_nfnet_cpu_kernels_0_builds_nothing_and_uses_the_operator_forms(tmp_path):
    script = textwrap.dedent("""
        import warnings
        import mindspore
        mindspore.set_device("CPU")
        from src.models import create_model
        from src.models.layers import cpu_kernels
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # switched off on purpose: no warning
            net = create_model("dm_nfnet_nano", num_classes=10, fast_forms=True)
        print(cpu_kernels.available(), sorted({type(c).__name__ for _, c in net.cells_and_names()
                                                 if type(c).__module__ == cpu_kernels.__name__}))
    """)
    env = dict(os.environ, NFNET_CPU_KERNELS="0", NFNET_KERNEL_CACHE=str(tmp_path / "cache"))
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=110)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "False []"
    assert not (tmp_path / "cache").exists()
