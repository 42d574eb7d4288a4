"""What pride's optimizers add to torch.optim.Optimizer.add_param_group: a parameter listed twice in one
group is an error, not torch's warning. pride steps a group's tensors in fused launches (one kernel over
every slice on CUDA, a flat buffer for the compressed Adams), so a tensor listed twice would be written by
two slices at once: a race, where torch's per-tensor loop steps it twice."""

import torch


def no_duplicates(param_group, optimizer):
    """Raises ValueError when param_group lists a tensor twice; leaves its "params" a list (it may be
    given as a generator, which the check must not use up before torch reads it)."""
    params = param_group["params"]
    if isinstance(params, torch.Tensor):
        return
    if isinstance(params, set):  # torch refuses sets (their order varies): its error, not ours
        return
    params = list(params)
    param_group["params"] = params
    seen = {}
    for i, p in enumerate(params):
        if isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str):
            p = p[1]  # named parameters: (name, tensor) pairs, which torch accepts
        first = seen.setdefault(id(p), i)
        if first != i:
            raise ValueError(f"{optimizer}: a parameter group lists the same tensor twice (positions {first} and {i}, "
                             f"shape {tuple(p.shape)}); pride steps a group's tensors together, so each must appear once")
    _no_shared_elements(params, optimizer)


def _extent(t):
    """The bytes of its storage that a strided tensor can touch: [first, end)."""
    last = sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride()))
    first = t.storage_offset() * t.element_size()
    return first, first + (last + 1) * t.element_size()


def _share_elements(a, b, first, end):
    """Whether two tensors of one storage, both within elements [first, end) of it, share an element:
    a byte mask of that window, marked through a's strides and read through b's (views that interleave,
    such as x[::2] and x[1::2], share none)."""
    mask = torch.zeros(end - first, dtype=torch.bool)
    mask.as_strided(a.shape, a.stride(), a.storage_offset() - first).fill_(True)
    return bool(mask.as_strided(b.shape, b.stride(), b.storage_offset() - first).any())


def _no_shared_elements(params, optimizer):
    """Raises ValueError when two distinct tensors of a group share memory (W and W.t() registered as two
    parameters, or overlapping slices of one buffer): the fused steps would write the shared elements
    from two slices at once, and a non-contiguous parameter, stepped in a copy written back, would undo
    the other's step. Views of one buffer that do not overlap (a flat buffer carved into parameters)
    are accepted."""
    tensors = [p[1] if isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) else p for p in params]
    by_storage = {}
    for i, t in enumerate(tensors):
        if not isinstance(t, torch.Tensor) or t.numel() == 0 or t.layout != torch.strided or t.device.type == "meta":
            continue
        if isinstance(t, torch._subclasses.FakeTensor):  # tracing or memory estimates: no real memory
            continue
        try:
            where = t.untyped_storage().data_ptr()
        except (RuntimeError, NotImplementedError):  # a tensor subclass without a storage of its own (DTensor)
            continue
        if where == 0:  # no memory behind it (lazy or fake tensors)
            continue
        by_storage.setdefault((t.device, where), []).append((i, t))
    for views in by_storage.values():
        if len(views) < 2:
            continue
        spans = sorted((_extent(t), i, t) for i, t in views)
        for k, ((start, end), i, a) in enumerate(spans):
            for (other_start, other_end), j, b in spans[k + 1:]:
                if other_start >= end:
                    break
                # Extents that meet may still interleave (x[::2] and x[1::2]): compare the elements.
                size = a.element_size()
                if b.element_size() == size and not _share_elements(a, b, start // size, max(end, other_end) // size):
                    continue
                first, second = sorted((i, j))
                raise ValueError(f"{optimizer}: the tensors at positions {first} and {second} of a parameter group "
                                 f"share memory (shapes {tuple(tensors[first].shape)} and {tuple(tensors[second].shape)}, "
                                 "one storage); pride steps a group's tensors together, so each element must belong "
                                 "to one parameter")
