"""Fused float32 CPU kernels (cpu_kernels.cc) as MindSpore `ops.Custom(func_type="aot")` ops.

MindSpore 2.10's CPU backend runs every elementwise operator as its own kernel over the
whole tensor, and it cannot fuse them (graph-kernel fusion needs AKG, which the pip wheel
lacks). A scaled GELU with its gradient is then ~10 passes over the activation, and weight
standardization ~15 passes over the 71.5 M F0 weights per step (profiled: Erf, BroadcastTo,
Mul, AddN, ... 1.5 s of a 6.8 s train step at batch 8, 192x192). Here each is one pass, in
C++ on a small thread pool.

The library is compiled on first use with the system's g++ (-O3 -march=native)
into a cache directory keyed by the source, the flags and the CPU (NFNET_KERNEL_CACHE, else
$XDG_CACHE_HOME/nfnet-mindspore or ~/.cache/nfnet-mindspore); `make` builds it with the
environment. Without a compiler, or with NFNET_CPU_KERNELS=0, `available()` is False and the
layers keep their MindSpore-operator forms, which compute the same function (tests/models/
test_cpu_kernels.py). Each fused cell subclasses the plain cell it replaces; fast_forms.py
swaps them in after a training / evaluation network is built (config.py says when), so
exported models, built without that pass, never contain them.
"""
import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import warnings

import mindspore as ms
from mindspore import Tensor, nn, ops

from src.atomic import atomic_path

from .activations import GammaAct, PreActivation
from .conv2d_same import Conv2dSame, same_padding
from .pooling import AvgPool2x2Same
from .rowwise import MulRows, MulRowsAdd, SqueezeHW
from .squeeze_excite import DenseAct
from .std_conv import WeightStandardization

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cpu_kernels.cc")
# -fopenmp-simd honours the `omp simd` loops without linking an OpenMP runtime. -fno-trapping-math
# lets GCC turn the float compares of the GELU's clamps into vector selects (with trapping math it
# leaves them as branches and the loop scalar); no kernel reads the floating-point exception flags,
# and the values are the same.
CXX_FLAGS = ("-O3", "-march=native", "-fno-math-errno", "-fno-trapping-math", "-fopenmp-simd", "-pthread",
             "-shared", "-fPIC", "-std=c++17")

_state = {"path": None, "tried": False, "threads": 0}


def cxx_flags():
    """CXX_FLAGS with the -march level of NFNET_KERNEL_MARCH (default native; e.g. x86-64-v3 builds
    AVX2 code on an AVX-512 machine, as the bench's --isa avx2 does)."""
    march = os.environ.get("NFNET_KERNEL_MARCH", "native")
    return tuple(f"-march={march}" if flag == "-march=native" else flag for flag in CXX_FLAGS)
_BUILD_ERRORS = (OSError, RuntimeError, subprocess.SubprocessError)  # no compiler, failed build, unwritable cache


def _cpu_signature():
    """The CPU model and ISA flags (part of the cache key: -march=native code is CPU-specific)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            lines = [line for line in f if line.startswith(("model name", "flags", "Features"))]
        return "".join(sorted(set(lines)))
    except OSError:
        return platform.processor()


def cache_dir():
    root = os.environ.get("NFNET_KERNEL_CACHE")
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "nfnet-mindspore")
    return root


class _DnnlVersion(ctypes.Structure):  # dnnl_version_t (oneDNN's dnnl_types.h)
    _fields_ = [("major", ctypes.c_int), ("minor", ctypes.c_int), ("patch", ctypes.c_int),
                ("hash", ctypes.c_char_p), ("cpu_runtime", ctypes.c_uint), ("gpu_runtime", ctypes.c_uint)]


_DNNL_RUNTIME_THREADPOOL = 0x8  # DNNL_RUNTIME_THREADPOOL in oneDNN's dnnl_config.h


def dnnl_link_flags():
    """Flags that link the oneDNN MindSpore's wheel ships (mindspore/lib/libdnnl.so.3), or ()."""
    if "dnnl_flags" not in _state:
        _state["dnnl_flags"] = dnnl_link_flags_for(os.path.join(os.path.dirname(os.path.abspath(ms.__file__)), "lib"))
    return _state["dnnl_flags"]


