"""Horovod-style helpers for people who come from there (hvd.init(), hvd.rank(), ...)."""

import torch
import torch.distributed as dist


def init(backend="pride", **kwargs):
    """Initialises the default group from the launcher's environment (env://) unless already done."""
    if not dist.is_initialized():
        dist.init_process_group(backend, **kwargs)


def rank():
    return dist.get_rank()


def size():
    return dist.get_world_size()


def local_rank():
    """This process's rank among the group's processes on its host (learnt from hostnames)."""
    return _topology()["local_rank"]


def local_size():
    """Number of the group's processes on this host."""
    return _topology()["local_size"]


def _topology():
    from . import _C
    from .collectives import _pride_backend

    return _C.topology(_pride_backend(None, "local_rank"))


def _tensors(params):
    if isinstance(params, dict):
        return [t for _, t in sorted(params.items())]
    items = list(params)
    if items and isinstance(items[0], tuple):
        return [t for _, t in sorted(items, key=lambda kv: kv[0])]
    return items


@torch.no_grad()
def broadcast_parameters(params, root_rank=0):
    """Copies ``root_rank``'s values into every rank's tensors, in place. ``params`` is a state_dict,
    an iterable of (name, tensor) pairs (e.g. ``model.named_parameters()``) or of tensors."""
    for t in _tensors(params):
        if isinstance(t, torch.Tensor):
            dist.broadcast(t.data if isinstance(t, torch.nn.Parameter) else t, src=root_rank)


def broadcast_optimizer_state(optimizer, root_rank=0):
    """Makes every rank's optimizer state (and hyper-parameters) equal to ``root_rank``'s."""
    state = [optimizer.state_dict() if dist.get_rank() == root_rank else None]
    dist.broadcast_object_list(state, src=root_rank)
    if dist.get_rank() != root_rank:
        optimizer.load_state_dict(state[0])
