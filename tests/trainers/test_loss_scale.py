"""Loss scaling: unscaled updates, overflow skipping and counting, the dynamic scale."""
import numpy as np
import pytest
from mindspore import Tensor

from src.trainers.loss import create_loss
from src.optim.optimizer import create_optimizer
from src.trainers.train_step import create_train_step

from .conftest import images_and_labels, max_rel_diff, tiny_net, weights


def _step(initial=None, **options):
    net = tiny_net()
    if initial is not None:
        for p in net.get_parameters():
            p.set_data(Tensor(initial[p.name]))
    opt = create_optimizer(net, "sgd_agc", lr=0.5, weight_decay=1e-3, clipping=0.05)
    step = create_train_step(net, create_loss("ce"), opt, **options)
    step.set_train()
    return step, net, opt


def _batches(n, with_inf=()):
    x, y = images_and_labels(4 * n, size=8, num_classes=5, seed=1)
    batches = []
    for i in range(n):
        xb = x[4 * i:4 * i + 4].copy()
        if i in with_inf:
            xb[0, 0, 0, 0] = np.inf
        batches.append((Tensor(xb), Tensor(y[4 * i:4 * i + 4])))
    return batches


def _state(step):
    return (float(step.loss_scale.asnumpy()), int(step.overflow.asnumpy()),
            int(step.overflow_count.asnumpy()))


@pytest.mark.timeout(200)
def test_fixed_loss_scale_1024_gives_the_same_updates_as_no_scaling(mode):
    initial = weights(tiny_net())
    runs = []
    for scale in (1.0, 1024.0):
        step, net, _ = _step(initial, loss_scale=scale)
        losses = [float(step(x, y).asnumpy()) for x, y in _batches(3)]
        runs.append((losses, weights(net)))
    (losses_1, w_1), (losses_1024, w_1024) = runs
    np.testing.assert_array_equal(losses_1, losses_1024)  # the reported loss is unscaled
    rel, name = max_rel_diff(w_1024, w_1)
    # measured: 0 (bitwise equal: scaling by a power of two and back is exact in float32)
    assert rel < 1e-6, (name, rel)
    assert max_rel_diff(w_1, initial)[0] > 1e-3


@pytest.mark.timeout(200)
def test_non_finite_input_skips_the_update_counts_it_and_halves_the_dynamic_scale(mode):
    step, net, opt = _step(loss_scale=1024.0, dynamic_loss_scale=True, loss_scale_factor=2.0,
                           ema=0.9)
    good, bad, good_again = _batches(3, with_inf=(1,))
    step(*good)
    before = weights(step)
    assert _state(step) == (1024.0, 0, 0)

    loss = step(*bad)
    assert not np.isfinite(loss.asnumpy())
    after = weights(step)
    scaler_state = ("overflow", "overflow_count", "loss_scale", "loss_scale_good_steps")
    unchanged = [n for n in before if n not in scaler_state]
    for name in unchanged:  # weights, momenta, global_step, EMA and its counter
        np.testing.assert_array_equal(after[name], before[name], err_msg=name)
    assert _state(step) == (512.0, 1, 1)

    step(*good_again)
    assert _state(step) == (512.0, 0, 1)
    assert int(opt.global_step.asnumpy()[0]) == 2
    assert int(step.ema.num_updates.asnumpy()) == 2


@pytest.mark.timeout(200)
def test_loss_scale_that_overflows_float32_gradients_is_skipped_then_lowered_to_a_finite_one(mode):
    # Inputs x100 give a largest gradient of 3.4 (measured), so at 2^127 the scaled
    # gradient is inf in float32 while the scaled loss (1.7 * 2^127) is still finite.
    x, y = _batches(1)[0]
    x = Tensor(x.asnumpy() * 100.0)
    initial = weights(tiny_net())
    step, net, opt = _step(initial, loss_scale=2.0 ** 127, dynamic_loss_scale=True,
                           loss_scale_factor=2.0 ** 8)
    loss = float(step(x, y).asnumpy())
    assert np.isfinite(loss) and 1.5 < loss < 2.0  # the unscaled loss (1.72 measured)
    assert _state(step) == (2.0 ** 119, 1, 1)
    assert int(opt.global_step.asnumpy()[0]) == 0
    assert all(np.array_equal(p.asnumpy(), initial[p.name]) for p in net.get_parameters())

    step(x, y)  # 2^119 * 3.4 is finite: applied
    assert _state(step) == (2.0 ** 119, 0, 1)
    assert int(opt.global_step.asnumpy()[0]) == 1
    unscaled, unscaled_net, _ = _step(initial)
    unscaled(x, y)
    rel, name = max_rel_diff(weights(net), weights(unscaled_net))
    # measured: 0 (a power-of-two scale is undone exactly)
    assert rel < 1e-6, (name, rel)


