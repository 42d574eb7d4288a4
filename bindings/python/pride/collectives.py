"""pride's own collectives on torch.distributed groups (SPEC §3)."""

import operator

import torch
import torch.distributed as dist

from . import _C

_CPU = torch.device("cpu")


def _pride_backend(group, what):
    """The pride backend object behind ``group`` (default: the world group)."""
    if not dist.is_initialized():
        raise RuntimeError(
            f"pride.{what}: torch.distributed is not initialized; call "
            'dist.init_process_group("pride") or pride.init() first'
        )
    if group is not None and not isinstance(group, dist.ProcessGroup):
        raise TypeError(f"pride.{what}: group must be a torch.distributed ProcessGroup (from new_group) or None, "
                        f"got {type(group).__name__}")
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    try:
        backend = pg._get_backend(_CPU)
    except RuntimeError as e:
        raise TypeError(f"pride.{what}: the group has no CPU backend ({e})") from None
    if not _C.is_pride_backend(backend):
        raise TypeError(
            f"pride.{what}: the group's CPU backend is {backend.name()!r}, not 'pride'; create it with "
            "backend='pride' (or 'cpu:pride,cuda:nccl')"
        )
    return backend


def _whole_number(value, name, what):
    """``value`` as an int, refusing what int() would round or take from a bool (15.7 elements, True)."""
    if isinstance(value, bool):
        raise TypeError(f"pride.{what}: {name} must be an int, got a bool")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"pride.{what}: {name} must be an int, got {type(value).__name__} {value!r}") from None


def _option(value, name, what):
    if not isinstance(value, str):
        raise TypeError(f"pride.{what}: {name} must be a string, got {type(value).__name__} {value!r}")
    return value


def _overlap(a, b):
    """Whether the byte ranges that two tensors span intersect: conservative for interleaved views (they
    count as overlapping), and blind to no sharing (views through separate storages, numpy's, count too)."""
    if a.numel() == 0 or b.numel() == 0 or a.device != b.device:
        return False

    def span(x):
        first = x.data_ptr()
        return first, first + (1 + sum((n - 1) * st for n, st in zip(x.shape, x.stride()))) * x.element_size()

    (a0, a1), (b0, b1) = span(a), span(b)
    return a0 < b1 and b0 < a1


def _not_a_member(group):
    return group is not None and group == dist.GroupMember.NON_GROUP_MEMBER


def _refuse_a_non_member(group, what):
    """An optimizer may be built on every rank, its group's members or not (torch's new_group runs on all
    of them); stepping it on a rank outside the group has no defined meaning: its collectives are no-ops
    there. A clear error, where the step would otherwise fail obscurely, train alone, or divide by the
    group size -1 that torch reports to a non-member (a step uphill)."""
    if _not_a_member(group):
        raise RuntimeError(f"pride {what} (rank {dist.get_rank()}): this rank is not a member of the optimizer's "
                           f"group; step the optimizer only on the group's ranks")


def sign_allreduce(t, mode="vote", group=None, async_op=False, votes="binary"):
    """In place: every rank gets the element-wise majority vote ("vote") or mean ("mean") of the
    ranks' signs of ``t``. Binary votes: x > 0 votes +1, anything else -1; ternary votes: ±0 and NaN
    abstain. float32, bfloat16 or float16 tensors, on the CPU or a GPU. Returns a Work when ``async_op``.
    """
    if _not_a_member(group):
        return None
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"pride.sign_allreduce: expected a torch.Tensor, got {type(t).__name__}")
    work = _C.sign_allreduce(_pride_backend(group, "sign_allreduce"), t, _option(mode, "mode", "sign_allreduce"),
                             _option(votes, "votes", "sign_allreduce"))
    if async_op:
        return work
    work.wait()
    return None


def sign_allreduce_packed(bits, numel, mode="vote", group=None, async_op=False):
    """Packed binary votes in (uint8, element j = bit j % 8 of byte j // 8, bit 1 = +1), the result
    out: an int8 tensor of -1/0/+1 (vote) or float32 means (mean). With ``async_op`` returns the Work;
    ``work.get_future().value()[0]`` is the tensor once it completes.
    """
    if _not_a_member(group):
        return None
    if not isinstance(bits, torch.Tensor):
        raise TypeError(f"pride.sign_allreduce_packed: expected a uint8 tensor, got {type(bits).__name__}")
    what = "sign_allreduce_packed"
    work = _C.sign_allreduce_packed(_pride_backend(group, what), bits, _whole_number(numel, "numel", what),
                                    _option(mode, "mode", what))
    if async_op:
        return work
    work.wait()
    return work.get_future().value()[0]


def compressed_allreduce_server_numel(numel, group=None):
    """How many elements of a ``numel``-element tensor this rank owns in ``compressed_allreduce``: the
    length of its ``server_error``. Ranks own contiguous chunks of 64-element words, in rank order."""
    if not dist.is_initialized():
        return _C.compressed_allreduce_server_numel(_whole_number(numel, "numel", "compressed_allreduce_server_numel"),
                                                    1, 0)
    return _C.compressed_allreduce_server_numel(_whole_number(numel, "numel", "compressed_allreduce_server_numel"),
                                                dist.get_world_size(group), dist.get_rank(group))


