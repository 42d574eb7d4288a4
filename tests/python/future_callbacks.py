"""What a Future's callbacks may do, on pride as on Gloo, over CPU or CUDA tensors: issue and wait for
another collective of the same group (torch's PowerSGD hook does, in compute_qs), and compute with
autograd as on the caller's thread. The callbacks of pride's operations once ran on the group's worker
thread, the only one that runs its operations: the inner wait never ended, and they ran below autograd.
Used by test_collectives.py (CPU) and test_cuda.py (CUDA)."""

import torch
import torch.distributed as dist

from distributed_harness import init_group

# Gloo's process groups, kept until the worker process exits (os._exit: no destructor runs). torch's
# ProcessGroupGloo joins its threads in its destructor; where a callback's closure on one of those threads
# held the group's last reference (the main thread had returned already), the destructor ran there and
# joined its own thread: "terminate called ... Resource deadlock avoided" (seen 2026-11-30 in CI and in a
# loop, 1 run in 8; core: ~ProcessGroupGloo -> std::thread::join). It is torch's race, in the oracle run.
_GLOO_GROUPS_KEPT = []


def future_callbacks(rank, world, store_path, backend, out_path, device):
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook

    init_group(rank, world, store_path, backend=backend, timeout_s=60)
    if backend == "gloo":
        _GLOO_GROUPS_KEPT.append(dist.group.WORLD)
    if device == "cuda":
        torch.cuda.set_device(0)  # the ranks share the one GPU
    # A chain: each callback all-reduces the next tensor and waits for it, from inside the callback.
    tensors = [torch.full((1 << 16,), float(rank + i), device=device) for i in range(4)]

    def next_one(i):
        def callback(fut):
            if i < len(tensors):
                dist.all_reduce(tensors[i], async_op=True).get_future().wait()
            return fut.value()
        return callback

    fut = dist.all_reduce(tensors[0], async_op=True).get_future()
    for i in range(1, len(tensors) + 1):
        fut = fut.then(next_one(i))
    fut.wait()
    for i, t in enumerate(tensors):
        assert torch.equal(t, torch.full_like(t, float(sum(r + i for r in range(world))))), (backend, i)

    # A callback computes as the caller would: autograd records, in-place ops count versions.
    x = torch.ones(3, requires_grad=True)
    counted = torch.zeros(3)
    seen = {}

    def autograd_callback(fut):
        seen["grad_fn"] = (x * 2).sum().grad_fn is not None
        before = counted._version
        counted.add_(1)
        seen["version"] = counted._version > before
        return fut.value()

    dist.all_reduce(torch.ones(1 << 22, device=device), async_op=True).get_future().then(autograd_callback).wait()
    assert seen["grad_fn"] and seen["version"], (backend, seen)

    if device == "cuda":
        # The callback's stream waits for the operation's end: the input is written behind a long kernel
        # on the caller's stream, and the callback reads the result on its own.
        y = torch.full((1 << 22,), -1.0, device=device)
        torch.cuda._sleep(100_000_000)
        y.fill_(float(rank + 1))
        doubled = dist.all_reduce(y, async_op=True).get_future().then(lambda f: f.value()[0] * 2).wait()
        assert torch.equal(doubled, torch.full_like(y, 2.0 * sum(r + 1 for r in range(world)))), backend

    # torch's PowerSGD DDP hook: its first compressed step waits for an allreduce inside a callback.
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to(device)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[0] if device == "cuda" else None)
    state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=2, start_powerSGD_iter=2)
    ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    g = torch.Generator(device=device).manual_seed(rank)
    for _ in range(5):
        opt.zero_grad()
        ddp(torch.randn(16, 32, generator=g, device=device)).pow(2).mean().backward()
        opt.step()
    if rank == 0:
        torch.save([p.detach().cpu() for p in model.parameters()], out_path)
    dist.destroy_process_group()
