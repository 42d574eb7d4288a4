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
