"""Lion Cub's options of DistributedLion (Ishikawa et al., arXiv 2411.16462): the "p-bit allreduce"
of quantized updates and selective momentum synchronisation.

What was read: the paper's abstract and opening (its body could not be retrieved here) and the
authors' experiment code (github.com/riverstone496/vitlion at 1c89b86: optimizer/signlion.py,
mean_signlion.py, lioncub_8bit_l0.py, lioncub_8bit_linf.py, utils/sync.py). The formulas below are
that code's; docs/design.md lists what was chosen where it is silent or buggy.

p-bit allreduce (``aggregation="int8"``): each rank quantizes its local Lion interpolation
c = β1·m + (1−β1)·g to integers q with |q| ≤ s = ⌊127/N⌋, the ranks sum q with an int8 ring allreduce
(2(N−1)/N · 8 bits per element; the sum cannot overflow), and Δ = sign(Σ q).
  quantization="sign": q = sign(c) ∈ {−1, 0, +1}; Δ is then exactly the majority vote that pride's
                        1-bit algorithms compute with 2 bits or less (tested bit for bit);
  quantization="l1":   q = clamp(round(c / mean|c| · s/2), −s, s), the scale per parameter tensor and
                        never sent: a vote weighted by each rank's relative magnitudes (Lion Cub's
                        lioncub_8bit_l1); "l0" uses the geometric mean of |c|, "linf" max|c|.

Momentum synchronisation (``MomentumSync``): after the step, on the scheduled steps, the selected
parameters' momenta are averaged over the ranks in float32 (an allreduce), as the code's sync_exp_avg.
"""

from dataclasses import dataclass, field

import torch
import torch.distributed as dist

QUANTIZATIONS = ("sign", "l1", "l0", "linf")
AGGREGATIONS = ("bits", "int8")


def levels(world_size):
    """s = ⌊127/N⌋: the largest |q| one rank may send so that N of them sum within int8."""
    return max(1, 127 // world_size)


def quantize(c, quantization, s):
    """q (int8) of one tensor's interpolation c (any float dtype), as Lion Cub's code computes it in
    float32. An element whose c is 0 (or NaN) sends 0: it abstains."""
    c = c.float()
    c = torch.where(torch.isnan(c), torch.zeros_like(c), c)
    if quantization == "sign":
        return torch.sign(c).to(torch.int8)
    magnitude = c.abs()
    if quantization == "l1":
        scale = magnitude.mean()
    elif quantization == "l0":
        scale = torch.exp(torch.log(magnitude + 1e-12).mean())
    else:
        scale = magnitude.max() if c.numel() else magnitude.sum()
    if not scale > 0:  # every element 0: nothing to say
        return torch.zeros_like(c, dtype=torch.int8)
    return torch.clamp(torch.round(c / scale * (s / 2)), -s, s).to(torch.int8)


@dataclass
class MomentumSync:
    """When and which momenta DistributedLion averages over the ranks (Lion Cub's selective momentum
    synchronisation). A step t (counted from 1) synchronises when

      every=K:        t % K == 0;
      doubling_k=k:   t is in the authors' calculate_Tv schedule: T_0 = 0, T_{j+1} = ⌊T_j + 2^(j/k)⌋, so
                      the gap doubles every k synchronisations (k=16: 193 of the first 100000 steps);

    and, with ``until``, only while t ≤ until. ``params``: the parameters whose momenta are averaged
    (default: all); a callable receives each parameter and returns whether to include it.
    """

    every: int = None
    doubling_k: int = None
    until: int = None
    params: object = None
    _schedule: list = field(default_factory=list, repr=False)

    def __post_init__(self):
        if (self.every is None) == (self.doubling_k is None):
            raise ValueError("MomentumSync: give exactly one of every=K or doubling_k=k")
        for name in ("every", "doubling_k", "until"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, int) and value >= 1):
                raise ValueError(f"MomentumSync: {name} must be an int >= 1, got {value!r}")

    def due(self, t):
        if self.until is not None and t > self.until:
            return False
        if self.every is not None:
            return t % self.every == 0
        while not self._schedule or self._schedule[-1] < t:
            last = self._schedule[-1] if self._schedule else 0
            self._schedule.append(int(last + 2 ** (len(self._schedule) / self.doubling_k)))
        return t in self._schedule

    def describe(self, params):
        """What every rank must agree on: the schedule and which of `params` (by index) are selected."""
        chosen = {id(p) for p in self.selected(params)}
        return (self.every, self.doubling_k, self.until, tuple(i for i, p in enumerate(params) if id(p) in chosen))

    def selected(self, params):
        if self.params is None:
            return list(params)
        if callable(self.params):
            return [p for p in params if self.params(p)]
        chosen = {id(p) for p in self.params}
        return [p for p in params if id(p) in chosen]


def average_momenta(momenta, group):
    """The momenta averaged over the group in float32, in place (one flat allreduce per dtype/device)."""
    world = dist.get_world_size(group)
    by_kind = {}
    for m in momenta:
        by_kind.setdefault((m.device, m.dtype), []).append(m)
    for ms in by_kind.values():
        flat = torch.cat([m.reshape(-1).float() for m in ms])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=group)
        flat.div_(world)
        for m, part in zip(ms, flat.split([m.numel() for m in ms])):
            m.copy_(part.view_as(m))


def int8_step(params, grads, momenta, lr, beta1, beta2, weight_decay, mode, quantization, group):
    """One Distributed Lion step over the p-bit (int8 ring) allreduce. The arithmetic is the fused
    kernels' (lion_impl.h), written as torch operations: c and m in the parameter's dtype, one
    rounding per operation; x ← x·(1 − lr·λ) − lr·Δ. A parameter whose grad is None on this rank sends
    zeros (abstains) and keeps its momentum; one with no gradient anywhere takes no step."""
    world = dist.get_world_size(group) if dist.is_initialized() else 1
    if world > 127:
        raise ValueError(f"DistributedLion: aggregation='int8' sums one int8 per rank and holds at most 127 ranks, "
                         f"this group has {world}; use aggregation='bits'")
    s = levels(world)
    qs, present = [], []
    for p, g, m in zip(params, grads, momenta):
        if g is None:
            qs.append(torch.zeros(p.numel(), dtype=torch.int8, device=p.device))
            present.append(0)
            continue
        c = m.mul(beta1).add_(g.mul(1 - beta1))
        qs.append(quantize(c, quantization, s).reshape(-1))
        present.append(1)
        m.mul_(beta2).add_(g.mul(1 - beta2))
    flat = torch.cat(qs + [torch.tensor(present, dtype=torch.int8, device=params[0].device)])
    if world > 1:
        dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=group)
    anyone = flat[-len(params):].tolist()
    for p, total, has in zip(params, flat[:-len(params)].split([p.numel() for p in params]), anyone):
        if has == 0:
            continue
        if mode == "vote":
            delta = torch.sign(total).to(p.dtype)
        else:
            delta = (total.float() / float(world)).to(p.dtype)
        if weight_decay != 0:
            p.mul_(1 - lr * weight_decay)
        p.add_(delta.view_as(p), alpha=-lr)
