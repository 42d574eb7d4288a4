"""pride's optimizers under torch.amp.GradScaler.

GradScaler skips ``optimizer.step()`` when this rank's gradients overflowed. Under DDP's default hook
that decision is the same everywhere: the averaged gradients overflow on every rank. pride's
optimizers step on each rank's local gradients, so one rank's overflow would skip that rank's step
only, and the ranks' collectives would pair one rank's step k with another's step k + 1 (until the
last step waits for a partner that never comes).

They set ``_step_supports_amp_scaling`` instead, as torch's fused optimizers do: GradScaler then always
calls ``step()``, with ``grad_scale`` (None when the user already called ``scaler.unscale_``) and
``found_inf`` (this rank's overflow) as attributes, and the optimizer decides with the other ranks:
- OneBitAdam and ZeroOneAdam skip the step on every rank when any rank overflowed (what DDP with
  GradScaler does), agreed in the allreduce every step already makes;
  (0/1 Adam's local steps send nothing, so there an overflowed rank takes the step without gradients
  and its schedules stay the others');
- DistributedLion's overflowed rank sits the step out as a joined rank does: it abstains in every
  vote and keeps its momentum, the others vote, every rank applies the result. No collective is added.
  The step still counts (``opt.steps``, what MomentumSync reads), also when every rank overflowed.
ShardedGradScaler (torch.distributed.fsdp) drives them the same way.

The decision is taken on the host, so a step under a GradScaler reads ``found_inf`` there: on CUDA
that waits for the backward pass to end, as GradScaler's own non-fused path (which calls
``found_inf.item()`` to decide whether to step) does. Without a GradScaler nothing is read.

float16 gradients are refused where the optimizer would unscale them, as GradScaler.unscale_ refuses
them: unscaled in float16 the small gradients the scale protects underflow to zero.
"""

import torch


def overflowed(optimizer):
    """Whether a GradScaler driving this step saw non-finite gradients on this rank (False when no
    GradScaler drives it)."""
    found_inf = getattr(optimizer, "found_inf", None)
    if found_inf is None:
        return False
    # A tensor; or the int 0 where GradScaler checked no gradient (none of this optimizer's parameters has
    # one on this rank: the sum of an empty list).
    return bool(found_inf.item() > 0) if torch.is_tensor(found_inf) else bool(found_inf > 0)


def unscale_gradients(optimizer):
    """Divides the gradients by the GradScaler's scale where it left them scaled (``grad_scale`` set:
    the user did not call ``scaler.unscale_``), as ``unscale_`` does it (a float32 reciprocal computed in
    float64, then torch's fused unscale kernel), so that the step sees the same bits as after
    ``unscale_``."""
    grad_scale = getattr(optimizer, "grad_scale", None)
    if grad_scale is None:
        return
    inverse = grad_scale.double().reciprocal().float()
    grouped = {}
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.grad is not None:
                if p.grad.is_sparse:
                    raise RuntimeError(f"pride {type(optimizer).__name__}: sparse gradients are not supported")
                if p.grad.dtype == torch.float16:
                    raise ValueError(f"pride {type(optimizer).__name__}: attempting to unscale FP16 gradients (a "
                                     f"float16 parameter under torch.amp.GradScaler, which refuses them too: the "
                                     f"small gradients the scale protects would underflow); keep float32 master "
                                     f"parameters, or use bfloat16 without a GradScaler")
                grouped.setdefault((p.grad.device, p.grad.dtype), []).append(p.grad)
    for (device, _), grads in grouped.items():
        found = torch.zeros(1, dtype=torch.float32, device=device)  # already known: GradScaler checked
        torch._amp_foreach_non_finite_check_and_unscale_(grads, found, inverse.to(device))
