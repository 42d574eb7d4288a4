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
    objects = gc.get_objects()
    # The types first (a few hundred, collected by C loops): isinstance on every object goes through
    # abc (DDP is a Joinable), twice the time, and most processes hold no DDP model at all.
    ddp_types = {t for t in set(map(type, objects)) if issubclass(t, DistributedDataParallel)}
    for obj in objects if ddp_types else ():
        if type(obj) in ddp_types:
            held = getattr(obj, "_module_parameters", None)
            if held is None:
                held = list(obj.module.parameters())
            if any(id(p) in ids for p in held):
                found.append(obj)
    return found


class OneBitHookState:
    """The state of ``onebit_hook``: its process group, the warm-up length, the iteration count and
    each bucket's error-feedback buffers (keyed by bucket index, as torch's PowerSGD hook keys its
    state). ``start_iter`` iterations all-reduce in full precision first, as DDP does by default; it
    must be at least 2 when DDP rebuilds its buckets after the first iteration (it does unless
    static_graph), so that errors are never kept for buckets that change.

    ``state_dict()`` / ``load_state_dict()`` save and restore the count and this rank's errors: save
    every rank's to resume exactly."""

    def __init__(self, process_group=None, start_iter=10):
        if not (isinstance(start_iter, int) and start_iter >= 0):
            raise ValueError(f"OneBitHookState: start_iter must be a non-negative int, got {start_iter!r}")
        self.process_group = process_group
        self.start_iter = start_iter
        self.iter = 0
        self.errors = {}  # bucket index -> (worker_error, server_error)

    def _errors_for(self, index, flat):
        from .collectives import compressed_allreduce_server_numel

        server_numel = compressed_allreduce_server_numel(flat.numel(), self.process_group)
        held = self.errors.get(index)
        if held is None or held[0].numel() != flat.numel() or held[1].numel() != server_numel:
            held = (torch.zeros(flat.numel(), dtype=torch.float32, device=flat.device),
                    torch.zeros(server_numel, dtype=torch.float32, device=flat.device))
            self.errors[index] = held
        return held

    def state_dict(self):
        return {"iter": self.iter, "start_iter": self.start_iter,
                "errors": {i: (w.clone(), s.clone()) for i, (w, s) in self.errors.items()}}

    def load_state_dict(self, state):
        self.iter = state["iter"]
        self.start_iter = state["start_iter"]
        self.errors = {i: (w.clone(), s.clone()) for i, (w, s) in state["errors"].items()}


def onebit_hook(state: OneBitHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """A DDP communication hook that averages each bucket's gradients with pride's 1-bit compressed
    allreduce (pride.compressed_allreduce: signs and one scale per rank, error feedback on workers and
    owners), 2(N-1)/N bits per element instead of DDP's 2(N-1)/N x 32. Any optimizer then runs on the
    compressed mean, the same on every rank. The first ``state.start_iter`` iterations use a plain
    float32 allreduce. Needs a pride process group::

        state = pride.ddp_hooks.OneBitHookState(start_iter=10)
        ddp_model.register_comm_hook(state, pride.ddp_hooks.onebit_hook)
    """
    from .collectives import compressed_allreduce

    group = state.process_group
    world = dist.get_world_size(group)
    buffer = bucket.buffer()
    warm_up = state.iter < state.start_iter
    if bucket.is_last():
        state.iter += 1
    if warm_up:
        buffer.div_(world)
        fut = dist.all_reduce(buffer, group=group, async_op=True).get_future()
        return fut.then(lambda f: f.value()[0])
    flat = buffer if buffer.dtype == torch.float32 else buffer.float()
    worker, server = state._errors_for(bucket.index(), flat)
    work = compressed_allreduce(flat, worker, server, group=group, async_op=True)

    def written_back(fut):
        fut.value()
        if flat is not buffer:
            buffer.copy_(flat)
        return buffer

    return work.get_future().then(written_back)
