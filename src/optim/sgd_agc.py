"""SGD with Nesterov momentum and adaptive gradient clipping (AGC).

Brock, De, Smith, Simonyan 2021, "High-Performance Large-Scale Image
Recognition Without Normalization", section 4. For every parameter W with
gradient G, one norm per output unit i (a row of a dense weight, one output
filter of a conv):

    max_norm_i = clipping * max(||W_i||, eps)
    G_i <- G_i * max_norm_i / max(||G_i||, 1e-6)    where ||G_i|| > max_norm_i

then, as in DeepMind's nfnets/optim.py (SGD_AGC), weight decay is added to
the clipped gradient and Nesterov momentum is applied:

    g   = clip(G) + wd * W          (wd only for decayed parameters)
    buf = momentum * buf + g
    W   = W - lr * (g + momentum * buf)    (Nesterov; plain momentum: W - lr * buf)
"""
import mindspore
from mindspore import Tensor, nn, ops
from mindspore.ops import composite as C

from src.models.layers.config import fused_update_kernel
from src.models.layers.rowwise import mul_rows, rowwise

__all__ = ["unitwise_norm", "adaptive_clip_grad", "SGDAGC",
           "DEFAULT_NO_DECAY_KEYS", "DEFAULT_AGC_EXCLUDE"]

# DeepMind's parameter groups: gains and biases (skipinit_gain included) are not
# decayed; the classifier weight is not clipped (its bias still is).
DEFAULT_NO_DECAY_KEYS = ("gain", "bias")
DEFAULT_AGC_EXCLUDE = ("head.fc.weight",)


def _is_vector_like(shape):
    """True for scalars and for tensors that are vectors once size-1 axes are squeezed."""
    return len([d for d in shape if d != 1]) <= 1


def unitwise_norm(x):
    """Euclidean norm of each output unit of ``x``.

    - Scalars and tensors that are vectors after squeezing (biases, the
      skipinit gain, and our (out, 1, 1, 1) conv gains): the norm of the whole
      tensor, a scalar. DeepMind stores gains as (out,) vectors and takes their
      whole-tensor norm; squeezing first gives our 4-D gains the same norm.
    - Everything else: one norm per output unit, over every axis but the first,
      kept as size-1 axes so it broadcasts against ``x``. MindSpore (like
      PyTorch) stores conv kernels as (out, in, kh, kw) and dense weights as
      (out, in), so the output unit is axis 0 and the reduction is over axes
      (1, 2, 3) or (1,). DeepMind's JAX kernels are HWIO / (in, out) and reduce
      over (0, 1, 2) / (0,): the same units, transposed layout.
    """
    if _is_vector_like(x.shape):
        return ops.sqrt(ops.sum(ops.square(x.reshape(-1))))
    # summed over the last axis of the (out, -1) view: MindSpore's CPU reduction over several
    # axes is ~10x slower (src/models/layers/rowwise.py)
    norm = ops.sqrt(ops.sum(ops.square(rowwise(x)), dim=1, keepdim=True))
    return norm.reshape((x.shape[0],) + (1,) * (x.ndim - 1))


def adaptive_clip_grad(grad, param, clipping=0.01, eps=1e-3):
    """AGC of one gradient: rescale the units whose gradient is too large for their weights.

    max_norm = clipping * max(unitwise_norm(param), eps); where
    unitwise_norm(grad) > max_norm, grad * max_norm / max(unitwise_norm(grad), 1e-6);
    elsewhere grad unchanged. The 1e-6 only guards the division. The per-unit factor
    (1 where not clipped) is computed on the norms and broadcast explicitly, one row per
    unit (src/models/layers/rowwise.py: MindSpore's CPU kernels).
    """
    max_norm = clipping * ops.maximum(unitwise_norm(param), eps)
    grad_norm = unitwise_norm(grad)
    factor = ops.where(grad_norm > max_norm, max_norm / ops.maximum(grad_norm, 1e-6), ops.ones_like(grad_norm))
    if _is_vector_like(grad.shape):
        return grad * factor
    return mul_rows(rowwise(grad), factor.reshape(-1, 1)).reshape(grad.shape)


