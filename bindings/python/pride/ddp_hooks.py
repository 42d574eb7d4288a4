"""DistributedDataParallel communication hooks for optimizers that communicate themselves.

DDP all-reduces every gradient in fp32 before the optimizer runs. DistributedLion needs each rank's
own gradient (it votes on the ranks' local updates, 1 bit per parameter), so under plain DDP it would
vote on an average that every rank already shares: the vote is unanimous and the 30x saving is gone.
``local_gradients_hook`` hands DDP the local gradients back without sending anything. DDP keeps the
rest of its job: the parameter and buffer broadcast at construction, buffer sync in forward,
find_unused_parameters and join. Register it with ``DistributedLion.attach(ddp_model)``, or yourself::

    ddp_model.register_comm_hook(None, pride.ddp_hooks.local_gradients_hook)

With a hook registered DDP does not divide by the world size (the default hook does), so each rank's
gradients are exactly those of the unwrapped model. One difference stays: under
find_unused_parameters, DDP gives a parameter that this rank did not use a zero gradient where the
unwrapped model has none (None abstains in DistributedLion's vote; zeros vote with the momentum).
"""

import torch
import torch.distributed as dist


def local_gradients_hook(state: object, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """A DDP communication hook that communicates nothing: the bucket's gradients stay this rank's."""
    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


def has_local_gradients_hook(ddp_model):
    """Whether ``local_gradients_hook`` is registered on this DDP model."""
    return any(hook is local_gradients_hook for hook, _ in getattr(ddp_model, "_comm_hooks", []))


def ddp_models_holding(params):
    """The live DistributedDataParallel models whose parameters include any of ``params``. DDP keeps no
    registry of its instances and marks nothing on the parameters, so this looks through the objects
    the garbage collector tracks: run once per optimizer, not per step."""
    import gc

    from torch.nn.parallel import DistributedDataParallel

    ids = {id(p) for p in params}
    found = []
    for obj in gc.get_objects():
        if isinstance(obj, DistributedDataParallel):
            held = getattr(obj, "_module_parameters", None)
            if held is None:
                held = list(obj.module.parameters())
            if any(id(p) in ids for p in held):
                found.append(obj)
    return found
