"""AMP: CPU falls back to O0 with a notice; on GPU/Ascend O2 keeps the SE gate and weight standardization in float32."""
import os
import subprocess
import sys

import pytest
import mindspore

from src.trainers.amp import prepare_amp

from .conftest import nano_net


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.timeout(900)
def test_mixed_precision_cases_pass_in_their_own_process():
    """amp_cases.py: O2/O3 cell precision, O2 logits, float32 weight standardization (see there why apart)."""
    cases = os.path.join(ROOT, "tests", "trainers", "amp_cases.py")
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", cases], cwd=ROOT,
                            capture_output=True, text=True, timeout=880)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "5 passed" in result.stdout and "skipped" not in result.stdout, result.stdout[-1000:]


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
