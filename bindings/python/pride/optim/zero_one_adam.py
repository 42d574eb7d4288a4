"""0/1 Adam (Lu et al., ICLR 2023, arXiv 2202.06009) over pride's compressed allreduce."""

import torch

from . import _onebit
from ._onebit import CompressedAdamBase


class ZeroOneAdam(CompressedAdamBase):
    """Adam with adaptive variance freezing and 1-bit synchronisation that skips rounds (local steps).

    Phase A, steps 1 … ``var_freeze_step``: a step whose number is a multiple of the variance interval
    averages the gradients in float32 and updates m and v; every other step sends the gradient through
    the 1-bit compressed allreduce (error feedback) and updates m only. The variance interval starts at
    1 and doubles after every ``var_update_scaler`` variance updates.

    Phase B, after ``var_freeze_step``: v is frozen and the errors restart at zero (they now compress
    another quantity). Each step is local (nothing sent): m ← β1·m + (1−β1)·g_local, the parameters
    move, and the step (lr·update) is accumulated. On a step whose number is a multiple of the local-step
    interval the ranks synchronise: the accumulated step, in momentum units (× (sqrt(v) + eps)), goes
    through the compressed allreduce; m becomes its lr-weighted mean momentum and the parameters are
    set from their value at the last synchronisation plus the averaged step. The interval starts at 1
    and doubles every ``local_step_scaler`` steps, up to ``local_step_clipper``.

    This follows DeepSpeed's ZeroOneAdam, its defaults included (``local_step_scaler=32678`` as
    there), with two changes written down in docs/design.md: no hidden first step (schedules count
    this optimizer's steps), and a synchronisation restarts from a stored copy of the parameters at
    the last synchronisation rather than from p − u, so that replicas are bitwise identical after every
    synchronisation (p − u rounds differently on each rank). Between synchronisations each rank's
    parameters are its own, by design.

    Elements whose variance is exactly 0 take no compressed step (``mask_zero_variance``, as in
    OneBitAdam).

    Missing gradients: in phase A a parameter without a gradient on every rank takes no step (torch's
    AdamW), and one without a gradient on some ranks counts as zeros there; the ranks agree on which
    through a small allreduce that each communicating step makes anyway (pride/optim/_onebit.py, which
    also checks that the ranks' settings match). In phase B a local step is this rank's own and sends
    nothing: a parameter without a gradient here takes no local step here. At a synchronisation the
    ranks agree, in the same small allreduce, on the parameters that moved on any rank since the last
    one: those synchronise, with or without a gradient now; the others have nothing to send and stay
    where they are. A parameter that moved in only some of an interval's steps has its synchronised
    momentum (the accumulated step over the interval's summed learning rate) scaled down accordingly.
    With ``bias_correction=True`` the correction counts the group's steps, not each parameter's as
    torch's AdamW does, so a parameter that comes back after missing steps differs from AdamW there.

    The optimizer does its own communication (``attach(ddp_model)`` under DDP). Its error-feedback
    state, accumulators and schedules are in ``state_dict()``; save each rank's own to resume exactly.
    Through torch.distributed.checkpoint every rank's errors are kept (keyed "rank<r>_of<n>"), but a
    replicated model is saved once: a checkpoint written after a synchronisation resumes exactly, one
    written mid-interval from one rank's parameters (docs/design.md).
    """

    _name = "ZeroOneAdam"

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, var_freeze_step=100000,
                 var_update_scaler=16, local_step_scaler=32678, local_step_clipper=16, bias_correction=False,
                 mask_zero_variance=True, group=None):
        for name, value, low in (("var_freeze_step", var_freeze_step, 1), ("var_update_scaler", var_update_scaler, 1),
                                 ("local_step_scaler", local_step_scaler, 1),
                                 ("local_step_clipper", local_step_clipper, 1)):
            if not (isinstance(value, int) and value >= low):
                raise ValueError(f"ZeroOneAdam: {name} must be an int >= {low}, got {value!r}")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      var_freeze_step=var_freeze_step, var_update_scaler=var_update_scaler,
                                      local_step_scaler=local_step_scaler, local_step_clipper=local_step_clipper,
                                      bias_correction=bool(bias_correction), mask_zero_variance=bool(mask_zero_variance),
                                      step=0, var_interval=1,
                                      var_counter=0, var_steps=0, frozen=False, local_step_interval=1,
                                      local_step_counter=0, lrs=0.0),
                         group=group)

    def next_step_communicates(self, group_index=0):
        """What the group's next step sends: "full" (float32 gradients), "1bit" or "none" (a local step)."""
        g = self.param_groups[group_index]
        t = g["step"] + 1
        if not g["frozen"]:
            return "full" if t % g["var_interval"] == 0 else "1bit"
        return "1bit" if t % g["local_step_interval"] == 0 else "none"

    def _accumulator(self, p):
        st = self.state[p]
        if "momentum_accumulator" not in st:
            st["momentum_accumulator"] = torch.zeros_like(p, dtype=torch.float32, memory_format=torch.contiguous_format)
            st["sync_anchor"] = p.detach().float().clone(memory_format=torch.contiguous_format)
            st["moved_since_sync"] = False
        return st["momentum_accumulator"], st["sync_anchor"]

    def _moved_since_sync(self, p):
        """Whether p took a local step on this rank since the last synchronisation (then it must
        synchronise, with or without a gradient now). A state without the flag (saved before it existed)
        says so where p has an accumulator, as the code of then synchronised every parameter."""
        st = self.state[p]
        return st.get("moved_since_sync", "momentum_accumulator" in st)

    def _create_state(self, g):
        super()._create_state(g)
        if "momentum_accumulator" not in self.state[g["params"][0]]:
            for p in g["params"]:
                self._accumulator(p)  # zeros and p until the variance freezes, when both are set again

    def _next_step(self, g):
        if not g["frozen"]:
            return "agree"
        return "sync" if (g["step"] + 1) % g["local_step_interval"] == 0 else "local"

    def _step_group(self, g, present, synced):
        if g["frozen"]:
            self._local_step(g, present, synced)
        else:
            self._variance_phase_step(g, present)

    def _variance_phase_step(self, g, present):
        t = g["step"] + 1
        beta1, beta2 = g["betas"]
        moments = [self._moments(p) for p in g["params"]]
        variance_step = t % g["var_interval"] == 0
        if variance_step:
            for (m, v), grad, here in zip(moments, self._averaged_grads(g), present):
                if here:
                    m.lerp_(grad, 1 - beta1)
                    v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            g["var_steps"] += 1
        else:
            # An absent parameter sends zeros (no gradient anywhere); its result is not applied.
            grads = self._local_grads(g, copy=True)  # the compressed mean is written into them
            self._compressed_mean(g, grads, [v for _, v in moments], write=present)
            for (m, _), grad, here in zip(moments, grads, present):
                if here:
                    m.lerp_(grad, 1 - beta1)
        for p, (m, v), here in zip(g["params"], moments, present):
            if here:
                self._adam_update(p, m, v, g["lr"], g["eps"], g["weight_decay"], g["bias_correction"], t,
                                  max(g["var_steps"], 1), beta1, beta2)
        if variance_step:
            g["var_counter"] += 1
            if g["var_counter"] == g["var_update_scaler"]:
                g["var_counter"] = 0
                g["var_interval"] *= 2
        g["step"] = t
        if t >= g["var_freeze_step"]:
            g["frozen"] = True
            self._reset_errors(g)  # from here on they would compress accumulated steps, not gradients
            for p in g["params"]:
                acc, anchor = self._accumulator(p)
                acc.zero_()
                anchor.copy_(p)
                self.state[p]["moved_since_sync"] = False

    def _local_step(self, g, present, synced):
        """present: the parameters with a gradient on this rank (a local step is this rank's own);
        synced, at a synchronisation: every parameter that moved since the last one on some rank, with or
        without a gradient now (its accumulated steps must reach the other ranks); one that moved nowhere
        has nothing to send and stays where it is."""
        t = g["step"] + 1
        g["lrs"] += g["lr"]
        if not self._fused_local_step(g, t, present, synced):
            self._torch_local_step(g, t, present, synced)
        for p, here in zip(g["params"], present):
            if here:
                self.state[p]["moved_since_sync"] = True
        for p, done in zip(g["params"], synced or ()):
            if done:
                self.state[p]["moved_since_sync"] = False
        if synced is not None:
            g["lrs"] = 0.0
        g["local_step_counter"] += 1
        if g["local_step_counter"] == g["local_step_scaler"]:
            g["local_step_counter"] = 0
            g["local_step_interval"] = min(g["local_step_clipper"], 2 * g["local_step_interval"])
        g["step"] = t

    def _fused_local_step(self, g, t, present, synced):
        """The local step (and a synchronisation, where ``synced`` is given) by pride's fused kernels (CPU
        or CUDA), one call per run of present (synchronised) parameters over its slice of the flat
        buffer; False, having done nothing, where they do not apply (mixed dtypes or devices,
        non-contiguous tensors, a build without CUDA for CUDA tensors)."""
        params = g["params"]
        moments = [self._moments(p) for p in params]
        kept = [self._accumulator(p) for p in params]
        grads = [p.grad for p in params]
        momenta, variances = [m for m, _ in moments], [v for _, v in moments]
        accumulators, anchors = [a for a, _ in kept], [b for _, b in kept]
        if not self._fused_kernels_take(params, grads, [momenta, variances, accumulators, anchors]):
            return False
        from .. import _C

        beta1 = g["betas"][0]
        lr, eps = g["lr"], g["eps"]
        step_size, bc2_sqrt = self._step_size_and_bias_correction2_sqrt(g, t, max(g["var_steps"], 1))
        flat = self._group_flat_buffer(g) if synced is not None else None
        at = _onebit._offsets(params)
        for a, b in _onebit._runs(present):
            _C.zero_one_adam_local_step(params[a:b], grads[a:b], momenta[a:b], variances[a:b], accumulators[a:b],
                                        None if flat is None else flat[at[a]:at[b]], lr=lr, beta1=beta1, eps=eps,
                                        weight_decay=g["weight_decay"], step_size=step_size,
                                        bias_correction2_sqrt=bc2_sqrt, bias_correction=g["bias_correction"])
        if synced is not None:
            for i, here in enumerate(present):
                if here:
                    continue
                part = flat[at[i]:at[i + 1]]
                if synced[i]:  # its accumulated steps in momentum units, as the kernel writes them
                    torch.mul(accumulators[i].view(-1), _onebit._sqrt(variances[i]).add_(eps).view(-1), out=part)
                else:
                    part.zero_()
            self._compressed_mean_in_place(g, flat)
            for a, b in _onebit._runs(synced):
                _C.zero_one_adam_sync(flat[at[a]:at[b]], params[a:b], momenta[a:b], variances[a:b],
                                      accumulators[a:b], anchors[a:b], eps=eps, lr_sum=g["lrs"],
                                      mask_zero_variance=g["mask_zero_variance"])
        return True

    def _torch_local_step(self, g, t, present, synced):
        beta1, beta2 = g["betas"]
        lr, eps = g["lr"], g["eps"]
        moments = [self._moments(p) for p in g["params"]]
        kept = []
        for p, (m, v), grad, here in zip(g["params"], moments, self._local_grads(g), present):
            acc, anchor = self._accumulator(p)
            kept.append((p, m, v, acc, anchor))
            if not here:
                continue
            m.lerp_(grad, 1 - beta1)
            before = p.detach().to(torch.float32, copy=True)  # .float() of a float32 tensor is the tensor itself
            self._adam_update(p, m, v, lr, eps, g["weight_decay"], g["bias_correction"], t, max(g["var_steps"], 1),
                              beta1, beta2)
            acc.add_(p.float() - before)  # u: the sum of this rank's steps since the last synchronisation
        if synced is not None:
            denoms = [_onebit._sqrt(v).add_(eps) if done else None for (_, _, v, _, _), done in zip(kept, synced)]
            steps = [acc.mul_(d) if done else torch.zeros_like(acc)  # momentum units
                     for (_, _, _, acc, _), d, done in zip(kept, denoms, synced)]
            self._compressed_mean(g, steps, [v for _, _, v, _, _ in kept], write=synced)
            for (p, m, v, acc, anchor), d, done in zip(kept, denoms, synced):
                if not done:
                    continue
                if g["lrs"] > 0:  # the lr-weighted mean momentum of the ranks (lr 0: nothing moved)
                    m.copy_(acc).div_(-g["lrs"])
                anchor.add_(acc / d)
                p.copy_(anchor)
                acc.zero_()
