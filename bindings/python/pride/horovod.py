"""Horovod-style helpers for people who come from there (hvd.init(), hvd.rank(), ...).

The broadcasts check first that every rank passed the same tensors (names, shapes, dtypes) and raise on
every rank when one did not, naming it: a mismatch must not leave the root waiting for a peer that has
already returned. Likewise, a step that fails on one rank (its arguments, the root's pickling, a receiver's
allocation or load) is told to every rank at the next gather instead of leaving them waiting for it. The
tensors then travel in place, a few large buckets rather than a call per tensor.
"""

import collections
import logging
import os
import pickle
import warnings
from collections.abc import Mapping

import torch
import torch.distributed as dist

_log = logging.getLogger("pride")

# Small tensors are flattened into buckets of this size per dtype and kind of device (CPU or not) and
# broadcast as one; a tensor at least this large goes alone (in place where it is contiguous). Which
# tensors share a bucket follows from what the ranks have agreed on (sizes, dtypes, kinds of device):
# never from layouts, which may differ between ranks. At most _STAGED_BYTES of buckets are in flight,
# and one tensor's staging more (an allocation that fails there leaves the other ranks to time out).
_BUCKET_BYTES = 32 << 20
_STAGED_BYTES = 2 * _BUCKET_BYTES


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
    """This process's rank among the group's processes on its host. A host is a hostname
    (``PRIDE_HOSTNAME`` overrides it) on one machine (the kernel's boot id), as Horovod's MPI counts, not
    the launcher's: two torchrun agents on one host give one host here, where each agent's
    ``LOCAL_RANK`` counts only its own processes."""
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
    if not isinstance(root_rank, int) or isinstance(root_rank, bool) or not 0 <= root_rank < world:
        raise ValueError(f"{who}: root_rank {root_rank!r} is not in [0, {world})")


def _all_or_none(who, doing, error, payload=None):
    """Gathers (error, payload) from every rank. Where some rank had an error every rank raises: a rank
    its own TypeError or ValueError as it was, else a ValueError naming the first rank that failed and
    what it was ``doing``. Returns the ranks' payloads."""
    everyone = [None] * dist.get_world_size()
    told = None if error is None else f"{type(error).__name__}: {error}"
    dist.all_gather_object(everyone, (told, payload))
    failed = [(r, e) for r, (e, _) in enumerate(everyone) if e is not None]
    if isinstance(error, (TypeError, ValueError)):
        raise error
    if failed:
        r, e = failed[0]
        raise ValueError(f"{who} (rank {dist.get_rank()}): rank {r} {doing}: {e}") from error
    return [p for _, p in everyone]


def _agree(who, what, error, description):
    """Every rank gathers every rank's ``description`` (or its error, see _all_or_none); where one
    differs from rank 0's, every rank raises the same error, naming the first rank that differs and
    where."""
    everyone = _all_or_none(who, f"could not describe its {what}", error, description)
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
    """Broadcasts ``tensors`` from ``root_rank`` in place: small ones flattened into buckets per dtype,
    large ones alone; a bounded number of buckets in flight, copied back on the receivers as they land."""
    receiving = dist.get_rank() != root_rank
    in_flight = collections.deque()  # (work, tensors, staging buffer or None)
    staged = 0

    def land_oldest():
        nonlocal staged
        work, bucket, flat = in_flight.popleft()
        work.wait()
        if flat is None:
            return
        if receiving:
            offset = 0
            for t in bucket:
                t.copy_(flat[offset:offset + t.numel()].view(t.shape))
                offset += t.numel()
        staged -= flat.numel() * flat.element_size()

    def send(bucket):
        nonlocal staged
        flat = None
        if len(bucket) == 1 and bucket[0].is_contiguous():
            buffer = bucket[0]
        else:
            first = bucket[0]
            buffer = flat = torch.empty(sum(t.numel() for t in bucket), dtype=first.dtype, device=first.device)
            staged += flat.numel() * flat.element_size()
            if not receiving:  # only the root's values travel
                offset = 0
                for t in bucket:
                    flat[offset:offset + t.numel()].view(t.shape).copy_(t)
                    offset += t.numel()
        in_flight.append((dist.broadcast(buffer, src=root_rank, async_op=True), bucket, flat))
        while staged > _STAGED_BYTES and len(in_flight) > 1:
            land_oldest()

    open_buckets = {}  # (dtype, on the CPU) -> [tensors, bytes]
    for t in tensors:
        size = t.numel() * t.element_size()
        if size == 0:
            continue
        if size >= _BUCKET_BYTES:
            send([t])
            continue
        key = (t.dtype, t.device.type == "cpu")  # a CPU "step" beside CUDA moments: no copies across
        bucket = open_buckets.setdefault(key, [[], 0])
        bucket[0].append(t)
        bucket[1] += size
        if bucket[1] >= _BUCKET_BYTES:
            send(open_buckets.pop(key)[0])
    for bucket, _ in open_buckets.values():
        send(bucket)
    while in_flight:
        land_oldest()


