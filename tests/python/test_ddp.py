"""DistributedDataParallel on CPU over pride gives the same training as over Gloo."""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from distributed_harness import init_group, run


def _train(backend_group, rank, steps=3):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    ddp = DDP(model, process_group=backend_group)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(100 + rank)
    for _ in range(steps):
        x = torch.randint(-3, 4, (8, 16), generator=g).float()
        y = torch.randint(0, 4, (8,), generator=g)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def _ddp(rank, world, store_path):
    init_group(rank, world, store_path)
    gloo = dist.new_group(backend="gloo")
    with_pride = _train(None, rank)
    with_gloo = _train(gloo, rank)
    for a, b in zip(with_pride, with_gloo):
        # Different summation orders: equal up to float32 rounding.
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), (a - b).abs().max()
    # and the replicas agree with each other exactly
    flat = torch.cat([p.flatten() for p in with_pride])
    gathered = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    assert all(torch.equal(gathered[0], g) for g in gathered)
    dist.destroy_process_group()


def test_ddp_step_matches_gloo():
    run(_ddp, 2)
