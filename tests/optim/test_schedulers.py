"""Learning-rate schedules against DeepMind's formulas (nfnets/optim.py), in numpy."""
import math

import numpy as np
import pytest

from src.optim.schedulers import create_scheduler, scale_lr


def deepmind_warmup_cosine(itr, start_val, min_val, max_val, num_steps, warmup_steps):
    """Transcription of WarmupCosineDecay.__call__ for one integer step."""
    warmup_val = (max_val - start_val) * (itr / warmup_steps) + start_val
    cos_itr = (itr - warmup_steps) / (num_steps - warmup_steps)
    cos_val = 0.5 * (max_val - min_val) * (1 + math.cos(math.pi * cos_itr)) + min_val
    return cos_val if warmup_steps < itr else warmup_val


def test_warmup_cosine_matches_deepmind_at_first_mid_warmup_end_of_warmup_middle_and_last_step():
    steps_per_epoch, epochs, warmup_epochs = 10, 20, 5
    lr, min_lr, warmup_lr = 1.6, 6e-7, 7e-7
    sched = create_scheduler(steps_per_epoch, "warmup_cosine", lr=lr, min_lr=min_lr,
                             warmup_epochs=warmup_epochs, warmup_lr=warmup_lr, epochs=epochs)
    total, warmup = epochs * steps_per_epoch, warmup_epochs * steps_per_epoch
    assert sched.dtype == np.float32 and sched.shape == (total,)
    for step in (0, warmup // 2, warmup - 1, warmup, warmup + 1, (warmup + total) // 2, total - 1):
        ref = deepmind_warmup_cosine(step, warmup_lr, min_lr, lr, total, warmup)
        # float32 rounding only: max relative diff measured 3.5e-8 (5.5e-8 over all steps)
        assert sched[step] == pytest.approx(ref, rel=5e-7, abs=1e-12), step
    assert sched[0] == pytest.approx(warmup_lr)
    assert sched[warmup] == pytest.approx(lr)
    assert sched[(warmup + total) // 2] == pytest.approx((lr + min_lr) / 2, rel=1e-6)
    assert min_lr < sched[-1] < min_lr + 1e-3  # min_lr is reached at step `total`, never taken
    assert np.all(np.diff(sched[:warmup + 1]) > 0) and np.all(np.diff(sched[warmup:]) <= 0)


def test_warmup_cosine_without_warmup_starts_at_the_peak():
    sched = create_scheduler(4, "warmup_cosine", lr=0.1, min_lr=0.0, warmup_epochs=0, epochs=3)
    expected = [0.5 * 0.1 * (1 + math.cos(math.pi * t / 12)) for t in range(12)]
    np.testing.assert_allclose(sched, expected, rtol=5e-7)  # float32 rounding: measured 4.6e-8


def test_multistep_divides_by_gamma_at_each_milestone_epoch_after_warmup():
    sched = create_scheduler(2, "multistep", lr=0.4, warmup_epochs=1, warmup_lr=0.0, epochs=6,
                             milestones=[2, 4], gamma=0.5)
    np.testing.assert_allclose(sched, [0.0, 0.2, 0.4, 0.4, 0.2, 0.2, 0.2, 0.2, 0.1, 0.1, 0.1, 0.1],
                               rtol=5e-7)  # measured 1.5e-8


def test_exponential_decays_once_per_epoch_after_warmup():
    sched = create_scheduler(2, "exponential", lr=1.0, warmup_epochs=1, warmup_lr=0.5, epochs=4,
                             gamma=0.9)
    np.testing.assert_allclose(sched, [0.5, 0.75, 1.0, 1.0, 0.9, 0.9, 0.81, 0.81], rtol=5e-7)  # measured 2.7e-8


def test_constant_with_warmup():
    sched = create_scheduler(4, "constant", lr=0.2, warmup_epochs=0.5, warmup_lr=0.1, epochs=2)
    np.testing.assert_allclose(sched, [0.1, 0.15] + [0.2] * 6, rtol=5e-7)  # measured 4.0e-8


def test_scale_lr_counts_accumulation_once_in_the_global_batch():
    per_device, devices, accumulation = 128, 8, 2
    global_batch = per_device * devices * accumulation
    assert scale_lr(0.1, global_batch) == pytest.approx(0.1 * 2048 / 256)  # 0.8, not 1.6
    assert scale_lr(0.1, 4096) == pytest.approx(1.6)  # the paper's peak lr


def test_create_scheduler_rejects_unknown_names_and_bad_lengths():
    with pytest.raises(ValueError, match="warmup_cosine, multistep, exponential, constant"):
        create_scheduler(10, "cosine_restarts", lr=0.1, epochs=2)
    with pytest.raises(ValueError, match="warmup_epochs"):
        create_scheduler(10, "warmup_cosine", lr=0.1, warmup_epochs=3, epochs=2)
    with pytest.raises(ValueError, match="milestones"):
        create_scheduler(10, "multistep", lr=0.1, epochs=2)