@torch.no_grad()
def broadcast_parameters(params, root_rank=0):
    """Copies ``root_rank``'s values into every rank's tensors, in place. ``params`` is a state_dict,
    an iterable of (name, tensor) pairs (e.g. ``model.named_parameters()``) or of tensors. Every rank
    must pass the same names, shapes and dtypes; where one does not, every rank raises."""
    who = "pride.broadcast_parameters"
    pairs, description, error = [], None, None
    try:
        _check_root(root_rank, who)
        pairs = _named_tensors(params, who)
        description = [(name, tuple(t.shape), str(t.dtype), "cpu" if t.device.type == "cpu" else "device")
                       for name, t in pairs]
    except Exception as e:  # told to every rank by the gather below, which they all enter
        error = e
    _agree(who, "tensors", error, description)
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


def _receivers_tensors(optimizer, params, skeleton):
    """The tensors a receiver fills, in the root's order, and the skeleton holding them. A state tensor
    this optimizer already has, of the same shape, dtype and kind of device, is filled in place (no second
    copy of the state); the others are made on the CPU or on their parameter's device."""
    received = {}
    # Memory that a reused tensor must not share: a parameter's (an optimizer may keep a view of it), or
    # another reused tensor's (two entries holding one tensor would take one value). Only a tensor that is
    # the whole of a storage of its own qualifies.
    taken = {p.untyped_storage().data_ptr() for p in params}

    def reusable(have, slot):
        if not (torch.is_tensor(have) and tuple(have.shape) == slot.shape and have.dtype == slot.dtype
                and (have.device.type == "cpu") == slot.on_cpu and have.numel() > 0):
            return False
        storage = have.untyped_storage()
        return storage.data_ptr() not in taken and storage.nbytes() == have.numel() * have.element_size()

    for index, entry in skeleton["state"].items():
        if not (isinstance(index, int) and 0 <= index < len(params)):
            continue
        current = optimizer.state.get(params[index], {})
        for key, slot in entry.items():
            if not isinstance(slot, _Slot):
                continue
            have = current.get(key)
            if reusable(have, slot):
                taken.add(have.untyped_storage().data_ptr())
                received[slot.index] = have
            else:
                device = "cpu" if slot.on_cpu else params[index].device
                received[slot.index] = torch.empty(slot.shape, dtype=slot.dtype, device=device)
    default_device = params[0].device if params else torch.device("cpu")

    def make(slot):
        if slot.index not in received:
            device = "cpu" if slot.on_cpu else default_device
            received[slot.index] = torch.empty(slot.shape, dtype=slot.dtype, device=device)
        return received[slot.index]

    skeleton = _fill_slots(skeleton, make)
    return skeleton, [received[i] for i in range(len(received))]


def broadcast_optimizer_state(optimizer, root_rank=0):
    """Makes every rank's optimizer state and hyper-parameters equal to ``root_rank``'s. The scalars
    travel pickled, the state tensors in place (into the receivers' own state tensors where they have
    them). State that belongs to each rank (the error feedback of OneBitAdam and ZeroOneAdam) is not sent:
    each rank keeps its own. Every rank must hold the same parameters (groups, shapes, dtypes); where one
    does not, or where a step fails on one rank, every rank raises (a receiver's state may then hold some
    of the root's values)."""
    who = "pride.broadcast_optimizer_state"
    me = dist.get_rank()
    params, description, error = [], None, None
    try:
        _check_root(root_rank, who)
        params = [p for group in optimizer.param_groups for p in group["params"]]
        description = [(type(optimizer).__name__, i, tuple(p.shape), str(p.dtype))
                       for i, group in enumerate(optimizer.param_groups) for p in group["params"]]
    except Exception as e:
        error = e
    _agree(who, "parameters", error, description)
    per_rank = set(getattr(optimizer, "_PER_RANK", ()))
    tensors, message = [], [None]
    if me == root_rank:
        try:
            skeleton = _split_tensors(optimizer.state_dict(), tensors, per_rank)
            message[0] = ("state", pickle.dumps(skeleton))
        except Exception as e:  # the receivers must hear of it, or they would wait for the state forever
            message[0] = ("error", f"{type(e).__name__}: {e}")
    dist.broadcast_object_list(message, src=root_rank)
    kind, payload = message[0]
    if kind == "error":
        raise ValueError(f"{who} (rank {me}): rank {root_rank} could not send its optimizer state: {payload}")
    error = None
    if me != root_rank:
        try:
            skeleton, tensors = _receivers_tensors(optimizer, params, pickle.loads(payload))
        except Exception as e:
            error = e
    _all_or_none(who, "could not make room for the state", error)
    _broadcast_in_place(tensors, root_rank)
    error = None
    if me != root_rank:
        try:
            if per_rank:  # each rank's own error feedback, where it has some and the root's state has the entry
                own = optimizer.state_dict()["state"]
                for index, entry in skeleton["state"].items():
                    for key in per_rank & set(own.get(index, {})):
                        entry[key] = own[index][key]
            optimizer.load_state_dict(skeleton)
        except Exception as e:
            error = e
    _all_or_none(who, f"could not load rank {root_rank}'s state", error)