def dnnl_link_flags_for(lib):
    """Flags that link `lib`/libdnnl.so.3, or () when it is not there, cannot be loaded (another
    CPU architecture) or is not the oneDNN 3.x with the threadpool runtime cpu_kernels.cc is written for."""
    try:
        dnnl = ctypes.CDLL(os.path.join(lib, "libdnnl.so.3"))
        dnnl.dnnl_version.restype = ctypes.POINTER(_DnnlVersion)
        version = dnnl.dnnl_version().contents
    except (OSError, AttributeError):
        return ()
    if version.major != 3 or version.cpu_runtime != _DNNL_RUNTIME_THREADPOOL:
        return ()
    return ("-DNFNET_WITH_DNNL", f"-L{lib}", "-l:libdnnl.so.3", f"-Wl,-rpath,{lib}")


def library_name():
    with open(SOURCE, "rb") as f:
        source = f.read()
    key = hashlib.sha256(source + " ".join(cxx_flags() + dnnl_link_flags()).encode() + platform.machine().encode()
                         + _cpu_signature().encode()).hexdigest()[:16]
    return f"libnfnet_cpu_kernels-{key}.so"


def build(directory=None, compiler=None):
    """Compile cpu_kernels.cc into `directory` (default cache_dir()) unless it is there; return the path.

    Raises RuntimeError with the compiler's message when compilation fails. The library is
    written under a temporary name and renamed, so concurrent builds (several ranks) are safe.
    """
    directory = directory or cache_dir()
    path = os.path.join(directory, library_name())
    if os.path.isfile(path):
        return path
    compiler = compiler or os.environ.get("CXX") or "g++"
    if shutil.which(compiler) is None:
        raise RuntimeError(f"no C++ compiler {compiler!r} on PATH")
    with atomic_path(path, durable=False) as tmp:  # a cache: rebuilt if lost
        proc = subprocess.run([compiler, *cxx_flags(), "-o", tmp, SOURCE, *dnnl_link_flags()], capture_output=True,
                              text=True, timeout=300, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"{compiler} failed on {SOURCE}: {proc.stderr.strip()[-2000:]}")
    return path


def library_path():
    """Path of the built library, or None when the kernels are off or cannot be built (warns once)."""
    if not _state["tried"]:
        _state["tried"] = True
        if os.environ.get("NFNET_CPU_KERNELS", "1") != "0":
            try:
                _state["path"] = build()
                _apply_threads()
            except _BUILD_ERRORS as err:
                warnings.warn(f"fused CPU kernels unavailable, using MindSpore operators instead: {err}",
                              RuntimeWarning, stacklevel=2)
    return _state["path"]


def available():
    """True when the fused kernels can be used: the CPU backend and a built library."""
    return ms.get_context("device_target") == "CPU" and library_path() is not None


def dnnl_available():
    """True when the convolutions run through MindSpore's oneDNN: the library was built with it
    (DnnlConvForward) and NFNET_ONEDNN is not 0."""
    if "dnnl" not in _state:
        path = library_path()
        _state["dnnl"] = (os.environ.get("NFNET_ONEDNN", "1") != "0" and path is not None
                          and hasattr(ctypes.CDLL(path), "DnnlConvForward"))
    return _state["dnnl"]


def set_threads(num):
    """Threads of the fused kernels (set_cpu_threads keeps them equal to MindSpore's)."""
    _state["threads"] = int(num)
    _apply_threads()


def _apply_threads():
    # MindSpore dlopen()s the same path, so this handle shares the library's globals
    if _state["path"] and _state["threads"]:
        ctypes.CDLL(_state["path"]).NfnetKernelsSetThreads(ctypes.c_int(_state["threads"]))


def _custom(name, out_shape, out_dtype):
    return ops.Custom(f"{library_path()}:{name}", out_shape=out_shape, out_dtype=out_dtype, func_type="aot")


