"""The fused CPU kernels on Arm (aarch64, the Kunpeng 920 host CPU of Ascend servers), and the build's
fallback where MindSpore's oneDNN is absent or is not the one cpu_kernels.cc is written for.

MindSpore itself does not run here on aarch64, so the strongest check that can run is a chain:
cpu_kernels.cc cross-compiled with Debian's aarch64-linux-gnu-g++ (-march=armv8.2-a, the Kunpeng
920's ISA, no oneDNN) runs under qemu-user through a small driver (aot_driver.cc, the aot calling
convention without MindSpore), and its outputs equal, to float32 rounding, those of the x86 library
MindSpore loads here, which tests/models/test_cpu_kernels.py, test_conv2d_same.py and the parity
tests prove against MindSpore's operators and timm. The inputs are the shapes those tests use: odd
sizes, ragged tails, strides 1 and 2, several thread chunks. Not verified: speed on a Kunpeng,
oneDNN on Arm, MindSpore on Arm (docs/cpu_backend.md, "Arm (aarch64)").
"""
import ctypes
import glob
import os
import shutil
import struct
import subprocess

import numpy as np
import pytest

from src.models.layers import cpu_kernels

ARM_CXX, QEMU, SYSROOT = "aarch64-linux-gnu-g++", "qemu-aarch64", "/usr/aarch64-linux-gnu"
DEBIAN_ONEDNN2 = "/usr/lib/*-linux-gnu/libdnnl.so.2"  # Debian's libdnnl2: a real oneDNN 2.x, OpenMP runtime
DRIVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "aot_driver.cc")
# the kernels' flags with the Kunpeng 920's ISA for -march=native, and every warning asked for
ARM_FLAGS = tuple("-march=armv8.2-a" if f == "-march=native" else f for f in cpu_kernels.CXX_FLAGS) + (
    "-Wall", "-Wextra")
pytestmark = pytest.mark.timeout(1200)  # compilers and qemu on a busy machine
THREADS = 2  # the pool splits every kernel into two chunks on both sides (emulated threads under qemu)
KERNELS = {"ScaledGeluForward", "ScaledGeluBackward", "ScaledTanhGeluForward", "ScaledTanhGeluBackward",
           "WeightStandardizeForward", "WeightStandardizeBackward",
           "Im2ColSame", "Col2ImSame", "ChannelsToNCHWBias", "ChannelsToNCHWBiasBackward", "SgdAgcUpdate",
           "EmaUpdate", "AllFinite", "MulRows", "MulRowsBackward", "MulRowsAdd", "MeanRows", "MeanRowsBackward",
           "ScaledGeluBackwardFork", "ScaledTanhGeluBackwardFork", "AvgPool2x2Same",
           "AvgPool2x2SameBackward", "DenseReluForward", "DenseReluBackward", "DenseSigmoidForward",
           "DenseSigmoidBackward"}  # every kernel but the oneDNN ones


def _needs(*tools):
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:  # CI fails before this at once (tests/conftest.py, CI_NEEDS)
        pytest.skip(f"{', '.join(missing)} missing (Debian packages g++-aarch64-linux-gnu qemu-user: "
                    "sudo make arm-tools)")


def _compile(command):
    """(command, Popen): compilers run side by side (each ~6 s of CPU)."""
    return command, subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(job):
    command, proc = job
    out = proc.communicate(timeout=600)[0]
    assert proc.returncode == 0, f"{' '.join(command)}:\n{out}"
    return out


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """The aarch64 kernels library and driver, the x86 driver, and each compiler's messages."""
    _needs(ARM_CXX, QEMU)
    d = tmp_path_factory.mktemp("aarch64")
    paths = {"arm_lib": str(d / "libkernels_aarch64.so"), "arm_driver": str(d / "driver_aarch64"),
             "x86_driver": str(d / "driver_x86")}
    jobs = {
        "arm_lib": _compile([ARM_CXX, *ARM_FLAGS, "-o", paths["arm_lib"], cpu_kernels.SOURCE]),
        # the oneDNN part too: compiled for Arm, not linked or run (no oneDNN for aarch64 here)
        "arm_dnnl": _compile([ARM_CXX, *ARM_FLAGS, "-DNFNET_WITH_DNNL", "-c", "-o", str(d / "dnnl.o"),
                              cpu_kernels.SOURCE]),
        "arm_driver": _compile([ARM_CXX, "-O2", "-std=c++17", "-Wall", "-Wextra", "-o", paths["arm_driver"], DRIVER,
                                "-ldl"]),
        "x86_driver": _compile(["g++", "-O2", "-std=c++17", "-Wall", "-Wextra", "-o", paths["x86_driver"], DRIVER,
                                "-ldl"]),
    }
    messages = {name: _finish(job) for name, job in jobs.items()}
    return paths, messages


