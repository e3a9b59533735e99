"""create_model: the single entry point scripts use to build a network."""
from .checkpoint import load_model_weights
from .layers import apply_fast_forms
from .registry import model_entrypoint


def create_model(name, num_classes=1000, drop_rate=0.0, drop_path_rate=0.0, drop_path_mode="deepmind",
                 in_chans=3, checkpoint_path=None, checkpoint_prefix="", finetune=False, load_report=None,
                 fast_forms=False, ws_form="timm", gelu_form="exact", checkpoint_weights=None):
    """Build a registered model and optionally load weights.

    Args:
        name: registered variant, e.g. "dm_nfnet_f0" (see list_models()).
        num_classes: classifier outputs.
        drop_rate: dropout before the classifier (F0: 0.2).
        drop_path_rate: stochastic-depth rate of the deepest block.
        drop_path_mode: "deepmind" (rate*i/N, no rescale) or "timm" (linspace, rescaled by 1/keep).
        in_chans: input channels.
        checkpoint_path: MindSpore .ckpt/.safetensors to load (a timm checkpoint converted by
            `python -m tools.convert_weights`).
        checkpoint_prefix: name prefix of the weights inside the checkpoint (e.g. "ema." for EMA weights).
        finetune: keep a freshly initialized classifier when the checkpoint's has another class count.
        load_report: dict filled with what was loaded and re-initialized (see load_model_weights).
        fast_forms: give the network this backend's fast forms (layers/fast_forms.py; which ones:
            layers/config.py) for training or evaluation in float32; False: the plain forms (export).
        ws_form: weight standardization, "timm" ((w - mean) / sqrt(var + 1e-5) * gain / sqrt(fan_in))
            or "deepmind" ((w - mean) * gain * rsqrt(max(fan_in * var, 1e-4))).
        gelu_form: "exact" (erf, timm's) or "tanh" (jax.nn.gelu's approximation, DeepMind's).
        checkpoint_weights: the checkpoint's read_checkpoint() when the caller has read it already.
    """
    network = model_entrypoint(name)(num_classes=num_classes, in_chans=in_chans, drop_rate=drop_rate,
                                     drop_path_rate=drop_path_rate, drop_path_mode=drop_path_mode,
                                     ws_form=ws_form, gelu_form=gelu_form)
    if checkpoint_path:
        load_model_weights(network, checkpoint_path, prefix=checkpoint_prefix, drop_head=finetune,
                           report=load_report, stored=checkpoint_weights)
    if fast_forms:
        apply_fast_forms(network)
    return network
