"""The pass that gives a built network its backend's fast forms (config.py says which).

Every layer holds its backend-sensitive arithmetic in a small parameter-free cell (the
convolution and the weight standardization of ScaledStdConv2d, GammaAct itself and the
blocks' PreActivation, MulRows in SqueezeExcite and DropPath, SqueezeHW, DenseAct and MulRowsAdd in
SqueezeExcite, AvgPool2x2Same in the transition blocks' shortcut). Here each is replaced in place by a
subclass that computes the same function faster on this backend; parameters, their names and checkpoints are
untouched. train.py and eval.py build their network with it (src/builders.py); export.py
only for --conv_impl fused_cpu (a MINDIR for this machine's CPU), so exported models hold the
plain forms unless asked for by that name.
"""
from .activations import GammaAct, PreActivation, ScaledGELU, ScaledTanhGELU
from .config import active_forms
from .conv2d_same import Conv2dSame, Im2ColConv2dSame
from .replace import replace_cells
from .pooling import AvgPool2x2Same
from .rowwise import MulRows, MulRowsAdd, SqueezeHW
from .squeeze_excite import DenseAct
from .std_conv import WeightStandardization


def _every(_cell):
    return True


def _is_gelu(act):
    return act.act_type == "gelu"


def _operator_gelu(act):
    return ScaledTanhGELU(act.gamma) if act.gelu_form == "tanh" else ScaledGELU(act.gamma)


def _swaps(forms):
    """[(plain cell type, which of them, its fast form)] for `forms`."""
    if not forms.cpu_operators and not forms.fused_kernels:
        return []
    if not forms.fused_kernels:
        return [(Conv2dSame, _every, lambda c: Im2ColConv2dSame(c.kernel_size, c.stride, c.groups)),
                (GammaAct, _is_gelu, _operator_gelu)]
    from . import cpu_kernels as k

    swaps = [(WeightStandardization, _every, lambda c: k.FusedWeightStandardization(c.scale, c.eps, c.form,
                                                                                         c.fan_in)),
             (MulRows, _every, lambda c: k.FusedMulRows()),
             (SqueezeHW, _every, lambda c: k.FusedSqueezeHW())]
    if forms.cpu_operators:
        swaps += [(Conv2dSame, _every, lambda c: k.FusedConv2dSame(c.kernel_size, c.stride, c.groups)),
                  (GammaAct, _is_gelu, lambda c: k.FusedScaledGELU(c.gamma, c.gelu_form)),
                  (PreActivation, lambda c: _is_gelu(c.act),
                   lambda c: k.FusedPreActivation(c.act.gamma, c.act.gelu_form, c.shortcut_reads_input)),
                  (MulRowsAdd, _every, lambda c: k.FusedMulRowsAdd()),
                  (AvgPool2x2Same, _every, lambda c: k.FusedAvgPool2x2Same()),
                  (DenseAct, _every, lambda c: k.FusedDenseAct(c.act))]
    return swaps


def _chain_of(cell):
    """The fused chain for a cell with `chain_parts()` (an NF block, the stem), or None where the kernel
    cannot take it: every convolution on oneDNN, one GELU between them, no padded blocked layout
    for its input or between them (channels a multiple of 16, oneDNN's widest block, or the stem's 3
    image channels, which oneDNN reads in a plain layout)."""
    from . import cpu_kernels as k

    convs, acts = cell.chain_parts()
    fused = [getattr(c, "conv", None) for c in convs]
    if not all(isinstance(f, k.FusedConv2dSame) and f.use_dnnl for f in fused):
        return None
    if not all(type(a) is k.FusedScaledGELU and (a.gamma, a.gelu_form) == (acts[0].gamma, acts[0].gelu_form)
               for a in acts):
        return None
    if (convs[0].in_channels != 3 and convs[0].in_channels % 16) or any(c.out_channels % 16 for c in convs[:-1]):
        return None
    standardize = [getattr(c, "standardize", None) for c in convs]
    standardization = ([(ws.scale, ws.eps, ws.form) for ws in standardize]
                       if all(type(ws) is k.FusedWeightStandardization for ws in standardize) else None)
    return k.FusedConvGeluChain([(f.kernel_size, f.stride, f.groups) for f in fused], acts[0].gamma, acts[0].gelu_form,
                                standardization)


def apply_fast_forms(network, forms=None):
    """Swap the plain forms of `network` (in place) for `forms` (default: config.active_forms()).

    Returns the number of cells swapped or added. Only cells still in their plain form are swapped,
    so applying it twice changes nothing. With the fused kernels, each NF block also gets its main
    path as one kernel, forward and backward (`fused_chain`).
    """
    forms = active_forms() if forms is None else forms
    count = 0
    for plain, which, fast in _swaps(forms):
        count += replace_cells(network, lambda c, plain=plain, which=which: type(c) is plain and which(c),
                               lambda _name, c, fast=fast: fast(c))
    if forms.fused_kernels and forms.cpu_operators:
        for _name, cell in list(network.cells_and_names()):
            if hasattr(cell, "chain_parts") and cell.fused_chain is None:
                cell.fused_chain = _chain_of(cell)
                count += cell.fused_chain is not None
    return count


# each fast form's plain cell, made from the fast form's attributes (apply_plain_forms)
_PLAIN = [(GammaAct, lambda c: GammaAct(c.act_type, c.gamma, c.gelu_form)),
          (PreActivation, lambda c: PreActivation(GammaAct(c.act.act_type, c.act.gamma, c.act.gelu_form),
                                                  c.shortcut_reads_input)),
          (WeightStandardization, lambda c: WeightStandardization(c.scale, c.eps, c.form, c.fan_in)),
          (Conv2dSame, lambda c: Conv2dSame(c.kernel_size, c.stride, c.groups)),
          (MulRows, lambda c: MulRows()), (MulRowsAdd, lambda c: MulRowsAdd()), (SqueezeHW, lambda c: SqueezeHW()),
          (AvgPool2x2Same, lambda c: AvgPool2x2Same()), (DenseAct, lambda c: DenseAct(c.act))]


def apply_plain_forms(network):
    """Undo apply_fast_forms on `network` (in place): every fast form back to its plain cell, no fused
    main paths. Returns the number of cells changed. An export of a network built with fast forms
    (deploy/export.py) then holds operators every runtime has, not this machine's kernels."""
    count = 0
    for _name, cell in list(network.cells_and_names()):
        if getattr(cell, "fused_chain", None) is not None:
            cell.fused_chain = None
            count += 1
    for plain, make in _PLAIN:
        count += replace_cells(network, lambda c, plain=plain: isinstance(c, plain) and type(c) is not plain,
                               lambda _name, c, make=make: make(c))
    return count