def test_aarch64_build_compiles_without_warnings_and_without_onednn(builds):
    paths, messages = builds
    assert messages == dict.fromkeys(messages, ""), messages  # -Wall -Wextra: not one warning
    symbols = subprocess.run(["aarch64-linux-gnu-nm", "-D", "--defined-only", paths["arm_lib"]], capture_output=True,
                             text=True, check=True).stdout.split()
    assert KERNELS | {"NfnetKernelsSetThreads", "NfnetKernelsThreads"} <= set(symbols)
    assert not [s for s in symbols if s.startswith("Dnnl")]  # dnnl_available() is False with this library


# --- calls ---------------------------------------------------------------------------------------


def _text(s):
    return struct.pack("<i", len(s)) + s.encode()


def _request(calls):
    """The driver's request (aot_driver.cc) for calls: [(kernel, [array, ...]), ...]."""
    out = [b"NFAOTREQ", struct.pack("<ii", THREADS, len(calls))]
    for kernel, params in calls:
        out += [_text(kernel), struct.pack("<i", len(params))]
        for a in params:
            data = np.ascontiguousarray(a).tobytes()
            out += [struct.pack("<i", a.ndim), struct.pack(f"<{a.ndim}q", *a.shape), _text(str(a.dtype)),
                    struct.pack("<q", len(data)), data]
    return b"".join(out)


def _result(blob, calls):
    """[(return value, [array after the call, ...]), ...] from the driver's result."""
    assert blob[:8] == b"NFAOTRES" and struct.unpack_from("<i", blob, 8)[0] == len(calls)
    pos, out = 12, []
    for _, params in calls:
        code, nparam = struct.unpack_from("<ii", blob, pos)
        pos += 8
        assert nparam == len(params)
        arrays = []
        for a in params:
            nbytes = struct.unpack_from("<q", blob, pos)[0]
            arrays.append(np.frombuffer(blob, a.dtype, a.size, pos + 8).reshape(a.shape))
            pos += 8 + nbytes
        out.append((code, arrays))
    assert pos == len(blob)
    return out


def _run(command, calls, directory, name):
    request, result = os.path.join(directory, f"{name}.req"), os.path.join(directory, f"{name}.res")
    with open(request, "wb") as f:
        f.write(_request(calls))
    subprocess.run([*command, request, result], check=True, timeout=600)
    with open(result, "rb") as f:
        return _result(f.read(), calls)


def _out(*shape):
    """An output buffer: NaN, so an element a kernel does not write shows."""
    return np.full(shape, np.nan, np.float32)


def _geometry(k, stride):
    return np.zeros((k, k, stride), np.int32)  # only its shape is read (FusedConv2dSame)