def _momentum_step(apply_momentum, lr, momentum, nesterov, param, buf, grad):
    """buf = momentum * buf + grad, then W -= lr * (grad + momentum * buf) (Nesterov) or lr * buf.

    The momentum step is MindSpore's fused, in-place ApplyMomentum (heavy ball:
    buf = momentum * buf + g; W -= lr * buf), one pass instead of five elementwise ops.
    Nesterov, W -= lr * g + lr * momentum * buf, is that step with lr * momentum plus
    W -= lr * g: the CPU kernel of ApplyMomentum(use_nesterov=True) ignores the flag in
    MindSpore 2.10 (measured), so it is not used.
    """
    lr = ops.cast(lr, param.dtype)
    if nesterov:
        applied = apply_momentum(param, buf, lr * momentum, grad, momentum)
        return ops.depend(ops.assign_sub(param, lr * grad), applied)
    return apply_momentum(param, buf, lr, grad, momentum)


_sgd_agc_step = C.MultitypeFuncGraph("sgd_agc_step")


@_sgd_agc_step.register("Function", "Tensor", "Number", "Bool", "Number", "Number", "Number",
                        "Bool", "Bool", "Tensor", "Tensor", "Tensor")
def _sgd_agc_step_dense(apply_momentum, lr, momentum, nesterov, clipping, eps, weight_decay,
                        clip, decay, param, buf, grad):
    """One AGC + weight decay + momentum update of one parameter (see the module docstring)."""
    if clip:
        grad = adaptive_clip_grad(grad, param, clipping, eps)
    if decay:
        grad = grad + weight_decay * param
    return _momentum_step(apply_momentum, lr, momentum, nesterov, param, buf, grad)


_scale_grad = C.MultitypeFuncGraph("scale_grad")


@_scale_grad.register("Tensor", "Tensor")
def _scale_grad_tensor(scale, grad):
    return grad * ops.cast(scale, grad.dtype)  # as LossScaler.unscale multiplies


def _matches(name, keys):
    return any(key in name for key in keys)


