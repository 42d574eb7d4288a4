"""Lion Cub's options of DistributedLion (Ishikawa et al., arXiv 2411.16462): the "p-bit allreduce"
of quantized updates and selective momentum synchronisation.

What was read: the paper's abstract and opening (its body could not be retrieved here) and the
authors' experiment code (github.com/riverstone496/vitlion at 1c89b86: optimizer/signlion.py,
mean_signlion.py, lioncub_8bit_l0.py, lioncub_8bit_linf.py, utils/sync.py). The formulas below are
that code's; docs/design.md lists what was chosen where it is silent or buggy.

p-bit allreduce (``aggregation="int8"``): each rank quantizes its local Lion interpolation
c = β1·m + (1−β1)·g to integers q with |q| ≤ s = ⌊127/N⌋, the ranks sum q with an int8 ring allreduce
(2(N−1)/N · 8 bits per element; the sum cannot overflow), and Δ = sign(Σ q). ``aggregation="levels"``
computes the same Δ with pride.level_vote: the q travel as ⌈log2(2s+1)⌉ bit planes to the owner of their
chunk, which sums them with bit-sliced counters and returns only sign(Σ q), (N−1)/N · (planes + 2) bits
per element (6 at N = 4 against the ring's 12). Vote mode only: the sum itself never travels.
  quantization="sign": q = sign(c) ∈ {−1, 0, +1}; Δ is then exactly the majority vote that pride's
                        1-bit algorithms compute with 2 bits or less (tested bit for bit);
  quantization="l1":   q = clamp(round(c / mean|c| · s/2), −s, s), the scale per parameter tensor and
                        never sent: a vote weighted by each rank's relative magnitudes (Lion Cub's
                        lioncub_8bit_l1); "l0" uses the geometric mean of |c|, "linf" max|c|.

On the CPU (float32 and bfloat16) the local arithmetic runs as three fused passes (collectives/bits/lion_cub.h: c and m with
Σ|c| and max|c|, then q, then the apply) instead of about ten torch operations; the "l1" scale is then
Σ|c| summed in double over n, rounded to float32 (torch's float32 mean can differ from it by a few ulps
at millions of elements, and overflows where the double sum does not), every other operation is the
torch code's, bit for bit. The passes run on torch's intra-op threads. CUDA tensors and float16
parameters keep the torch operations.

Momentum synchronisation (``MomentumSync``): after the step, on the scheduled steps, the selected
parameters' momenta are averaged over the ranks in float32 (an allreduce), as the code's sync_exp_avg.
"""

import math
import struct
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from ..collectives import level_vote

QUANTIZATIONS = ("sign", "l1", "l0", "linf")
AGGREGATIONS = ("bits", "int8", "levels")