class FusedScaledGELU(GammaAct):
    """gamma * GELU(x) and its gradient, one fused kernel each, in either GELU form (activations.py:
    ScaledGELU and ScaledTanhGELU give the formulas)."""

    _KERNELS = {"exact": ("ScaledGeluForward", "ScaledGeluBackward"),
                "tanh": ("ScaledTanhGeluForward", "ScaledTanhGeluBackward")}

    def __init__(self, gamma, gelu_form="exact"):
        super().__init__("gelu", gamma, gelu_form)
        forward, backward = self._KERNELS[self.gelu_form]
        self.gamma_tensor = Tensor([self.gamma], ms.float32)
        self.forward = _custom(forward, lambda x, g: x, lambda x, g: x)
        self.backward = _custom(backward, lambda x, dy, g: x, lambda x, dy, g: x)

    def construct(self, x):
        return self.forward(x, self.gamma_tensor)

    def bprop(self, x, out, dout):
        return (self.backward(x, dout, self.gamma_tensor),)

    def __deepcopy__(self, memo):  # ops.Custom itself cannot be deep-copied in MindSpore 2.10
        return type(self)(self.gamma, self.gelu_form)


class FusedWeightStandardization(WeightStandardization):
    """Scaled weight standardization per output unit in either form (std_conv.py), forward and
    backward fused: timm's (w - mean) / sqrt(var + eps) * gain * scale, or DeepMind's
    (w - mean) * gain * gamma * rsqrt(max(fan_in * var, eps)).

    w: (out, ...) float32, gain: (out, 1, 1, 1); statistics in float64 inside the kernel.
    """

    def __init__(self, scale, eps, form="timm", fan_in=1):
        super().__init__(float(scale), float(eps), form, fan_in)
        self.consts = Tensor([self.scale, self.eps, 1.0 if self.form == "deepmind" else 0.0], ms.float32)
        self.forward = _custom("WeightStandardizeForward", lambda w, g, c: w, lambda w, g, c: w)
        self.backward = _custom("WeightStandardizeBackward", lambda w, g, c, d: (w, g),
                                lambda w, g, c, d: (w, g))

    def construct(self, weight, gain):
        return self.forward(weight, gain, self.consts)

    def bprop(self, weight, gain, out, dout):
        return self.backward(weight, gain, self.consts, dout)

    def __deepcopy__(self, memo):
        return type(self)(self.scale, self.eps, self.form, self.fan_in)


class FusedMulRows(MulRows):
    """x (R rows of K) times factor (R) and its gradient, one pass each (rowwise.MulRows fused).

    The operator form broadcasts the factor to an (R, K) tensor that the graph keeps for the
    backward; here only the two inputs are kept, and an NCHW x needs no reshape (no copy).
    """

    def __init__(self):
        super().__init__()
        self.forward = _custom("MulRows", lambda x, f: x, lambda x, f: x)
        self.backward = _custom("MulRowsBackward", lambda x, f, d: (x, f), lambda x, f, d: (x, f))

    def construct(self, x, factor):
        return self.forward(x, factor)

    def bprop(self, x, factor, out, dout):
        return self.backward(x, factor, dout)

    def __deepcopy__(self, memo):
        return type(self)()


class FusedMulRowsAdd(MulRowsAdd):
    """x * factor (per row, as FusedMulRows) + addend in one pass, and its gradient (rowwise.MulRowsAdd
    fused): an NF block's gated branch and shortcut. The operator form's Add took 35 ms of F0's eval
    call at batch 8 and 256 px (Ice Lake, 2 threads, MindSpore's profiler), a pass of its own."""

    def __init__(self):
        super().__init__()
        self.forward = _custom("MulRowsAdd", lambda x, f, a: x, lambda x, f, a: x)
        self.backward = _custom("MulRowsBackward", lambda x, f, d: (x, f), lambda x, f, d: (x, f))

    def construct(self, x, factor, addend):
        return self.forward(x, factor, addend)

    def bprop(self, x, factor, addend, out, dout):
        dx, dfactor = self.backward(x, factor, dout)
        return dx, dfactor, dout

    def __deepcopy__(self, memo):
        return type(self)()


