"""Horovod-style helpers for people who come from there (hvd.init(), hvd.rank(), ...).

The broadcasts check first that every rank passed the same tensors (names, shapes, dtypes) and raise on
every rank when one did not, naming it: a mismatch must not leave the root waiting for a peer that has
already returned. The tensors then travel in place, a few large buckets rather than a call per tensor.
"""

import logging
import os
import pickle
import warnings
from collections.abc import Mapping

import torch
import torch.distributed as dist

_log = logging.getLogger("pride")

# Small tensors are flattened into buckets of this size per (device, dtype) and broadcast as one; a
# tensor at least this large goes alone, in place, so that no bucket copies a large tensor.
_BUCKET_BYTES = 32 << 20


def init(backend="pride", **kwargs):
    """Initialises the default group unless it exists. Under a launcher (torchrun sets RANK and
    WORLD_SIZE) it reads the launcher's environment (env://); a process started without one, and given
    no ``init_method`` or ``store``, becomes a world of one, as ``hvd.init()`` does."""
    if dist.is_initialized():
        existing = str(dist.get_backend())
        if backend not in existing:
            warnings.warn(f"pride.init({backend!r}): the default group already exists with backend "
                          f"{existing!r}; it is kept", stacklevel=2)
        return
    launched = "RANK" in os.environ or "WORLD_SIZE" in os.environ
    if not launched and not {"init_method", "store", "rank", "world_size"} & set(kwargs):
        kwargs = dict(kwargs, store=dist.HashStore(), rank=0, world_size=1)
    dist.init_process_group(backend, **kwargs)


def rank():
    return dist.get_rank()


def size():
    return dist.get_world_size()


def local_rank():
    """This process's rank among the group's processes on its host. Hosts are told apart by hostname
    (``PRIDE_HOSTNAME`` overrides it), as Horovod's MPI does, not by the launcher: two torchrun agents
    on one host give one host here, where each agent's ``LOCAL_RANK`` counts only its own processes."""
    return _topology()["local_rank"]


def local_size():
    """Number of the group's processes on this host (see ``local_rank``)."""
    return _topology()["local_size"]


def _topology():
    from . import _C
    from .collectives import _pride_backend

    return _C.topology(_pride_backend(None, "local_rank"))


def _named_tensors(params, who):
    """(name, tensor) pairs in an order that is the same on every rank: sorted by name where there are
    names, the caller's order for a plain list of tensors. None values are skipped, as in Horovod."""
    if isinstance(params, torch.nn.Module):
        raise TypeError(f"{who}: pass model.state_dict() or model.named_parameters(), not the module itself")
    if isinstance(params, Mapping):
        items = list(params.items())
    elif isinstance(params, torch.Tensor):
        raise TypeError(f"{who}: pass a list of tensors, not one tensor")
    else:
        items = list(params)
        if items and all(isinstance(i, tuple) for i in items):
            if not all(len(i) == 2 and isinstance(i[0], str) for i in items):
                raise TypeError(f"{who}: pairs must be (name, tensor)")
        else:
            items = [(None, t) for t in items]
    pairs = []
    for name, value in items:
        if value is None:
            continue
        if isinstance(name, str) and name.endswith("_extra_state") and not isinstance(value, torch.Tensor):
            continue  # a module's get_extra_state() object: not a tensor to broadcast
        if not isinstance(value, torch.Tensor):
            where = f"entry {name!r}" if name is not None else "an item"
            raise TypeError(f"{who}: {where} has type {type(value).__name__}, not a tensor")
        pairs.append((name, value))
    if pairs and pairs[0][0] is not None:
        pairs.sort(key=lambda kv: kv[0])
    return pairs


def _check_root(root_rank, who):
    world = dist.get_world_size()
    if not isinstance(root_rank, int) or not 0 <= root_rank < world:
        raise ValueError(f"{who}: root_rank {root_rank!r} is not in [0, {world})")


def _agree(description, who, what):
    """Every rank gathers every rank's ``description``; where one differs from rank 0's, every rank
    raises the same error, naming the first rank that differs and where."""
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, description)
    reference = everyone[0]
    for r, d in enumerate(everyone):
        if d == reference:
            continue
        if len(d) != len(reference):
            detail = f"{len(d)} entries against rank 0's {len(reference)}"
        else:
            i = next(i for i, (a, b) in enumerate(zip(d, reference)) if a != b)
            detail = f"entry {i} is {d[i]} against rank 0's {reference[i]}"
        raise ValueError(f"{who} (rank {dist.get_rank()}): rank {r} passed other {what} than rank 0: {detail}")


@torch.no_grad()
def _broadcast_in_place(tensors, root_rank):
    """Broadcasts ``tensors`` from ``root_rank`` in place: small ones flattened into buckets per (device,
    dtype), every bucket in flight at once, then copied back on the receivers."""
    alone, buckets, open_buckets = [], [], {}  # open_buckets: (device, dtype) -> [tensors, bytes]
    for t in tensors:
        if t.numel() == 0:
            continue
        size = t.numel() * t.element_size()
        if t.is_contiguous() and size >= _BUCKET_BYTES:
            alone.append(t)
            continue
        bucket = open_buckets.setdefault((t.device, t.dtype), [[], 0])
        bucket[0].append(t)
        bucket[1] += size
        if bucket[1] >= _BUCKET_BYTES:
            buckets.append(open_buckets.pop((t.device, t.dtype))[0])
    buckets.extend(bucket for bucket, _ in open_buckets.values())
    flats = [torch.cat([t.reshape(-1) for t in bucket]) for bucket in buckets]
    works = [dist.broadcast(t, src=root_rank, async_op=True) for t in alone + flats]
    for w in works:
        w.wait()
    if dist.get_rank() != root_rank:
        for bucket, flat in zip(buckets, flats):
            for t, part in zip(bucket, flat.split([t.numel() for t in bucket])):
                t.copy_(part.view(t.shape))


