"""1-bit Adam (Tang et al., ICML 2021, arXiv 2102.02888) over pride's compressed allreduce."""

from . import _onebit
from ._onebit import CompressedAdamBase


class OneBitAdam(CompressedAdamBase):
    """Adam whose momentum travels as 1 bit per element after a full-precision warm-up.

    Steps 1 … ``freeze_step`` (the warm-up) are Adam on gradients averaged over the ranks in float32.
    Then the variance is frozen and each step runs:

        m ← β1·m + (1−β1)·g_local;   m ← compressed_allreduce(m)   (error feedback, 1 bit per element)
        p ← p·(1 − lr·λ) − lr · m / (sqrt(v) + eps)

    so every rank holds the same m, v and parameters (bitwise) after every step. This follows
    DeepSpeed's OnebitAdam: no bias correction (``bias_correction=True`` adds torch.optim.AdamW's, with
    the variance's frozen at the freeze step), eps outside the square root, decoupled weight decay, the
    momentum (not the gradient) compressed, one scale per parameter group (its flat buffer). Unlike
    DeepSpeed there is no hidden first step: ``freeze_step`` warm-up steps are exactly that many.

    Elements whose frozen variance is exactly 0 (never a gradient in the warm-up) take no compressed
    step (``mask_zero_variance``, DeepSpeed's exp_avg_mask derived automatically): the compressed
    momentum is ±scale everywhere, and ±scale/eps would blow them up.

    A parameter without a gradient on every rank takes no step (torch's AdamW); one without a gradient
    on some ranks counts as zeros there. The ranks agree on which, and check that their groups and
    settings match, through one small allreduce per step (pride/optim/_onebit.py). With
    ``bias_correction=True`` the correction counts the group's steps, not each parameter's as torch's
    AdamW does, so a parameter that comes back after missing steps differs from AdamW there.

    The optimizer does its own communication: give it each rank's local gradients (under DDP,
    ``opt.attach(ddp_model)`` registers pride.ddp_hooks.local_gradients_hook). The error-feedback state
    is in ``state_dict()`` and is this rank's own, keyed "rank<r>_of<n>": save every rank's state dict
    and load it on the same rank, or write them all with torch.distributed.checkpoint (each rank's key
    is its own, so dcp.save keeps them all), to resume exactly (DeepSpeed resets the errors on load).
    Another rank's or world size's errors are reset on load, with a warning.
    """

    _name = "OneBitAdam"

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, freeze_step=100000,
                 bias_correction=False, mask_zero_variance=True, group=None):
        if not (isinstance(freeze_step, int) and freeze_step >= 1):
            raise ValueError(f"OneBitAdam: freeze_step must be an int >= 1 (the variance is frozen after it; at 0 "
                             f"it would stay zero), got {freeze_step!r}")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      freeze_step=freeze_step, bias_correction=bool(bias_correction),
                                      mask_zero_variance=bool(mask_zero_variance), step=0),
                         group=group)

    def compressing(self, group_index=0):
        """Whether the group's next step compresses (its warm-up is over)."""
        g = self.param_groups[group_index]
        return g["step"] + 1 > g["freeze_step"]

    def _step_group(self, g, present, synced):
        t = g["step"] + 1
        beta1, beta2 = g["betas"]
        moments = [self._moments(p) for p in g["params"]]
        if t <= g["freeze_step"]:
            for (m, v), grad, here in zip(moments, self._averaged_grads(g), present):
                if here:
                    m.lerp_(grad, 1 - beta1)
                    v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        elif self._fused_compressed_step(g, t, moments, present):
            g["step"] = t
            return
        else:
            # An absent parameter sends its momentum as it is; its result is not applied.
            for (m, _), grad, here in zip(moments, self._local_grads(g), present):
                if here:
                    m.lerp_(grad, 1 - beta1)
            self._compressed_mean(g, [m for m, _ in moments], [v for _, v in moments], write=present)
        v_step = min(t, g["freeze_step"])
        for p, (m, v), here in zip(g["params"], moments, present):
            if here:
                self._adam_update(p, m, v, g["lr"], g["eps"], g["weight_decay"], g["bias_correction"], t, v_step,
                                  beta1, beta2)
        g["step"] = t

    def _fused_compressed_step(self, g, t, moments, present):
        """A compressed step by pride's fused kernels (CPU or CUDA); False, having done nothing, where they do
        not apply (mixed dtypes or devices, non-contiguous tensors, a build without CUDA for CUDA tensors).
        Each run of present parameters is one call over its slice of the flat buffer (a launch per tensor)."""
        params = g["params"]
        grads = [p.grad for p in params]
        momenta, variances = [m for m, _ in moments], [v for _, v in moments]
        if not self._fused_kernels_take(params, grads, [momenta, variances]):
            return False
        from .. import _C

        flat = self._group_flat_buffer(g)
        at = _onebit._offsets(params)
        runs = _onebit._runs(present)
        for a, b in runs:
            _C.onebit_adam_momentum(params[a:b], grads[a:b], momenta[a:b], flat[at[a]:at[b]], beta1=g["betas"][0])
        for i, here in enumerate(present):
            if not here:
                flat[at[i]:at[i + 1]].copy_(momenta[i].view(-1))
        self._compressed_mean_in_place(g, flat)
        step_size, bc2_sqrt = self._step_size_and_bias_correction2_sqrt(g, t, min(t, g["freeze_step"]))
        for a, b in runs:
            _C.onebit_adam_apply(flat[at[a]:at[b]], params[a:b], momenta[a:b], variances[a:b], lr=g["lr"], eps=g["eps"],
                                 weight_decay=g["weight_decay"], step_size=step_size, bias_correction2_sqrt=bc2_sqrt,
                                 bias_correction=g["bias_correction"], mask_zero_variance=g["mask_zero_variance"])
        return True
