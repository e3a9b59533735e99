"""create_model(checkpoint_path=...) loads exactly, or says precisely what does not fit."""
import mindspore as ms
import numpy as np
import pytest

from src.models import CheckpointError, create_model


def _save(net, path, prefix=""):
    ms.save_checkpoint([{"name": prefix + n, "data": p.value()} for n, p in net.parameters_and_names()], path)


def test_weights_load_exactly_and_training_state_is_ignored(tmp_path):
    ms.set_seed(1)
    src = create_model("dm_nfnet_nano", num_classes=10)
    path = str(tmp_path / "a.ckpt")
    entries = [{"name": n, "data": p.value()} for n, p in src.parameters_and_names()]
    entries += [{"name": "momentum.head.fc.weight", "data": ms.Tensor(np.ones((10, 512), np.float32))},
                {"name": "global_step", "data": ms.Tensor(np.array([7], np.int32))}]
    ms.save_checkpoint(entries, path)
    ms.set_seed(2)
    dst = create_model("dm_nfnet_nano", num_classes=10, checkpoint_path=path)
    for (n, a), (_, b) in zip(src.parameters_and_names(), dst.parameters_and_names()):
        assert np.array_equal(a.asnumpy(), b.asnumpy()), n


def test_ema_weights_load_through_their_prefix(tmp_path):
    src = create_model("dm_nfnet_nano", num_classes=10)
    path = str(tmp_path / "ema.ckpt")
    _save(src, path, prefix="ema.")
    dst = create_model("dm_nfnet_nano", num_classes=10, checkpoint_path=path, checkpoint_prefix="ema.")
    assert np.array_equal(src.head.fc.weight.asnumpy(), dst.head.fc.weight.asnumpy())
    with pytest.raises(CheckpointError, match="holds no weights for this network"):
        create_model("dm_nfnet_nano", num_classes=10, checkpoint_path=path)


def test_other_class_count_needs_finetune_and_then_keeps_a_fresh_head(tmp_path):
    path = str(tmp_path / "a.ckpt")
    src = create_model("dm_nfnet_nano", num_classes=10)
    _save(src, path)
    with pytest.raises(CheckpointError) as err:
        create_model("dm_nfnet_nano", num_classes=7, checkpoint_path=path)
    msg = str(err.value)
    assert "2 mis-shaped" in msg and "head.fc.weight: checkpoint (10, 512) vs model (7, 512)" in msg
    assert "--finetune" in msg and "\n" not in msg
    net = create_model("dm_nfnet_nano", num_classes=7, checkpoint_path=path, finetune=True)
    assert net.head.fc.weight.shape == (7, 512)
    assert np.array_equal(net.stem.conv1.weight.asnumpy(), src.stem.conv1.weight.asnumpy())


def test_checkpoint_of_another_arch_lists_missing_and_unexpected(tmp_path):
    path = str(tmp_path / "nano.ckpt")
    _save(create_model("dm_nfnet_nano", num_classes=10), path)
    from mindspore.nn.utils import no_init_parameters

    with no_init_parameters():
        f0 = create_model("dm_nfnet_f0", num_classes=10)
    from src.models import load_model_weights

    with pytest.raises(CheckpointError) as err:
        load_model_weights(f0, path)
    msg = str(err.value)
    assert "136 missing (stages.1.1." in msg and "92 mis-shaped" in msg and "\n" not in msg


def test_missing_and_unreadable_files_give_one_line_errors(tmp_path):
    with pytest.raises(CheckpointError, match="checkpoint not found: .*none.ckpt"):
        create_model("dm_nfnet_nano", checkpoint_path=str(tmp_path / "none.ckpt"))
    junk = tmp_path / "junk.ckpt"
    junk.write_bytes(b"\x00not a checkpoint" * 10)
    with pytest.raises(CheckpointError) as err:
        create_model("dm_nfnet_nano", checkpoint_path=str(junk))
    assert "is not a readable MindSpore checkpoint" in str(err.value)
    assert "\n" not in str(err.value)