class SGDAGC(nn.Optimizer):
    """SGD with Nesterov momentum, weight decay and AGC; parameter groups chosen by name.

    Args:
        params: iterable of ``Parameter`` (e.g. ``net.trainable_params()``).
            Parameter groups are chosen by name, not by dicts.
        learning_rate: a float, a per-step sequence / numpy array / 1-D Tensor
            (step t uses entry t), or a ``LearningRateSchedule``
            (mindspore.nn.learning_rate_schedule); the base class's
            ``get_lr()`` picks the value for the current global step.
        momentum: momentum coefficient (0.9 in the paper).
        weight_decay: L2 coefficient added to the clipped gradient (2e-5 for F0).
        nesterov: Nesterov momentum (True in the paper) or plain heavy ball.
        clipping: AGC threshold lambda (0.01 at batch 4096); ``None`` or 0
            turns clipping off for every parameter.
        eps: floor on the parameter norm, so zero-initialised parameters
            (skipinit_gain, biases) can still move (1e-3).
        no_decay_keys: a parameter whose name contains any of these strings
            gets no weight decay.
        agc_exclude: a parameter whose name contains any of these strings is
            not clipped.
        loss_scale: a fixed loss scale that is still inside the gradients.
            Gradients are divided by it before clipping.
        fused: the whole update (AGC, weight decay, momentum) of every parameter as one fused
            CPU kernel launch that writes the weights and their buffers in place (the same
            arithmetic per parameter, no parameter-sized temporaries); None: when the fused CPU
            kernels are active (src/models/layers/config.py).

    Call with the gradients, or with (gradients, grad_scale): the kernel multiplies each gradient
    by the float32 scalar grad_scale first (GradientUpdate folds the loss scale's unscale into the
    update this way when ``folds_grad_scale``; the operator form multiplies them as LossScaler does;
    None: no factor). With ``folds_grad_scale`` also (gradients, grad_scale, averages, ema_decays):
    the kernel updates each weight's EMA average (one per parameter, in order) after the weight,
    average * decay + weight * (1 - decay) with ema_decays = [decay, 1 - decay] (trainers/ema.py).

    Loss scaling and data parallelism: ``TrainOneStepWithLossScaleCell``
    (dynamic or fixed scale with overflow skipping) unscales the gradients and
    all-reduces them across devices before calling the optimizer, and
    ``TrainOneStepCell`` all-reduces them too. In the remaining case (a
    ``FixedLossScaleManager(drop_overflow_update=False)``) the scaled gradient
    arrives here and ``loss_scale`` must equal the manager's scale: it is
    divided out first. Either way the clipping sees the true gradient, as in
    DeepMind's code. AGC is not scale-invariant, so the all-reduce must average
    (``set_auto_parallel_context(gradients_mean=True)``), not sum.

    State: one momentum buffer per parameter, named ``momentum.<param name>``,
    plus the base class's ``global_step``; both are Parameters of this cell,
    so checkpoints hold them and loading a checkpoint resumes the optimizer
    and the learning-rate position.
    """

    def __init__(self, params, learning_rate, momentum=0.9, weight_decay=0.0, nesterov=True,
                 clipping=0.01, eps=1e-3, no_decay_keys=DEFAULT_NO_DECAY_KEYS,
                 agc_exclude=DEFAULT_AGC_EXCLUDE, loss_scale=1.0, fused=None):
        params = list(params)
        if params and not all(isinstance(p, mindspore.Parameter) for p in params):
            raise TypeError("SGDAGC takes a list of Parameters; groups are chosen by name "
                            "with no_decay_keys and agc_exclude")
        if momentum < 0.0:
            raise ValueError(f"SGDAGC momentum must be >= 0, got {momentum}")
        if clipping is not None and clipping < 0.0:
            raise ValueError(f"SGDAGC clipping must be >= 0 or None, got {clipping}")
        # The base class would multiply weight_decay by loss_scale for its own
        # decay_weight(); we decay after unscaling, so keep our own copy.
        super().__init__(learning_rate, params, weight_decay=weight_decay, loss_scale=loss_scale)
        self.momentum = float(momentum)
        self.nesterov = bool(nesterov)
        self.clipping = float(clipping or 0.0)
        self.eps = float(eps)
        self.wd = float(weight_decay)
        self.weight_decay = Tensor(self.wd, mindspore.float32)
        names = [p.name for p in self._parameters]
        self.decay_flags = tuple(self.wd > 0 and not _matches(n, no_decay_keys) for n in names)
        self.clip_flags = tuple(self.clipping > 0 and not _matches(n, agc_exclude) for n in names)
        self.moments = self._parameters.clone(prefix="momentum", init="zeros")
        self.apply_momentum = ops.ApplyMomentum()
        self.update_kernel = fused_update_kernel("sgd_agc", fused)
        self.kernel_consts = None
        if self.update_kernel is not None:  # one row per parameter, in the order the kernel takes them
            self.kernel_consts = Tensor(
                [[self.clipping if clip else 0.0, self.eps, self.wd if decay else 0.0,
                  float(_is_vector_like(p.shape)), float(self.nesterov)]
                 for p, clip, decay in zip(self._parameters, self.clip_flags, self.decay_flags)], mindspore.float32)
        self.folds_grad_scale = self.update_kernel is not None

    @mindspore.jit
    def construct(self, gradients, grad_scale=None, averages=None, ema_decays=None):
        gradients = self.scale_grad(gradients)  # divide out a fixed loss scale, if any
        lr = self.get_lr()
        self.assignadd(self.global_step, self.global_step_increase_tensor)
        if self.update_kernel is not None:
            lr = ops.cast(lr, mindspore.float32)
            if grad_scale is None:
                hyper = ops.stack([lr, lr * self.momentum, ops.full_like(lr, self.momentum)])
            else:  # ones * scale: scale in lr's shape, the same float32 value
                hyper = ops.stack([lr, lr * self.momentum, ops.full_like(lr, self.momentum),
                                   ops.full_like(lr, 1.0) * ops.cast(grad_scale, mindspore.float32)])
            # all parameters in one launch: one graph node, not one per parameter (233 on F0)
            if averages is not None:
                return self.update_kernel(self.kernel_consts, hyper, *gradients, *self._parameters, *self.moments,
                                          ema_decays, *averages)
            return self.update_kernel(self.kernel_consts, hyper, *gradients, *self._parameters, *self.moments)
        if grad_scale is not None:
            gradients = self.hyper_map(ops.partial(_scale_grad, grad_scale), gradients)
        step = ops.partial(_sgd_agc_step, self.apply_momentum, lr, self.momentum, self.nesterov,
                           self.clipping, self.eps, self.wd)
        return self.hyper_map(step, self.clip_flags, self.decay_flags,
                              self._parameters, self.moments, gradients)