class FusedAvgPool2x2Same(AvgPool2x2Same):
    """pooling.AvgPool2x2Same and its gradient, one pass each over the planes of an NCHW tensor."""

    def __init__(self):
        super().__init__()
        self.forward = _custom("AvgPool2x2Same", lambda x: (*x[:2], (x[2] + 1) // 2, (x[3] + 1) // 2), lambda x: x)
        self.backward = _custom("AvgPool2x2SameBackward", lambda x, d: x, lambda x, d: x)

    def construct(self, x):
        return self.forward(x)

    def bprop(self, x, out, dout):
        return (self.backward(x, dout),)

    def __deepcopy__(self, memo):
        return type(self)()


class FusedSqueezeHW(SqueezeHW):
    """(the (N, C) mean of an NCHW x over H and W, x) and its gradient, one pass each (rowwise.SqueezeHW fused):
    the backward adds the mean's gradient, dout / (H * W), to the gradient x gets from the gate.

    The operator form reshapes x (a copy), reduces, and in the backward tiles the gradient to x's
    shape and divides the tiled tensor: F0 b8@192, 13 SE squeezes, ~45 ms of a train step by
    MindSpore's profiler (Tile 12, RealDiv 24, ReduceMean 8) plus the reshapes, and an AddN.
    """

    def __init__(self):
        super().__init__()
        self.forward = _custom("MeanRows", lambda x: tuple(x[:2]), lambda x: x)
        self.backward = _custom("MeanRowsBackward", lambda x, d, o: x, lambda x, d, o: x)

    def construct(self, x):
        return self.forward(x), x

    def bprop(self, x, out, dout):
        return (self.backward(x, dout[0], dout[1]),)

    def __deepcopy__(self, memo):
        return type(self)()


class FusedDenseAct(DenseAct):
    """squeeze_excite.DenseAct in one kernel each way, reading and writing a 4-D weight where it is: the
    operator form's Reshape copied every SE weight on each call and its gradient back (49 copies, 25 ms
    of F0's train step at b8 and 192 px, beside 30 ms of MatMul; Ice Lake, 2 threads, MindSpore's profiler)."""

    def __init__(self, act):
        super().__init__(act)
        name = "Relu" if act == "relu" else "Sigmoid"
        self.forward = _custom(f"Dense{name}Forward", lambda x, w, b: (x[0], w[0]), lambda x, w, b: x)
        self.backward = _custom(f"Dense{name}Backward", lambda x, w, b, y, d: (x, w, b),
                                lambda x, w, b, y, d: (x, w, b))

    def construct(self, x, weight, bias):
        return self.forward(x, weight, bias)

    def bprop(self, x, weight, bias, out, dout):
        return self.backward(x, weight, bias, out, dout)

    def __deepcopy__(self, memo):
        return type(self)(self.act)


class FusedPreActivation(PreActivation):
    """activations.PreActivation of a GELU, the forward FusedScaledGELU's kernel, and the backward one
    pass that also sums the shortcut's gradient (for the transition blocks' (act(x), act(x)) before the
    activation's backward, else after it): the AddN it saves was 37 ms of F0's train step at b8 and
    192 px, with the SE squeeze's (Ice Lake, 2 threads, MindSpore's profiler)."""

    _BACKWARD = {"exact": "ScaledGeluBackwardFork", "tanh": "ScaledTanhGeluBackwardFork"}

    def __init__(self, gamma, gelu_form="exact", shortcut_reads_input=True):
        super().__init__(FusedScaledGELU(gamma, gelu_form), shortcut_reads_input)
        self.consts = Tensor([self.act.gamma, 0.0 if shortcut_reads_input else 1.0], ms.float32)
        self.backward = _custom(self._BACKWARD[self.act.gelu_form], lambda x, d, s, c: x, lambda x, d, s, c: x)

    def construct(self, x):
        y = self.act(x)
        return (y, x) if self.shortcut_reads_input else (y, y)

    def bprop(self, x, out, dout):
        return (self.backward(x, dout[0], dout[1], self.consts),)

    def __deepcopy__(self, memo):
        return type(self)(self.act.gamma, self.act.gelu_form, self.shortcut_reads_input)


def _in_place(name):
    """A kernel that writes its Parameter inputs where they are and returns a (1,) zero.

    ``side_effect_mem`` makes MindSpore order it like ``ops.assign`` (docs: design/side_effect):
    reads of those Parameters written before it see the old values, reads after it the new ones.
    """
    op = _custom(name, lambda *shapes: (1,), lambda *dtypes: dtypes[0])
    op.add_prim_attr("side_effect_mem", True)
    return op


def sgd_agc_update_op():
    """SgdAgcUpdate(consts (m, 5), hyper (3,) or (4,), grad_0..m-1, param_0..m-1, buf_0..m-1[, decay (2,),
    average_0..m-1]): one SGD-AGC step of all m parameters in one launch, written into the params and
    buffers (the arithmetic of src/optim/sgd_agc.py; consts and hyper in cpu_kernels.cc; a 4th hyper entry
    multiplies the gradients first: the loss scale's unscale, folded in; with decay, each EMA average
    follows its weight in the same pass)."""
    return _in_place("SgdAgcUpdate")


def ema_update_op():
    """EmaUpdate(average, weight, [decay, 1 - decay]): average = average * decay + weight * (1 - decay),
    written into average (src/trainers/ema.py)."""
    return _in_place("EmaUpdate")


def all_finite_op():
    """AllFinite(x) -> (1,) float32: 1 when every element of x is finite, else 0 (one pass)."""
    return _custom("AllFinite", lambda x: (1,), lambda x: x)


def all_finite_multi_op():
    """AllFiniteMulti(x_0, ..., x_m) -> (1,) float32: 1 when every element of every x_i is finite, else 0:
    the whole step's overflow check in one launch (one AllFinite, a slice and a compare per gradient before)."""
    return _custom("AllFiniteMulti", lambda *shapes: (1,), lambda *dtypes: dtypes[0])


def _out_hw(x_shape, geometry_shape):
    """(oh, ow) of TensorFlow SAME for an NCHW input shape and a (kh, kw, stride, ...) geometry shape."""
    kh, kw, stride = geometry_shape[:3]
    return same_padding(x_shape[2], kh, stride)[2], same_padding(x_shape[3], kw, stride)[2]


class FusedConv2dSame(Conv2dSame):
    """NCHW convolution with TensorFlow SAME padding plus bias.

    Where the library was built with the oneDNN MindSpore's wheel ships (cpu_kernels.cc,
    `dnnl_available()`; NFNET_ONEDNN=0 switches it off), forward and backward are oneDNN's
    convolution primitives, with the weights reordered per call into the layout each asks for:
    no columns at all (F0 train step b8@192: 2.40-2.46 s against 2.63-2.80 s with im2col).

    Otherwise: fused im2col, one (per group batched) matmul, and a fused transpose-to-NCHW
    with the bias add; the backward recomputes the columns for the weight gradient and scatters
    the column gradient back (col2im).

    Replaces, per convolution, the zero-padding Concat, the input/output Transposes, k*k
    Slices and a Stack of conv2d_same.Conv2dSameMatmul (about 1.4 s of a 5.3 s F0 train
    step at batch 8, 192x192, profiled) with one pass each.
    """

    impl = "fused"  # deploy/fold.py keeps this cell in a folded layer (export.py --conv_impl fused_cpu)

    def __init__(self, kernel_size, stride=1, groups=1, onednn=None):
        super().__init__(int(kernel_size), int(stride), int(groups))
        k = self.kernel_size
        self.use_dnnl = dnnl_available() if onednn is None else bool(onednn) and dnnl_available()
        # The kernels get the geometry as the *shape* (kh, kw, stride[, groups]) of a small tensor:
        # an aot Custom op's output shape must be a function of its input shapes alone (in PyNative
        # MindSpore 2.10 keeps the first shape function per kernel name for every instance).
        if self.use_dnnl:
            self.geometry = ops.zeros((k, k, self.stride, self.groups), ms.int32)
            self.dnnl_forward = _custom("DnnlConvForward", lambda x, w, _b, geo: (x[0], w[0], *_out_hw(x, geo)),
                                        lambda x, _w, _b, _geo: x)
            self.dnnl_backward = _custom("DnnlConvBackward", lambda x, _d, w, _geo: (x, w, (w[0],)),
                                         lambda x, _d, _w, _geo: (x, x, x))
            return
        self.geometry = ops.zeros((k, k, self.stride), ms.int32)

        def columns_shape(x, geo):
            oh, ow = _out_hw(x, geo)
            return (x[1] * geo[0] * geo[1], x[0] * oh * ow)

        self.im2col = _custom("Im2ColSame", columns_shape, lambda x, _geo: x)
        self.col2im = _custom("Col2ImSame", lambda _d, x, _geo: x, lambda d, _x, _geo: d)
        self.to_nchw = _custom("ChannelsToNCHWBias", lambda y, _b: (y[1], y[0], *y[2:]), lambda y, _b: y)
        self.to_nchw_backward = _custom("ChannelsToNCHWBiasBackward",
                                        lambda d: ((d[1], d[0], *d[2:]), (d[1],)), lambda d: (d, d))
        self.matmul_nt = ops.BatchMatMul(transpose_b=True)
        self.matmul_tn = ops.BatchMatMul(transpose_a=True)

    def _grouped(self, x):
        """(g, x.shape[0] / g, -1): a weight (out, ...) or columns (in * k * k, ...) per group."""
        return x.reshape(self.groups, x.shape[0] // self.groups, -1)

    def construct(self, x, weight, bias):
        if self.use_dnnl:
            return self.dnnl_forward(x, weight, bias, self.geometry)
        y = ops.matmul(self._grouped(weight), self._grouped(self.im2col(x, self.geometry)))
        k, s = self.kernel_size, self.stride
        oh, ow = same_padding(x.shape[2], k, s)[2], same_padding(x.shape[3], k, s)[2]
        return self.to_nchw(y.reshape(weight.shape[0], x.shape[0], oh, ow), bias)

    def bprop(self, x, weight, bias, out, dout):
        if self.use_dnnl:
            return self.dnnl_backward(x, dout, weight, self.geometry)
        dy, dbias = self.to_nchw_backward(dout)
        dy = self._grouped(dy)
        # x depends on dy: without it MindSpore's common-subexpression pass merges this im2col with
        # the forward's and keeps every layer's columns (k*k times the input) until the backward
        # (measured: F0 b8@192 peak RSS 4,029 -> 2,971 MB; tests/models/test_conv_memory.py)
        columns = self.im2col(ops.depend(x, dy), self.geometry)
        dweight = self.matmul_nt(dy, self._grouped(columns)).reshape(weight.shape)
        dcolumns = self.matmul_tn(self._grouped(weight), dy)
        dx = self.col2im(dcolumns.reshape(x.shape[1] * self.kernel_size ** 2, -1), x, self.geometry)
        return dx, dweight, dbias

    def __deepcopy__(self, memo):
        return type(self)(self.kernel_size, self.stride, self.groups, self.use_dnnl)


def _chain_shapes(x, *rest):
    """NCHW shapes of each convolution's output in DnnlConvGeluChain: x, then (weight, bias, geometry) per
    convolution, then consts."""
    n, c, h, w = x
    shapes = []
    for weight, _bias, geo in zip(rest[0:-1:3], rest[1:-1:3], rest[2:-1:3]):
        h, w = _out_hw((n, c, h, w), geo)
        c = weight[0]
        shapes.append((n, c, h, w))
    return shapes


def _chain_train_shapes(*shapes):
    """DnnlConvGeluChainTrain's outputs: y, then each saved GELU input (the outputs of all but the last
    convolution), then the saved x."""
    outputs = _chain_shapes(*shapes)
    return (outputs[-1], *outputs[:-1], shapes[0])


def _chain_backward_shapes(x, _dy, *rest):
    """dx, then dweight and dbias per convolution, from DnnlConvGeluChainBackward's input shapes."""
    count = len(rest) // 3  # rest: count - 1 saved activations, (weight, geometry) per convolution, consts
    weights = rest[count - 1:-1:2]
    return (x, *[s for w in weights for s in (w, (w[0],))])


def _without_standardization(shapes):
    """The shapes of a standardizing chain kernel's inputs (x, then weight, gain, consts, bias, geometry per
    convolution, then consts) as the plain kernel's: x, then weight, bias, geometry, then consts."""
    x, *rest, consts = shapes
    per_conv = [rest[i:i + 5] for i in range(0, len(rest), 5)]
    return (x, *[s for weight, _gain, _consts, bias, geo in per_conv for s in (weight, bias, geo)], consts)


def _chain_train_std_shapes(*shapes):
    """DnnlConvGeluChainTrainStd's outputs: those of DnnlConvGeluChainTrain."""
    return _chain_train_shapes(*_without_standardization(shapes))


def _chain_backward_std_shapes(x, _dy, *rest):
    """dx, then dweight, dgain and dbias per convolution, from DnnlConvGeluChainBackwardStd's input shapes."""
    count = len(rest) // 5  # rest: count - 1 saved, (weight, gain, consts, geometry) per convolution, consts
    convs = [rest[count - 1 + 4 * i:count + 3 + 4 * i] for i in range(count)]
    return (x, *[s for weight, gain, _consts, _geo in convs for s in (weight, gain, (weight[0],))])


def _backward_activations(out, dout):
    """The training chain backward's first inputs: x as the forward kept it (its last output, in the first
    convolution's layout), y's gradient, then the saved GELU inputs."""
    return [out[-1], dout[0], *out[1:-1]]


def _chain_inputs(x, weights_and_biases, geometry):
    """x, then weight, bias and geometry per convolution: the chain kernels' inputs before consts."""
    inputs = [x]
    for i, geo in enumerate(geometry):
        inputs += [weights_and_biases[2 * i], weights_and_biases[2 * i + 1], geo]
    return inputs


class _TrainingChain(nn.Cell):
    """DnnlConvGeluChainTrain with DnnlConvGeluChainBackward as its gradient: returns (y, saved_0, ...), the
    GELUs' inputs in oneDNN's blocked layout (their NCHW shapes, the same number of elements), which the
    backward takes instead of NCHW activations, and then x as the first convolution reads it: the forward's
    reorder of x writes it there instead of into a scratch buffer, and the backward's weight gradient reads it
    without reordering x from NCHW again."""

    def __init__(self, geometry, consts):
        super().__init__()
        if len(geometry) != 4:
            raise ValueError(f"the training chain takes 4 convolutions (a main path, the stem), not {len(geometry)}")
        self.geometry, self.consts = geometry, consts
        self.forward = _custom("DnnlConvGeluChainTrain", _chain_train_shapes,
                               lambda x, *_rest: (x,) * (len(geometry) + 1))
        self.backward = _custom("DnnlConvGeluChainBackward", _chain_backward_shapes,
                                lambda x, *_rest: (x,) * (1 + 2 * len(geometry)))

    def construct(self, x, *weights_and_biases):
        return self.forward(*_chain_inputs(x, weights_and_biases, self.geometry), self.consts)

    def bprop(self, x, w1, b1, w2, b2, w2b, b2b, w3, b3, out, dout):  # MindSpore's bprop takes no *args
        inputs = _backward_activations(out, dout)
        for weight, geometry in zip((w1, w2, w2b, w3), self.geometry):
            inputs += [weight, geometry]
        return self.backward(*inputs, self.consts)


class _StandardizingTrainingChain(nn.Cell):
    """_TrainingChain from each convolution's raw weight and gain (DnnlConvGeluChainTrainStd and
    DnnlConvGeluChainBackwardStd): the weights standardized inside, straight into the layouts oneDNN reads,
    and their gradients taken back through the standardization straight from the layout oneDNN writes them
    in. The same floats as FusedWeightStandardization before _TrainingChain; what it saves are the passes
    over the weights between them: the forward's and the gradient's weight reorders (about 40 ms of F0's
    train step at b8 and 192 px on the Ice Lake, oneDNN's log), and the standardized weights MindSpore
    kept from the forward for the backward. `standardization`: one consts tensor per convolution, as
    FusedWeightStandardization's."""

    def __init__(self, geometry, consts, standardization):
        super().__init__()
        if len(geometry) != 4 or len(standardization) != 4:
            raise ValueError(f"the training chain takes 4 convolutions (a main path, the stem), not {len(geometry)}")
        self.geometry, self.consts, self.standardization = geometry, consts, standardization
        self.forward = _custom("DnnlConvGeluChainTrainStd", _chain_train_std_shapes,
                               lambda x, *_rest: (x,) * (len(geometry) + 1))
        self.backward = _custom("DnnlConvGeluChainBackwardStd", _chain_backward_std_shapes,
                                lambda x, *_rest: (x,) * (1 + 3 * len(geometry)))

    def construct(self, x, *weights_gains_biases):
        inputs = [x]
        for i, geo in enumerate(self.geometry):
            weight, gain, bias = weights_gains_biases[3 * i:3 * i + 3]
            inputs += [weight, gain, self.standardization[i], bias, geo]
        return self.forward(*inputs, self.consts)

    def bprop(self, x, w1, g1, b1, w2, g2, b2, w2b, g2b, b2b, w3, g3, b3, out, dout):
        inputs = _backward_activations(out, dout)
        for weight, gain, consts, geometry in zip((w1, w2, w2b, w3), (g1, g2, g2b, g3), self.standardization,
                                                   self.geometry):
            inputs += [weight, gain, consts, geometry]
        return self.backward(*inputs, self.consts)


class FusedConvGeluChain(nn.Cell):
    """conv -> gamma GELU -> conv -> ... -> conv in one oneDNN kernel, forward and backward: what an NF block's
    main path (conv1, conv2, conv2b, conv3 with their GELUs) computes.

    The convolutions are FusedConv2dSame's oneDNN primitives and the GELU its kernel's element, so the
    result equals the separate cells' bit for bit; but each activation passes to the next convolution in
    the blocked layout oneDNN computes in, instead of going out to NCHW and back in (F0 eval b8@256 on
    AVX-512: activation reorders were 96 ms of a 1.22 s step, oneDNN's log). In training the forward also
    returns the GELUs' inputs in that layout, and the backward runs the chain in reverse on them (the GELUs'
    outputs recomputed, not kept). `geometries`: (kernel size, stride, groups) per convolution; `gamma` and
    `gelu_form` the GELU's (activations.py).

    With `standardization` ((scale, eps, form) per convolution, as FusedWeightStandardization's), training
    takes each convolution's raw weight, gain and bias and standardizes inside
    (_StandardizingTrainingChain; `standardizes` says so); inference always takes standardized weights
    and biases.
    """

    def __init__(self, geometries, gamma, gelu_form="exact", standardization=None):
        super().__init__()
        self.geometries = tuple(tuple(int(v) for v in g) for g in geometries)
        self.gamma, self.gelu_form = float(gamma), gelu_form
        self.standardization = None if standardization is None else tuple(
            (float(scale), float(eps), form) for scale, eps, form in standardization)
        self.standardizes = self.standardization is not None
        self.geometry = [ops.zeros((k, k, stride, groups), ms.int32) for k, stride, groups in self.geometries]
        self.consts = Tensor([self.gamma, 1.0 if gelu_form == "tanh" else 0.0], ms.float32)
        self.chain = _custom("DnnlConvGeluChain", lambda *s: _chain_shapes(*s)[-1], lambda x, *_rest: x)
        if self.standardizes:
            ws_consts = [FusedWeightStandardization(scale, eps, form).consts for scale, eps, form in self.standardization]
            self.training_chain = _StandardizingTrainingChain(self.geometry, self.consts, ws_consts)
        else:
            self.training_chain = _TrainingChain(self.geometry, self.consts)

    def construct(self, x, *weights_and_biases):
        if self.training:
            return self.training_chain(x, *weights_and_biases)[0]
        return self.chain(*_chain_inputs(x, weights_and_biases, self.geometry), self.consts)

    def without_standardization(self):
        """This chain taking standardized weights in training too (a folded network's: deploy/fold.py)."""
        return type(self)(self.geometries, self.gamma, self.gelu_form)

    def __deepcopy__(self, memo):
        return type(self)(self.geometries, self.gamma, self.gelu_form, self.standardization)


if __name__ == "__main__":  # `python -m src.models.layers.cpu_kernels`: build now (make does)
    try:
        print(build())
    except _BUILD_ERRORS as err:
        print(f"warning: fused CPU kernels not built ({err}); the MindSpore-operator forms will be used",
              file=sys.stderr)