def compressed_allreduce(t, worker_error, server_error, group=None, async_op=False):
    """The error-compensated 1-bit allreduce of 1-bit Adam and 0/1 Adam, in place on float32 ``t``.

    Each rank adds ``worker_error`` to ``t``, sends its signs (+1 where y >= 0 or NaN) and one scale
    ``||y||_2 / sqrt(numel)``, and keeps y - scale*sign(y) as its new ``worker_error``. The owner of
    each chunk averages the ranks' scale*sign, adds its ``server_error``, compresses again with the
    chunk's own scale and keeps that loss; every rank receives the owners' signs and scales, so ``t``
    becomes the same compressed mean on every rank. 2(N-1)/N bits per element on the wire.

    ``worker_error``: float32, ``t.numel()`` elements; ``server_error``: float32,
    ``compressed_allreduce_server_numel(t.numel(), group)`` elements (zeros to start; both contiguous,
    updated in place, and part of the caller's state: save them to resume exactly). CPU or CUDA
    tensors (CUDA ones are compressed on their GPU; only the packed signs leave it). Returns a Work when
    ``async_op``. A NaN or infinity in y makes its scale NaN, so ``t`` and the errors kept are NaN on
    every rank from then on (as in DeepSpeed): skip such steps, or zero the errors where the result is not
    finite, as ``pride.ddp_hooks.onebit_hook`` does under GradScaler.
    """
    if _not_a_member(group):
        return None
    for name, x in (("t", t), ("worker_error", worker_error), ("server_error", server_error)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"pride.compressed_allreduce: {name} must be a torch.Tensor, got {type(x).__name__}")
    named = (("t", t), ("worker_error", worker_error), ("server_error", server_error))
    for i, (name_a, a) in enumerate(named):  # every one is written: a shared byte would be two things at once
        for name_b, b in named[i + 1:]:
            if _overlap(a, b):
                raise ValueError(f"pride.compressed_allreduce (rank {dist.get_rank()}): {name_a} and {name_b} share "
                                 "memory; each must be a tensor of its own")
    work = _C.compressed_allreduce(_pride_backend(group, "compressed_allreduce"), t, worker_error, server_error)
    if async_op:
        return work
    work.wait()
    return None


def level_vote(q, max_level, group=None, async_op=False):
    """In place on the int8 tensor ``q``: every rank gets sign(Σ_ranks q) per element (-1, 0 or +1).

    Every value must lie in [-max_level, max_level] (max_level in [1, 127]; ⌊127/N⌋ keeps any sum
    within int8), and the ranks must agree on ``q.numel()`` and ``max_level``: a violation raises on
    every rank, naming the rank whose values are out of range (with PRIDE_CHECK_FINGERPRINT=0 only that
    rank raises at once; the others time out waiting for it). This is Lion Cub's quantized
    aggregation with its sign applied (``DistributedLion(aggregation="levels")``): the same result as
    an int8 SUM allreduce followed by ``torch.sign``, at (N-1)/N · (planes + 2) bits per element, where
    planes = ceil(log2(2·max_level + 1)) (6 bits at N = 4, against the int8 ring's 12): each rank's
    levels travel as bit planes to the owner of their chunk, which sums them with bit-sliced counters.
    PRIDE_RESULT_CODING codes either phase as for sign_allreduce: the results as trits (1.6 bits for
    2), the levels in base 2·max_level + 1 where that packs better (levels ±1: 1.6 bits for 2, so 2.4
    bits per element at N = 4 instead of 3).
    CPU or CUDA tensors: a CUDA tensor is checked, packed and unpacked on its GPU, on pride's stream after
    the caller's, and only the planes cross to host memory. Returns a Work when ``async_op``.
    """
    if _not_a_member(group):
        return None
    if not isinstance(q, torch.Tensor):
        raise TypeError(f"pride.level_vote: expected a torch.Tensor, got {type(q).__name__}")
    work = _C.level_vote(_pride_backend(group, "level_vote"), q, _whole_number(max_level, "max_level", "level_vote"))
    if async_op:
        return work
    work.wait()
    return None


def stats(group=None):
    """Traffic counters of the group's pride backend: collectives issued, bytes sent and received,
    and the same per algorithm ("direct", "ring", "allreduce_ring", ...). device_bytes_sent is the part
    of bytes_sent that went straight from GPU memory (the CUDA device-memory path, PRIDE_CUDA_PATH)."""
    per_algorithm = _C.traffic(_pride_backend(group, "stats"))
    return {
        "collectives": sum(v["calls"] for k, v in per_algorithm.items() if k != "p2p"),
        "bytes_sent": sum(v["bytes_sent"] for v in per_algorithm.values()),
        "bytes_received": sum(v["bytes_received"] for v in per_algorithm.values()),
        "device_bytes_sent": sum(v["device_bytes_sent"] for v in per_algorithm.values()),
        "per_algorithm": per_algorithm,
    }


def reset_stats(group=None):
    """Zeroes the counters that stats() reports: operations completed before the call no longer count; one
    in flight at the call counts in full once it completes."""
    _C.reset_traffic(_pride_backend(group, "reset_stats"))
