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


def _lion_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8))


def _lion_training(rank, wrap, steps=4):
    """DistributedLion on a model trained as is (wrap None) or under DDP ("attach": opt.attach(ddp);
    "auto": nothing; "own_hook": DDP with torch's allreduce hook). Returns the parameters and the
    bytes pride sent in each step (forward, backward and optimizer step)."""
    import pride
    from pride.optim import DistributedLion
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    model = _lion_model()
    net = model
    if wrap is not None:
        net = DDP(model)
        if wrap == "own_hook":
            net.register_comm_hook(dist.group.WORLD, allreduce_hook)
    opt = DistributedLion(model.parameters(), lr=0.01)
    if wrap == "attach":
        assert opt.attach(net) is net
    g = torch.Generator().manual_seed(100 + rank)
    sent = []
    for _ in range(steps):
        x = torch.randn(16, 64, generator=g)
        y = torch.randint(0, 8, (16,), generator=g)
        pride.reset_stats()
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
        sent.append(pride.stats()["bytes_sent"])
    return [p.detach().clone() for p in model.parameters()], sent


def _assert_replicas_identical(params, world):
    flat = torch.cat([p.flatten() for p in params])
    gathered = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    assert all(torch.equal(gathered[0], g) for g in gathered)


def _ddp_with_distributed_lion(rank, world, store_path):
    import warnings

    init_group(rank, world, store_path)
    alone, alone_sent = _lion_training(rank, None)
    # attach(): DDP sends no gradients; training is bit for bit the unwrapped model's, and so is the traffic.
    attached, attached_sent = _lion_training(rank, "attach")
    for a, b in zip(alone, attached):
        assert torch.equal(a, b)
    grad_bytes = sum(p.numel() * 4 for p in attached)
    assert alone_sent[-1] < grad_bytes / 8, alone_sent  # the vote: a few bits per parameter
    for step, (a, b) in enumerate(zip(alone_sent, attached_sent)):
        assert b <= 1.1 * a, f"step {step}: {b} bytes under DDP with attach(), {a} without DDP"
    # Nothing done: the first step finds the DDP model and attaches itself (that step's allreduce was
    # DDP's); from then on, the vote's traffic.
    auto, auto_sent = _lion_training(rank, "auto")
    assert auto_sent[0] > grad_bytes, auto_sent
    for step in range(1, len(auto_sent)):
        assert auto_sent[step] <= 1.1 * alone_sent[step], (auto_sent, alone_sent)
    _assert_replicas_identical(auto, world)
    # A hook of the user's own that still all-reduces: a warning that says what it costs, once.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        own, _ = _lion_training(rank, "own_hook")
    messages = [str(w.message) for w in caught if "DistributedDataParallel" in str(w.message)]
    assert len(messages) == 1 and "MB per step" in messages[0] and "local_gradients_hook" in messages[0], messages
    _assert_replicas_identical(own, world)
    dist.destroy_process_group()


def test_ddp_wrapped_distributed_lion_sends_only_the_vote():
    run(_ddp_with_distributed_lion, 2)


def _uneven_inputs_under_join(rank, world, store_path):
    from torch.distributed.algorithms.join import Join

    from pride.optim import DistributedLion

    init_group(rank, world, store_path)
    model = _lion_model()
    ddp = DDP(model)
    opt = DistributedLion(model.parameters(), lr=0.01)
    opt.attach(ddp)
    g = torch.Generator().manual_seed(100 + rank)
    batches = 5 if rank == 0 else 3  # rank 1 runs out two steps early
    with Join([ddp, opt]):
        for step in range(batches):
            x = torch.randn(16, 64, generator=g)
            y = torch.randint(0, 8, (16,), generator=g)
            opt.zero_grad()
            torch.nn.functional.cross_entropy(ddp(x), y).backward()
            if rank == 0 and step >= 3:
                # Rank 1 has joined and abstains: the vote is rank 0's alone, plain Lion on its gradient.
                expected = []
                for p in model.parameters():
                    m = opt.state[p]["exp_avg"]
                    c = m * 0.9 + p.grad * (1 - 0.9)
                    expected.append(p.detach() - 0.01 * torch.sign(c))
            opt.step()
            if rank == 1 and step == batches - 1:
                momentum_when_joining = [opt.state[p]["exp_avg"].clone() for p in model.parameters()]
            if rank == 0 and step >= 3:
                for p, e in zip(model.parameters(), expected):
                    assert torch.allclose(p, e, atol=1e-7), (step, (p - e).abs().max())
    if rank == 1:
        for p, m in zip(model.parameters(), momentum_when_joining):
            assert torch.equal(opt.state[p]["exp_avg"], m), "a joined rank's momentum must be left as it was"
    _assert_replicas_identical(list(model.parameters()), world)
    dist.destroy_process_group()


def test_uneven_inputs_under_join_keep_replicas_identical():
    run(_uneven_inputs_under_join, 2, deadline_s=90)


# ---- FSDP2 (fully_shard) over pride, against the same training over Gloo ----

def _fsdp2_train(group, rank):
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 4))
    mesh = DeviceMesh.from_group(group, "cpu")
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(100 + rank)
    for _ in range(4):
        x = torch.randn(8, 16, generator=g)
        y = torch.randint(0, 4, (8,), generator=g)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return [p.full_tensor().detach().clone() for p in model.parameters()]  # DTensor shards, gathered


def _fsdp2(rank, world, store_path):
    init_group(rank, world, store_path)
    gloo = dist.new_group(backend="gloo")
    with_pride = _fsdp2_train(dist.group.WORLD, rank)
    with_gloo = _fsdp2_train(gloo, rank)
    for a, b in zip(with_pride, with_gloo):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), (a - b).abs().max()
    dist.destroy_process_group()


def test_fsdp2_trains_like_over_gloo():
    run(_fsdp2, 2)