def _same_out(size, stride):
    return -(-size // stride)


def _calls(rng):
    """(name, kernel, params, number of leading inputs): every kernel on the shapes the x86 tests use."""
    f32 = np.float32

    def normal(*shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(f32)

    calls = []
    for shape in [(2, 3, 5, 7), (1001,)]:
        x = normal(*shape, scale=2.5)
        x.flat[:4] = [-6.0, 6.0, 0.0, -4.5]  # the erf clamp and the exp clamp
        dy, gamma = normal(*shape), np.array([1.3], f32)
        dshortcut = normal(*shape)
        for form in ("", "Tanh"):  # timm's exact GELU and DeepMind's tanh form
            calls += [(f"{form}gelu{shape}", f"Scaled{form}GeluForward", [x, gamma, _out(*shape)], 2),
                      (f"{form}gelu_grad{shape}", f"Scaled{form}GeluBackward", [x, dy, gamma, _out(*shape)], 3)]
            for sum_first in (0.0, 1.0):  # an NF block's first GELU with its shortcut's gradient
                calls.append((f"{form}gelu_fork{shape}{sum_first}", f"Scaled{form}GeluBackwardFork",
                              [x, dy, dshortcut, np.array([1.3, sum_first], f32), _out(*shape)], 4))
    for rows, fan in [(96, (32, 3, 3)), (7, (5, 1, 1))]:
        w = normal(rows, *fan, scale=0.1) + f32(0.05)
        gain, up = normal(rows, 1, 1, 1), normal(rows, *fan)
        # (scale, eps, form): timm's (eps in the root) and DeepMind's (eps a floor of fan_in * var)
        for form, consts in (("timm", [1.7 / np.sqrt(np.prod(fan)), 1e-5, 0.0]), ("deepmind", [1.7, 1e-4, 1.0])):
            consts = np.array(consts, f32)
            calls += [(f"ws{rows}{form}", "WeightStandardizeForward", [w, gain, consts, _out(*w.shape)], 3),
                      (f"ws_grad{rows}{form}", "WeightStandardizeBackward",
                       [w, gain, consts, up, _out(*w.shape), _out(*gain.shape)], 4)]
    for (n, c, h, w), k, stride in [((2, 5, 9, 11), 3, 1), ((2, 5, 9, 11), 3, 2), ((1, 4, 8, 8), 3, 2),
                                    ((3, 2, 7, 6), 1, 1), ((1, 3, 10, 10), 5, 2)]:
        oh, ow = _same_out(h, stride), _same_out(w, stride)
        x, geo = normal(n, c, h, w), _geometry(k, stride)
        patches = normal(c * k * k, n * oh * ow)
        tag = f"{(n, c, h, w)}k{k}s{stride}"
        calls += [(f"im2col{tag}", "Im2ColSame", [x, geo, _out(c * k * k, n * oh * ow)], 2),
                  (f"col2im{tag}", "Col2ImSame", [patches, x, geo, _out(n, c, h, w)], 3)]
    y, bias, dout = normal(6, 3, 5, 7), normal(6), normal(3, 6, 5, 7)
    calls += [("to_nchw", "ChannelsToNCHWBias", [y, bias, _out(3, 6, 5, 7)], 2),
              ("to_nchw_grad", "ChannelsToNCHWBiasBackward", [dout, _out(6, 3, 5, 7), _out(6)], 1)]
    hyper = np.array([0.1, 0.1 * 0.9, 0.9], f32)  # lr, lr * momentum, momentum
    for clipping, whole, nesterov in [(0.01, 0, 1), (0.01, 0, 0), (0.0, 0, 1), (0.01, 1, 1)]:
        grad = normal(17, 3, 3, 5) * np.linspace(0.001, 3, 17, dtype=f32).reshape(17, 1, 1, 1)  # some rows clip
        consts = np.array([[clipping, 1e-3, 5e-5, whole, nesterov]], f32)
        calls.append((f"sgd_agc{clipping, whole, nesterov}", "SgdAgcUpdate",
                      [consts, hyper, grad, normal(17, 3, 3, 5), normal(17, 3, 3, 5), _out(1)], 3))
    # three parameters in one launch, unscaled and with their EMA averages: the split between threads
    shapes = [(9, 4, 3, 3), (5,), (3000, 7)]
    consts = np.array([[0.01, 1e-3, 5e-5, 0, 1], [0.01, 1e-3, 0, 1, 1], [0.0, 1e-3, 5e-5, 0, 1]], f32)
    tensors = [[normal(*shape) for shape in shapes] for _ in range(4)]  # grads, params, bufs, averages
    calls.append(("sgd_agc_ema3", "SgdAgcUpdate", [consts, np.array([0.1, 0.09, 0.9, 0.5], f32), *tensors[0],
                                                   *tensors[1], *tensors[2], np.array([0.99, 0.01], f32),
                                                   *tensors[3], _out(1)], 5))
    calls.append(("ema", "EmaUpdate", [normal(40_003), normal(40_003), np.array([0.999, 0.001], f32), _out(1)], 3))
    finite = normal(200_001)
    finite[7] = np.finfo(f32).max
    calls.append(("all_finite", "AllFinite", [finite, _out(1)], 1))
    for bad in (np.inf, -np.inf, np.nan):
        for position in (0, 65_535, 65_536, 200_000):
            x = finite.copy()
            x[position] = bad
            calls.append((f"all_finite{bad}@{position}", "AllFinite", [x, _out(1)], 1))
    rows, factor, dout = normal(6, 50), normal(6, 1), normal(6, 50)
    calls += [("mul_rows", "MulRows", [rows, factor, _out(6, 50)], 2),
              ("mul_rows_grad", "MulRowsBackward", [rows, factor, dout, _out(6, 50), _out(6, 1)], 3)]
    nchw, gate, dmean = normal(3, 5, 7, 9), normal(3, 5), normal(3, 5)  # an SE's squeeze and gate on NCHW
    shortcut, dgate = normal(3, 5, 7, 9), normal(3, 5, 7, 9)
    calls += [("mul_rows_nchw", "MulRows", [nchw, gate, _out(3, 5, 7, 9)], 2),
              ("mul_rows_add", "MulRowsAdd", [nchw, gate, shortcut, _out(3, 5, 7, 9)], 3),
              ("mean_rows", "MeanRows", [nchw, _out(3, 5)], 1),
              ("mean_rows_grad", "MeanRowsBackward", [nchw, dmean, dgate, _out(3, 5, 7, 9)], 3)]
    for h, w in [(8, 6), (7, 9)]:  # the shortcut's pool on even and odd sizes
        x, dout = normal(2, 3, h, w), normal(2, 3, (h + 1) // 2, (w + 1) // 2)
        calls += [(f"avg_pool{h, w}", "AvgPool2x2Same", [x, _out(*dout.shape)], 1),
                  (f"avg_pool_grad{h, w}", "AvgPool2x2SameBackward", [x, dout, _out(*x.shape)], 2)]
    # an SE's dense layers: 6 samples (a pass of four and a rest), 300 inputs (two column blocks)
    x, w, b, dy = normal(6, 300), normal(40, 300, 1, 1, scale=0.1), normal(40), normal(6, 40)
    for act, y in (("Relu", np.maximum(normal(6, 40), 0)), ("Sigmoid", rng.uniform(0, 1, (6, 40)).astype(f32))):
        calls += [(f"dense_{act}", f"Dense{act}Forward", [x, w, b, _out(6, 40)], 3),
                  (f"dense_{act}_grad", f"Dense{act}Backward", [x, w, b, y, dy, _out(6, 300), _out(*w.shape),
                                                                _out(40)], 5)]
    return calls


# Kernels whose every output element is one IEEE operation (or a copy) of the inputs, or a sum in a
# fixed order: the same bits on any CPU. The others reduce with vector-width-dependent order or
# contract to FMA differently (NEON 4 lanes, AVX2 8, AVX-512 16): float32 rounding apart.
EXACT = {"Im2ColSame", "Col2ImSame", "ChannelsToNCHWBias", "MulRows", "MulRowsAdd", "AllFinite", "MeanRowsBackward",
         "AvgPool2x2Same", "AvgPool2x2SameBackward"}


def test_aarch64_kernels_equal_the_x86_kernels_mindspore_runs(builds, tmp_path, fused_kernels):
    paths, _ = builds
    calls = _calls(np.random.default_rng(0))
    plain = [(kernel, params) for _, kernel, params, _ in calls]
    x86 = _run([paths["x86_driver"], cpu_kernels.library_path()], plain, tmp_path, "x86")
    arm = _run([QEMU, "-L", SYSROOT, paths["arm_driver"], paths["arm_lib"]], plain, tmp_path, "arm")
    assert {kernel for _, kernel, _, _ in calls} == KERNELS
    worst = {}
    for (name, kernel, params, inputs), (code_x86, out_x86), (code_arm, out_arm) in zip(calls, x86, arm):
        assert code_x86 == code_arm == 0, name
        for i, (want, got) in enumerate(zip(out_x86, out_arm)):
            if i < inputs and kernel not in ("SgdAgcUpdate", "EmaUpdate"):
                np.testing.assert_array_equal(got, params[i], err_msg=f"{name}: input {i} changed")
            if kernel == "AllFinite" and i == 0:
                continue  # its input holds the inf / NaN under test
            assert np.isfinite(want).all() and np.isfinite(got).all(), f"{name}: param {i} not written"
            if kernel in EXACT:
                np.testing.assert_array_equal(got, want, err_msg=f"{name}: param {i}")
                continue
            # differences in units of the output's scale (float32 eps = 1.2e-7)
            scale = max(float(np.abs(want).max()), 1e-30)
            delta = float(np.abs(got.astype(np.float64) - want).max()) / scale
            worst[kernel] = max(worst.get(kernel, 0.0), delta)
            assert delta < 1e-6, (name, i, delta)  # measured 1.5e-7 (ChannelsToNCHWBiasBackward), else 0
        if kernel == "AllFinite":
            assert out_arm[1].tolist() == [1.0 if name == "all_finite" else 0.0], name
    print("aarch64 vs x86, max |difference| / max |x86 output|:", worst)


# --- the oneDNN probe ----------------------------------------------------------------------------


def _lib_dir(root, name, target):
    """root/name, holding libdnnl.so.3 as a link to `target` (or nothing)."""
    d = root / name
    d.mkdir()
    if target:
        (d / "libdnnl.so.3").symlink_to(target)
    return str(d)


def test_build_falls_back_to_the_im2col_kernels_unless_libdnnl_is_onednn3_with_the_threadpool_runtime(
        builds, tmp_path, monkeypatch, fused_kernels):
    """Every libdnnl.so.3 that is not MindSpore's oneDNN 3.x threadpool build gives no link flags; the
    library built then holds no oneDNN code and the convolutions take the im2col kernels (as on Arm)."""
    onednn2 = glob.glob(DEBIAN_ONEDNN2)
    if not onednn2:  # CI fails before this at once (tests/conftest.py, CI_NEEDS)
        pytest.skip("Debian's oneDNN 2 missing (Debian package libdnnl2: sudo make arm-tools)")
    mindspore_lib = os.path.join(os.path.dirname(os.path.abspath(cpu_kernels.ms.__file__)), "lib")
    assert cpu_kernels.dnnl_link_flags_for(mindspore_lib)[0] == "-DNFNET_WITH_DNNL"  # the wheel's: 3.x threadpool
    with_onednn = cpu_kernels.dnnl_available()  # cached now, so that monkeypatch restores it afterwards
    monkeypatch.setitem(cpu_kernels._state, "dnnl_flags", cpu_kernels.dnnl_link_flags_for(str(tmp_path)))  # noqa: SLF001
    plain = cpu_kernels.build(str(tmp_path))
    assert (plain != cpu_kernels.library_path()) == with_onednn  # its own cache key: never mixed with a oneDNN build
    library = ctypes.CDLL(plain)
    assert hasattr(library, "Im2ColSame") and not hasattr(library, "DnnlConvForward")
    monkeypatch.setitem(cpu_kernels._state, "path", plain)  # noqa: SLF001  as with a MindSpore without oneDNN 3.x
    monkeypatch.delitem(cpu_kernels._state, "dnnl")  # noqa: SLF001
    assert not cpu_kernels.dnnl_available()
    assert not cpu_kernels.FusedConv2dSame(3, stride=2).use_dnnl

    for name, target in [("absent", None), ("onednn2", onednn2[0]),  # version 2, OpenMP runtime
                         ("aarch64", builds[0]["arm_lib"]),  # another architecture: cannot load
                         ("not_onednn", plain),  # no dnnl_version
                               ("not_elf", cpu_kernels.SOURCE)]:  # invalid ELF header
        assert cpu_kernels.dnnl_link_flags_for(_lib_dir(tmp_path, name, target)) == (), name