def levels(world_size):
    """s = ⌊127/N⌋: the largest |q| one rank may send so that N of them sum within int8."""
    return max(1, 127 // world_size)


def quantize_(c, quantization, s, q, scratch):
    """q (int8, c's size) ← Lion Cub's quantization of the interpolation c (a flat tensor of any float
    dtype), computed in float32 as the authors' code does. c may be overwritten; `scratch` is a float32
    tensor of c's size (c itself must not be it). An element whose c is 0 (or NaN) sends 0: it abstains.
    In place, into buffers the caller keeps: fresh tensors of a parameter's size are fresh pages on every
    step, which on a CPU cost more than the arithmetic."""
    if c.dtype != torch.float32:
        scratch.copy_(c)
        c = scratch
        scratch = None
    c.nan_to_num_(nan=0.0, posinf=math.inf, neginf=-math.inf)
    if quantization == "sign":
        q.copy_(torch.sign(c, out=c))
        return
    magnitude = torch.abs(c, out=scratch) if scratch is not None else c.abs()
    if quantization == "l1":
        scale = magnitude.mean()
    elif quantization == "l0":
        scale = torch.exp(magnitude.add_(1e-12).log_().mean())
    else:
        scale = magnitude.max() if c.numel() else magnitude.sum()
    # Where the scale is not positive (every element 0, or a mean too small for float32) every q is 0. No
    # host branch on it: on a GPU, reading the scale would wait for the device once per tensor, which
    # undoes the overlap of one tensor's sum with the next one's quantization. Multiplying by (scale > 0)
    # keeps every value (by 1) or makes it ±0 or NaN (by 0). NaN (an infinite c over an infinite scale,
    # or c/0 times 0) then sends 0: a float NaN has no defined int8 value.
    torch.div(c, scale, out=c).mul_(s / 2).round_().clamp_(-s, s).mul_(scale > 0).nan_to_num_(nan=0.0)
    q.copy_(c)


def _float32(x):
    """x rounded to float32, as a python float."""
    return struct.unpack("f", struct.pack("f", x))[0]


def _fused_quantize(g, m, beta1, beta2, quantization, s, q, c32, scratch=None):
    """The CPU's fused passes (collectives/bits/lion_cub.h) for one tensor: c and m, then q. c32 is a float32
    buffer of the tensor's size; "l0" also takes `scratch`, another (a new one when None)."""
    from .. import _C

    if c32.numel() == 0:
        return
    abs_sum, abs_max = _C.lion_cub_interpolate(g, m, beta1, beta2, c32)
    if quantization == "sign":
        _C.lion_cub_signs(c32, q)
        return
    if quantization == "l1":
        scale = _float32(abs_sum / c32.numel())
    elif quantization == "linf":
        scale = abs_max
    else:  # "l0": the geometric mean through torch, on the float32 c the first pass left
        magnitude = torch.abs(c32, out=scratch) if scratch is not None else torch.abs(c32)
        scale = float(torch.exp(magnitude.add_(1e-12).log_().mean()))
    if not scale > 0:  # every element 0 (or too small for float32): nothing to say
        q.zero_()
        return
    _C.lion_cub_levels(c32, q, scale, s)


_FUSED_DTYPES = (torch.float32, torch.bfloat16)  # float16 keeps torch's operations (lion_cub.h says why)


def _fused_on(*tensors):
    """Whether the CPU's fused passes take these tensors (lion_cub_steps.h)."""
    from .. import _C

    return tensors[0].device.type == "cpu" and _C.lion_cub_fused_supported(*tensors)


class Int8Scratch:
    """The buffers int8_step reuses from step to step, by name (grown when a larger one is needed)."""

    def __init__(self):
        self._buffers = {}

    def get(self, name, numel, dtype, device):
        b = self._buffers.get(name)
        if b is None or b.numel() < numel or b.dtype != dtype or b.device != device:
            b = torch.empty(numel, dtype=dtype, device=device)
            self._buffers[name] = b
        return b[:numel]


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


def int8_step(params, grads, momenta, lr, beta1, beta2, weight_decay, mode, quantization, group,
              piece_elements=1 << 22, scratch=None, aggregation="int8"):
    """One Distributed Lion step over the p-bit allreduce: the int8 ring's sum (``aggregation="int8"``) or
    its sign by pride.level_vote (``"levels"``, mode "vote"; the same Δ bit for bit). The arithmetic is the fused
    kernels' (lion_impl.h): c and m in the parameter's dtype, one rounding per operation;
    x ← x·(1 − lr·λ) − lr·Δ. On the CPU Lion Cub's own fused passes compute it (lion_cub.h), elsewhere torch
    operations. A parameter whose grad is None on this rank sends
    zeros (abstains) and keeps its momentum; one with no gradient anywhere takes no step.

    Overlapped: each tensor's q goes out as soon as it is quantized, in allreduces of at most
    `piece_elements`, while the next tensor is quantized; a tensor is applied once its sums are back,
    while later tensors are on the wire. The sums are per element, so the pieces change no bit.
    `scratch` (an Int8Scratch the caller keeps) holds the buffers from step to step."""
    from .. import _C

    world = dist.get_world_size(group) if dist.is_initialized() else 1
    if world > 127:
        raise ValueError(f"DistributedLion: aggregation='{aggregation}' sums one int8 per rank and holds at most 127 "
                         f"ranks, this group has {world}; use aggregation='bits'")
    s = levels(world)
    device, dtype = params[0].device, params[0].dtype
    scratch = scratch if scratch is not None else Int8Scratch()
    largest = max(p.numel() for p in params)
    flat_q = scratch.get("q", sum(p.numel() for p in params), torch.int8, device)
    t_buf = scratch.get("t", largest, dtype, device)
    # quantize_'s float32 scratch: for float32 parameters t_buf, free by then; others need their own.
    f32_buf = scratch.get("f32", largest, torch.float32, device) if dtype != torch.float32 else None
    # The fused passes' float32 c (CPU): t_buf for float32 parameters, else f32_buf.
    c32_buf = t_buf if dtype == torch.float32 else f32_buf

    def allreduce(t):
        return dist.all_reduce(t, op=dist.ReduceOp.SUM, group=group, async_op=True) if world > 1 else None

    signed = aggregation == "levels" and world > 1  # what comes back is sign(Σq) already

    def aggregate(q):  # a tensor's quantized c, in flight; what comes back is summed (int8) or signed (levels)
        if world == 1:
            return None
        if aggregation == "levels":  # signs need only levels ±1: two planes, not ⌈log2(2s+1)⌉
            return level_vote(q, 1 if quantization == "sign" else s, group=group, async_op=True)
        return allreduce(q)

    # Who has a gradient for each tensor, summed first: a tensor nobody stepped stays as it is.
    present = torch.tensor([0 if g is None else 1 for g in grads], dtype=torch.int8, device=device)
    pending = [allreduce(present)]  # waited for before the first tensor is applied
    anyone = []  # the summed flags, read once (on a GPU, one copy to the host)
    in_flight = []  # (index, q, works), in order

    def apply_oldest():
        i, total, works = in_flight.pop(0)
        for w in pending + works:
            if w is not None:
                w.wait()
        pending.clear()
        if not anyone:
            anyone.extend(present.tolist())
        p = params[i]
        if anyone[i] == 0:
            return
        if mode == "vote" and p.device.type == "cpu" and p.is_contiguous() and p.dtype in _FUSED_DTYPES:
            # x·(1 − lr·λ) − lr·sign(Σq) in one pass (a sum or, from the level vote, its sign already)
            _C.lion_cub_apply_sign(p.view(-1), total, lr, weight_decay)
            return
        if mode == "vote":
            # the level vote returned signs already (a world of one sends nothing: its q are levels)
            delta = t_buf[:total.numel()].copy_(total if signed else torch.sign(total, out=total))
        else:
            delta = (total.float() / float(world)).to(p.dtype)
        if weight_decay != 0:
            p.mul_(1 - lr * weight_decay)
        # x − lr·delta with lr rounded to the parameter's dtype, as torch's CPU add_(alpha=) rounds it for
        # bfloat16 and float16 and the fused pass does; torch's CUDA add_ keeps alpha in float32, which
        # changed ~1% of bfloat16 elements against the CPU step on an H200 (docs/device-runs.md). Spelled
        # out in float32 (one product, one difference, each rounded), the same bits on every device.
        lr_d = float(torch.tensor(lr, dtype=torch.float32).to(p.dtype))
        p.sub_(delta.view_as(p).to(torch.float32).mul_(lr_d))

    offset = 0
    for i, (p, g, m) in enumerate(zip(params, grads, momenta)):
        n = p.numel()
        q = flat_q[offset:offset + n]
        offset += n
        if g is None:
            q.zero_()
        elif _fused_on(p, g, m):
            l0_scratch = scratch.get("l0", largest, torch.float32, device)[:n] if quantization == "l0" else None
            _fused_quantize(g, m, beta1, beta2, quantization, s, q, c32_buf[:n], l0_scratch)
        else:
            g = g.reshape(-1)
            c, t = scratch.get("c", largest, dtype, device)[:n], t_buf[:n]
            torch.mul(m.reshape(-1), beta1, out=c).add_(torch.mul(g, 1 - beta1, out=t))
            m.mul_(beta2).add_(torch.mul(g, 1 - beta2, out=t).view_as(m))
            quantize_(c, quantization, s, q, t if f32_buf is None else f32_buf[:n])
        in_flight.append((i, q, [aggregate(piece) for piece in q.split(piece_elements)]))
        if len(in_flight) > 1:
            apply_oldest()
    while in_flight:
        apply_oldest()
