"""EMA of the weights against a numpy transcription of DeepMind's tf1_ema (nfnets/utils.py)."""
import numpy as np
import pytest
import mindspore
from mindspore import Tensor

from src.models import create_model
from src.trainers.loss import create_loss
from src.optim.optimizer import create_optimizer
from src.trainers.ema import EMA, copy_ema_to, ema_weights_applied
from src.trainers.train_step import create_train_step

from .conftest import images_and_labels, max_rel_diff, nano_net, tiny_net, weights


def deepmind_ema(ema_value, current_value, decay, step, warmup=True):
    """tf1_ema: decay = min(decay, (1 + step) / (10 + step)); without warm-up: decay."""
    if warmup:
        decay = np.minimum(decay, (1.0 + step) / (10.0 + step))
    return ema_value * decay + current_value * (1 - decay)


def _train_recording_weights(decay, warmup=True, steps=4, accumulation_step=1):
    """Train the tiny net with an EMA; return the cell and the weights after each update."""
    net = tiny_net()
    opt = create_optimizer(net, "sgd_agc", lr=0.5, clipping=0.05)
    step = create_train_step(net, create_loss("ce"), opt,
                             ema=EMA(net.get_parameters(), decay=decay, warmup=warmup),
                             accumulation_step=accumulation_step)
    step.set_train()
    x, y = images_and_labels(4 * steps * accumulation_step, size=8, num_classes=5, seed=2)
    history = [weights(net)]
    for i in range(steps * accumulation_step):
        step(Tensor(x[4 * i:4 * i + 4]), Tensor(y[4 * i:4 * i + 4]))
        if (i + 1) % accumulation_step == 0:
            history.append(weights(net))
    return step, history


def _ema_weights(step):
    return {n[len("ema."):]: v for n, v in weights(step).items() if n.startswith("ema.")}


def _reference(history, decay, warmup=True):
    ema = {n: v.astype(np.float64) for n, v in history[0].items()}
    for t, current in enumerate(history[1:]):  # t = 0 for the first update, as in jaxline
        ema = {n: deepmind_ema(ema[n], current[n], decay, t, warmup) for n in ema}
    return ema


@pytest.mark.timeout(200)
@pytest.mark.parametrize("kernels", ["fused_kernels", "operator_forms"])
@pytest.mark.parametrize("warmup", [True, False])
def test_ema_follows_deepmind_warmup_formula_over_four_optimizer_steps(mode, warmup, kernels, request):
    # fused_kernels: the optimizer and the EMA update the weights in place (cpu_kernels.cc)
    request.getfixturevalue(kernels)
    # decay 0.2: with warm-up, steps 0 and 1 use (1+t)/(10+t) = 0.1 and 0.18, steps 2 and 3
    # use 0.2 (the min switches branch); without warm-up all four use 0.2
    ema = EMA(tiny_net().get_parameters(), decay=0.2, warmup=warmup)
    assert abs(float(ema.current_decay().asnumpy()) - (0.1 if warmup else 0.2)) < 1e-7

    step, history = _train_recording_weights(0.2, warmup, steps=4)
    assert (step.ema.update_kernel is not None) == (kernels == "fused_kernels")
    ours = _ema_weights(step)
    assert sorted(ours) == sorted(history[0])
    ref = _reference(history, 0.2, warmup)
    rel, name = max_rel_diff(ours, ref)
    # measured: 4.5e-8 (warm-up) / 3.9e-8 (constant), float32 against float64, both modes
    assert rel < 5e-7, (name, rel)
    assert int(step.ema.num_updates.asnumpy()) == 4
    # the EMA lags behind the weights: it is not simply the last weights
    assert max_rel_diff(ours, history[-1])[0] > 1e-3


@pytest.mark.timeout(200)
def test_ema_updates_once_per_optimizer_step_with_accumulation():
    step, history = _train_recording_weights(0.5, steps=3, accumulation_step=2)
    assert int(step.ema.num_updates.asnumpy()) == 3
    rel, name = max_rel_diff(_ema_weights(step), _reference(history, 0.5))
    assert rel < 5e-7, (name, rel)  # measured 5.8e-8


@pytest.mark.timeout(200)
def test_ema_weights_load_with_create_model_prefix_and_swap_in_for_evaluation(tmp_path):
    net = nano_net()
    opt = create_optimizer(net, "sgd_agc", lr=0.5, clipping=0.05)
    step = create_train_step(net, create_loss("ce"), opt, ema=0.5)
    step.set_train()
    x, y = images_and_labels(4)
    step(Tensor(x), Tensor(y))
    trained = weights(net)
    ema = _ema_weights(step)
    assert max_rel_diff(ema, trained)[0] > 1e-4

    path = str(tmp_path / "train_step.ckpt")
    mindspore.save_checkpoint(step, path)
    loaded = create_model("dm_nfnet_nano", num_classes=10, checkpoint_path=path,
                          checkpoint_prefix="ema.")
    assert max_rel_diff(weights(loaded), ema) == (0.0, None)
    plain = create_model("dm_nfnet_nano", num_classes=10, checkpoint_path=path)
    assert max_rel_diff(weights(plain), trained) == (0.0, None)

    with ema_weights_applied(step, net):
        assert max_rel_diff(weights(net), ema) == (0.0, None)
    assert max_rel_diff(weights(net), trained) == (0.0, None)
    other = nano_net(seed=5)
    copy_ema_to(step.ema, other)
    assert max_rel_diff(weights(other), ema) == (0.0, None)
