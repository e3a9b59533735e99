"""timm reference networks with every parameter randomized, and their conversion (shared by the tests)."""
import numpy as np
import pytest

from live_weights import random_value

torch = pytest.importorskip("torch")
timm = pytest.importorskip("timm")


def timm_nano():
    """timm's NormFreeNet built from the same NfCfg as the project's dm_nfnet_nano."""
    from timm.models.nfnet import NfCfg, NormFreeNet

    cfg = NfCfg(depths=(1, 1, 1, 1), channels=(64, 128, 256, 256), stem_type="deep_quad", stem_chs=32,
                group_size=16, bottle_ratio=0.5, extra_conv=True, gamma_in_act=True, same_padding=True,
                skipinit=True, num_features=512, act_layer="gelu", attn_layer="se",
                attn_kwargs=dict(rd_ratio=0.5))
    return NormFreeNet(cfg, num_classes=10)


def randomize_(model, seed=0):
    """Give every tensor a random value (live_weights.random_value) so every residual branch and gain contributes."""
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.from_numpy(random_value(name, p.shape, rng)))
    return model.eval()


def export_timm(model, tmp_path, stem="timm"):
    """Save timm's state dict as .safetensors (what the timm hub publishes) and convert it."""
    from safetensors.torch import save_file

    from tools.convert_weights import convert

    st_path = str(tmp_path / f"{stem}.safetensors")
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, st_path)
    ckpt_path = str(tmp_path / f"{stem}.ckpt")
    convert(st_path, ckpt_path)
    return st_path, ckpt_path
