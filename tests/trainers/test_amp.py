"""AMP: CPU falls back to O0 with a notice; on GPU/Ascend O2 keeps the SE gate in float32."""
import os
import subprocess
import sys

import numpy as np
import pytest
import mindspore
from mindspore import Tensor

from src.models.layers import ScaledStdConv2d, SqueezeExcite
from src.trainers.amp import apply_mixed_precision, prepare_amp

from .conftest import images_and_labels, nano_net


# Applying mindspore.amp to a network changes state that outlives it in the process (later
# float32 trainings in the same process lost precision and hit null device pointers), so the
# cases that apply it run in a process of their own.
IN_OWN_PROCESS = os.environ.get("NFNET_AMP_OWN_PROCESS") == "1"
own_process = pytest.mark.skipif(not IN_OWN_PROCESS, reason="runs in its own process (see below)")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.timeout(600)
@pytest.mark.skipif(IN_OWN_PROCESS, reason="this is the outer run")
def test_mixed_precision_cases_pass_in_their_own_process():
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", os.path.abspath(__file__),
                             "-k", "low_precision_except or close_to_the_float32"], cwd=ROOT, capture_output=True,
                            text=True, timeout=580, env=dict(os.environ, NFNET_AMP_OWN_PROCESS="1"))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "3 passed" in result.stdout, result.stdout[-1000:]


@pytest.mark.parametrize("level", ["O1", "O2", "O3"])
def test_low_precision_levels_fall_back_to_o0_on_cpu_with_a_notice(level, capsys):
    net = nano_net()
    assert prepare_amp(net, level, "CPU") is net
    assert f"amp_level {level} is not used on CPU" in capsys.readouterr().out
    assert all(not c.get_flags().get("fp16") for _, c in net.cells_and_names())


def test_o0_is_the_network_itself_without_a_notice(capsys):
    net = nano_net()
    assert prepare_amp(net, "O0", "GPU") is net
    assert capsys.readouterr().out == ""
    with pytest.raises(ValueError, match="amp_level"):
        prepare_amp(net, "O4", "GPU")


def _precision(network):
    """cell type name -> set of flags ("fp16"/"fp32"/"bf16") set on cells of that type."""
    found = {}
    for _, cell in network.cells_and_names():
        flags = {k for k, v in cell.get_flags().items() if k in ("fp16", "fp32", "bf16") and v}
        found.setdefault(type(cell).__name__, set()).update(flags)
    return found


@own_process
@pytest.mark.timeout(200)
@pytest.mark.parametrize("level,dtype,flag", [("O2", mindspore.float16, "fp16"),
                                              ("O3", mindspore.bfloat16, "bf16")])
def test_o2_o3_network_is_low_precision_except_squeeze_excite_and_keeps_parameter_names(
        level, dtype, flag):
    net = nano_net()
    names = [p.name for p in net.get_parameters()]
    amp_net = apply_mixed_precision(net, level, dtype)  # what prepare_amp does on GPU/Ascend
    precision = _precision(amp_net)
    assert precision[ScaledStdConv2d.__name__] == {flag}
    assert precision["Dense"] == {flag}
    assert precision[SqueezeExcite.__name__] == {"fp32"}
    assert precision["Conv2d"] == {"fp32"}  # the SE's fc1/fc2, the only plain convs
    assert [p.name for p in amp_net.get_parameters()] == names
    assert all(p.dtype == mindspore.float32 for p in amp_net.get_parameters())


@own_process
@pytest.mark.timeout(200)
def test_o2_network_runs_on_cpu_with_float32_logits_close_to_the_float32_network(monkeypatch):
    # Only a forward pass: MindSpore 2.10 has float16 CPU kernels for it. The convolutions use
    # the native kernel, as on GPU/Ascend where O2 runs (the CPU im2col path stays float32).
    import src.models.layers.std_conv as std_conv

    monkeypatch.setattr(std_conv, "default_conv_impl", lambda: "native")
    reference = nano_net()
    amp_net = apply_mixed_precision(nano_net(), "O2", mindspore.float16)
    x, _ = images_and_labels(2)
    expected = reference(Tensor(x)).asnumpy()
    logits = amp_net(Tensor(x))
    assert logits.dtype == mindspore.float32
    # measured: max abs diff 2.1e-4 on logits of magnitude 0.023 (float16 rounding)
    np.testing.assert_allclose(logits.asnumpy(), expected, atol=1e-3)
    assert np.abs(logits.asnumpy() - expected).max() > 0  # float16 really was used
