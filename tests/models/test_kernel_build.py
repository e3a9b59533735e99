"""The fused CPU kernels' library: cache key, concurrent builds, NFNET_CPU_KERNELS=0 (README, Performance)."""
import os
import shutil
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


def _vectorized_lines(march):
    """Line numbers GCC reports "loop vectorized" at, compiling cpu_kernels.cc for `march`."""
    flags = [f if f != "-march=native" else f"-march={march}" for f in cpu_kernels.CXX_FLAGS]
    proc = subprocess.run(["g++", *flags, "-fopt-info-vec-optimized", "-o", os.devnull, cpu_kernels.SOURCE,
                           *cpu_kernels.dnnl_link_flags()], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    prefix = cpu_kernels.SOURCE + ":"
    return {int(line[len(prefix):].split(":")[0]) for line in proc.stderr.splitlines()
            if line.startswith(prefix) and "loop vectorized" in line}


@pytest.mark.skipif(sys.platform != "linux" or os.uname().machine != "x86_64", reason="x86 ISA levels")
@pytest.mark.parametrize("march", ["x86-64-v3", "x86-64-v4"])
def test_every_simd_loop_vectorizes_with_avx2_and_avx512(march):
    """Each `omp simd` loop and each parallel_simd element compiles to vector code for the fleet's two ISA
    levels (AVX2: x86-64-v3, AVX-512: x86-64-v4). GCC keeps a loop scalar silently when it cannot vectorize
    it: with AVX2 the GELU kernels did (4-6x slower, 14 % of an F0 train step's CPU time) and SGD-AGC's
    norms, while the AVX-512 build vectorized them. A check of the compiler's report, not of any timing."""
    if not shutil.which("g++"):
        pytest.skip("no g++")
    with open(cpu_kernels.SOURCE) as f:
        lines = f.read().splitlines()
    vectorized = _vectorized_lines(march)
    wanted = []
    for number, text in enumerate(lines, start=1):
        # GCC reports a loop at its pragma, its `for` or its first statement; parallel_simd's own loop is
        # reported at the calls, at the element's first statement
        if text.strip().startswith("#pragma omp simd") and "local(i)" not in lines[number]:
            wanted.append((number, number + 3))
        elif "parallel_simd(" in text and "void parallel_simd" not in text:
            wanted.append((number, number + 3))
    missing = [lines[lo - 1].strip() for lo, hi in wanted if not vectorized & set(range(lo, hi + 1))]
    assert len(wanted) >= 10
    assert not missing, f"scalar with -march={march}: {missing}"


def test_kernels_default_to_the_cores_the_process_may_run_on(fused_kernels):
    """Without a thread count set (a process that only loads an export.py --conv_impl fused_cpu MINDIR never
    sets one), the kernels use the cores the process's affinity allows, as set_cpu_threads sizes MindSpore's
    pool; not every core of the machine."""
    code = f"import ctypes; print(ctypes.CDLL({cpu_kernels.library_path()!r}).NfnetKernelsThreads())"
    allowed = sorted(os.sched_getaffinity(0))

    def threads(cores):
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                                preexec_fn=lambda: os.sched_setaffinity(0, cores), check=True)
        return int(result.stdout)

    assert threads(set(allowed[:1])) == 1
    assert threads(set(allowed)) == len(allowed)