@pytest.mark.timeout(200)
def test_dynamic_scale_doubles_after_window_finite_steps_and_restarts_the_count_on_overflow():
    step, _, _ = _step(loss_scale=8.0, dynamic_loss_scale=True, loss_scale_factor=2.0,
                       loss_scale_window=2)
    scales = []
    for x, y in _batches(6, with_inf=(3,)):
        step(x, y)
        scales.append(float(step.loss_scale.asnumpy()))
    # finite, finite (x2), finite, overflow (/2), finite, finite (x2)
    assert scales == [8.0, 16.0, 16.0, 8.0, 8.0, 16.0]
    assert int(step.overflow_count.asnumpy()) == 1


@pytest.mark.timeout(200)
def test_an_overflowing_micro_batch_drops_its_whole_accumulation_window(mode):
    initial = weights(tiny_net())
    batches = _batches(4, with_inf=(0,))
    step, net, opt = _step(initial, accumulation_step=2)
    step(*batches[0])
    step(*batches[1])  # window 1: one micro-batch overflowed -> no update
    assert int(opt.global_step.asnumpy()[0]) == 0
    assert all(np.array_equal(p.asnumpy(), initial[p.name]) for p in net.get_parameters())
    assert (int(step.overflow.asnumpy()), int(step.overflow_count.asnumpy())) == (1, 1)
    assert all(not b.asnumpy().any() for b in step.update.accum_grads)
    step(*batches[2])
    step(*batches[3])  # window 2 is clean: one update, the same as on a fresh trainer
    assert int(opt.global_step.asnumpy()[0]) == 1
    assert int(step.overflow.asnumpy()) == 0

    fresh, fresh_net, _ = _step(initial, accumulation_step=2)
    fresh(*batches[2])
    fresh(*batches[3])
    rel, name = max_rel_diff(weights(net), weights(fresh_net))
    assert rel == 0.0, (name, rel)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("scale", [1000.0, 1024.0])
def test_unscale_folded_into_the_fused_sgd_agc_kernel_gives_the_same_bits(mode, fused_kernels, scale):
    """GradientUpdate.fold_unscale (the fused kernel multiplies by 1 / scale, the overflow check reads
    the scaled gradients) against unscaling first: weights, momenta and EMA bitwise equal, real
    MindSpore on CPU, three steps at a scale that is not a power of two (1000) and one that is."""
    initial = weights(tiny_net())
    runs = []
    for fold in (True, False):
        step, net, _ = _step(initial, loss_scale=scale, dynamic_loss_scale=True, ema=0.9)
        assert step.update.fold_unscale  # sgd_agc with the fused kernel, one device, no accumulation
        step.update.fold_unscale = fold
        losses = [float(step(x, y).asnumpy()) for x, y in _batches(3)]
        runs.append((losses, weights(step)))
    (losses_folded, folded), (losses_plain, plain) = runs
    assert losses_folded == losses_plain
    assert max_rel_diff(folded, initial)[0] > 1e-3  # the steps moved the weights
    for name in plain:
        np.testing.assert_array_equal(folded[name], plain[name], err_msg=name)


@pytest.mark.timeout(300)
def test_folded_unscale_still_skips_an_overflowing_step(fused_kernels):
    """With the unscale folded, an inf gradient (scaled) is still caught by the one-launch check."""
    step, net, opt = _step(loss_scale=1000.0, dynamic_loss_scale=True)
    assert step.update.fold_unscale
    good, bad = _batches(2, with_inf=(1,))
    step(*good)
    before = weights(net)
    step(*bad)
    assert _state(step) == (500.0, 1, 1)
    for name, value in weights(net).items():
        np.testing.assert_array_equal(value, before[name], err_msg=name)


@pytest.mark.timeout(300)
def test_ema_folded_into_the_fused_sgd_agc_kernel_gives_the_same_bits(mode, fused_kernels):
    """GradientUpdate.fold_ema (the SGD-AGC kernel updates each EMA average right after its weight)
    against the separate EMA kernel pass: weights, momenta, averages and the EMA counter bitwise
    equal after three steps; real MindSpore on CPU."""
    initial = weights(tiny_net())
    runs = []
    for fold in (True, False):
        step, _, _ = _step(initial, loss_scale=1000.0, dynamic_loss_scale=True, ema=0.9)
        assert step.update.fold_ema  # a fused EMA of exactly the optimizer's weights
        step.update.fold_ema = fold
        for x, y in _batches(3):
            step(x, y)
        runs.append(weights(step))
    folded, plain = runs
    assert int(folded["ema_num_updates"]) == 3
    averages = {name: value for name, value in folded.items() if name.startswith("ema.")}
    assert max_rel_diff(averages, {name: initial[name[len("ema."):]] for name in averages})[0] > 1e-4  # moved
    for name in plain:
        np.testing.assert_array_equal(folded[name], plain[name], err_msg=name)