@torch.no_grad()
def broadcast_parameters(params, root_rank=0):
    """Copies ``root_rank``'s values into every rank's tensors, in place. ``params`` is a state_dict,
    an iterable of (name, tensor) pairs (e.g. ``model.named_parameters()``) or of tensors. Every rank
    must pass the same names, shapes and dtypes; where one does not, every rank raises."""
    who = "pride.broadcast_parameters"
    _check_root(root_rank, who)
    pairs = _named_tensors(params, who)
    _agree([(name, tuple(t.shape), str(t.dtype)) for name, t in pairs], who, "tensors")
    _broadcast_in_place([t for _, t in pairs], root_rank)


class _Slot:
    """Where a tensor of the root's optimizer state goes: the receivers make one of this shape and dtype,
    on the CPU or on the device of their own parameter (the root's device may not exist elsewhere)."""

    def __init__(self, index, tensor):
        self.index = index
        self.shape = tuple(tensor.shape)
        self.dtype = tensor.dtype
        self.on_cpu = tensor.device.type == "cpu"


def _split_tensors(value, tensors, skip_keys):
    """``value`` with each tensor replaced by a _Slot (the tensors appended to ``tensors``), and the
    entries named in ``skip_keys`` left out."""
    if isinstance(value, torch.Tensor):
        tensors.append(value)
        return _Slot(len(tensors) - 1, value)
    if isinstance(value, dict):
        return {k: _split_tensors(v, tensors, skip_keys) for k, v in value.items() if k not in skip_keys}
    if isinstance(value, (list, tuple)):
        parts = [_split_tensors(v, tensors, skip_keys) for v in value]
        return parts if isinstance(value, list) else tuple(parts)
    return value


def _fill_slots(value, make):
    if isinstance(value, _Slot):
        return make(value)
    if isinstance(value, dict):
        return {k: _fill_slots(v, make) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        parts = [_fill_slots(v, make) for v in value]
        return parts if isinstance(value, list) else tuple(parts)
    return value


def broadcast_optimizer_state(optimizer, root_rank=0):
    """Makes every rank's optimizer state and hyper-parameters equal to ``root_rank``'s. The scalars
    travel pickled, the state tensors in place. State that belongs to each rank (the error feedback of
    OneBitAdam and ZeroOneAdam) is not sent: each rank keeps its own. Every rank must hold the same
    parameters (groups, shapes, dtypes); where one does not, or where one cannot load the state, every
    rank raises."""
    who = "pride.broadcast_optimizer_state"
    _check_root(root_rank, who)
    params = [p for group in optimizer.param_groups for p in group["params"]]
    _agree([(type(optimizer).__name__, i, tuple(p.shape), str(p.dtype))
            for i, group in enumerate(optimizer.param_groups) for p in group["params"]], who, "parameters")
    me = dist.get_rank()
    per_rank = set(getattr(optimizer, "_PER_RANK", ()))
    tensors, message = [], [None]
    if me == root_rank:
        skeleton = _split_tensors(optimizer.state_dict(), tensors, per_rank)
        try:
            message[0] = ("state", pickle.dumps(skeleton))
        except Exception as e:  # the receivers must hear of it, or they would wait for the state forever
            message[0] = ("error", f"{type(e).__name__}: {e}")
    dist.broadcast_object_list(message, src=root_rank)
    kind, payload = message[0]
    if kind == "error":
        raise ValueError(f"{who} (rank {me}): rank {root_rank} could not pickle its optimizer state: {payload}")
    if me != root_rank:
        skeleton = pickle.loads(payload)
        devices = {}  # slot -> the device of the parameter whose state it is
        for index, entry in skeleton["state"].items():
            for value in entry.values():
                if isinstance(value, _Slot) and isinstance(index, int) and index < len(params):
                    devices[value.index] = params[index].device
        default_device = params[0].device if params else torch.device("cpu")
        received = {}

        def make(slot):
            device = "cpu" if slot.on_cpu else devices.get(slot.index, default_device)
            received[slot.index] = torch.empty(slot.shape, dtype=slot.dtype, device=device)
            return received[slot.index]

        skeleton = _fill_slots(skeleton, make)
        tensors = [received[i] for i in range(len(received))]  # in the root's order
    _broadcast_in_place(tensors, root_rank)
    failure = None
    if me != root_rank:
        if per_rank:  # each rank's own error feedback, where it has some and the root's state has the entry
            own = optimizer.state_dict()["state"]
            for index, entry in skeleton["state"].items():
                for key in per_rank & set(own.get(index, {})):
                    entry[key] = own[index][key]
        try:
            optimizer.load_state_dict(skeleton)
        except Exception as e:
            failure = f"{type(e).__name__}: {e}"
    failures = [None] * dist.get_world_size()
    dist.all_gather_object(failures, failure)
    failed = [(r, f) for r, f in enumerate(failures) if f is not None]
    if failed:
        raise ValueError(f"{who} (rank {me}): rank {failed[0][0]} could not load rank {root_rank}'s state: "
                         f"{failed[0][1]}")
