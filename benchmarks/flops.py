"""Multiply-accumulates of a network, counted layer by layer, and the FLOPs of a train or eval step.

Only convolutions and fully connected layers are counted (every matmul-shaped operation of an
NFNet; activations, weight standardization, pooling, the optimizer and EMA are elementwise or
reductions, a few percent of the FLOPs): one MAC per (output element x input element of its
window), ``prod(output shape) * in_channels / groups * kh * kw``. A MAC is 2 FLOPs; a train step
is counted as 3 forward passes (forward, then the input and weight gradients, each a matmul of
the forward's size: Kaplan et al. 2020, "Scaling laws", section 2.1), so train FLOPs =
6 x MACs x batch and eval FLOPs = 2 x MACs x batch.

The count runs a batch-1 forward pass with hooks that read each layer's output shape: timm's
model under PyTorch, ours in MindSpore's PyNative mode. Both must agree (the networks are the
same architecture); the bench records both and uses timm's.
"""
import math

FLOPS_PER_MAC = 2
TRAIN_PASSES = 3  # forward + input gradient + weight gradient


def layer_macs(output_shape, in_channels, groups=1, kernel_size=(1, 1)):
    """MACs of one convolution or fully connected layer from its output shape.

    ``output_shape``: (N, C_out, H, W) for a convolution, (N, C_out) for a linear layer.
    """
    if in_channels % groups:
        raise ValueError(f"in_channels {in_channels} not divisible by groups {groups}")
    return math.prod(output_shape) * (in_channels // groups) * math.prod(kernel_size)


def step_gflop(macs_per_image, batch, train):
    """GFLOP of one step: 6 x MACs x batch for training, 2 x MACs x batch for evaluation."""
    passes = TRAIN_PASSES if train else 1
    return FLOPS_PER_MAC * passes * macs_per_image * batch / 1e9


def summarize_layers(layers):
    """{macs, layers: count, by_kind: {kind: macs}} of ``[(name, kind, macs), ...]``."""
    by_kind = {}
    for _, kind, macs in layers:
        by_kind[kind] = by_kind.get(kind, 0) + macs
    return {"macs": sum(by_kind.values()), "layers": len(layers), "by_kind": by_kind}


def _pair(value):
    return tuple(value) if isinstance(value, (tuple, list)) else (value, value)


def count_torch(model, size):
    """[(name, kind, macs)] of one 3 x size x size image through a torch.nn.Module (timm's models)."""
    import torch

    layers, handles = [], []
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Conv2d):
            def hook(mod, _, out, name=name):
                layers.append((name, "conv", layer_macs(tuple(out.shape), mod.in_channels, mod.groups,
                                                        mod.kernel_size)))
        elif isinstance(module, torch.nn.Linear):
            def hook(mod, _, out, name=name):
                layers.append((name, "linear", layer_macs(tuple(out.shape), mod.in_features)))
        else:
            continue
        handles.append(module.register_forward_hook(hook))
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(torch.zeros(1, 3, size, size))
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)
    return layers


def count_mindspore(network, size):
    """[(name, kind, macs)] of one 3 x size x size image through the project's network.

    Runs the forward pass in PyNative mode (cell hooks fire only there) with the NF blocks' fused
    chains detached (a block's main path may be one fused kernel that no layer hook sees:
    layers/fast_forms.py; the MACs are the same), and restores both.
    """
    import mindspore as ms
    import numpy as np
    from mindspore import nn

    from src.models.layers.squeeze_excite import SqueezeExcite
    from src.models.layers.std_conv import ScaledStdConv2d

    layers, handles = [], []
    for name, cell in network.cells_and_names():
        if isinstance(cell, SqueezeExcite):
            # its fc1/fc2 are Conv2d cells for their parameters only: construct calls ops.dense on the weights
            def hook(c, _, out, name=name):
                batch, channels, reduced = out.shape[0], c.fc1.in_channels, c.fc1.out_channels
                layers.append((f"{name}.fc1", "conv", layer_macs((batch, reduced, 1, 1), channels)))
                layers.append((f"{name}.fc2", "conv", layer_macs((batch, channels, 1, 1), reduced)))
        elif isinstance(cell, ScaledStdConv2d):
            def hook(c, _, out, name=name):
                layers.append((name, "conv", layer_macs(tuple(out.shape), c.in_channels, c.groups,
                                                        _pair(c.kernel_size))))
        elif isinstance(cell, nn.Conv2d):
            def hook(c, _, out, name=name):
                layers.append((name, "conv", layer_macs(tuple(out.shape), c.in_channels, c.group,
                                                        _pair(c.kernel_size))))
        elif isinstance(cell, nn.Dense):
            def hook(c, _, out, name=name):
                layers.append((name, "linear", layer_macs(tuple(out.shape), c.in_channels)))
        else:
            continue
        handles.append(cell.register_forward_hook(hook))
    chains = {cell: cell.fused_chain for _, cell in network.cells_and_names()
              if getattr(cell, "fused_chain", None) is not None}
    mode = ms.get_context("mode")
    ms.set_context(mode=ms.PYNATIVE_MODE)
    try:
        for cell in chains:
            cell.fused_chain = None
        network(ms.Tensor(np.zeros((1, 3, size, size), np.float32)))
    finally:
        for handle in handles:
            handle.remove()
        for cell, chain in chains.items():
            cell.fused_chain = chain
        ms.set_context(mode=mode)
    return layers
