"""pride.ddp_hooks.onebit_hook's error-feedback state under DDP's changing buckets: resume against the
uninterrupted run bit for bit, start_iter 0 and 1 against a float64 reference of the compressed
allreduce with errors kept per parameter layout, state dicts saved in the old (bucket index) format or
by rank 0 only, and an overflow under GradScaler against DDP's own hook.

The model uses three same-shaped layers in forward in another order than registered (a, c, b, d), so
DDP's buckets after its rebuild (the order gradients become ready) differ from its initial ones (all
parameters in one bucket, or with ``bucket_cap_mb_list`` the reverse registration order), and buckets of
equal numel hold different parameters at the same bucket index."""

import io
import logging

import numpy as np
import pytest
import torch
import torch.distributed as dist

import distributed_harness as harness
from test_onebit import _reference_round  # the float64 oracle of the compressed allreduce

# DDP settings whose buckets change after DDP's first iteration (second under static_graph):
# - bucket_cap_mb: one bucket of everything at first, then two buckets of several parameters;
# - bucket_cap_mb_list: one parameter per bucket throughout, in another order after the rebuild.
_CAP = {"bucket_cap_mb": 0.0012}
_PER_PARAMETER = {"bucket_cap_mb_list": [1e-6]}


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(16, 16)
        self.b = torch.nn.Linear(16, 16)
        self.c = torch.nn.Linear(16, 16)
        self.d = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.d(self.b(torch.tanh(self.c(torch.tanh(self.a(x))))))


def _batch(step, rank):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)


def _loss(model, step, rank, device="cpu"):
    x, y = _batch(step, rank)
    return torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))


def _train(ddp, opt, steps, device="cpu"):
    rank = dist.get_rank()
    for step in steps:
        opt.zero_grad()
        _loss(ddp, step, rank, device).backward()
        opt.step()


def _assert_replicas_equal(params):
    flat = torch.cat([p.detach().reshape(-1) for p in params])
    everyone = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, flat)
    assert all(torch.equal(everyone[0], f) for f in everyone), "replicas differ"




# ---- 1. Resume: a fresh DDP model, optimizer and hook state loaded from a checkpoint continue exactly --

def _resume_worker(rank, world_size, store_path, device="cpu"):
    import pride
    from torch.nn.parallel import DistributedDataParallel

    harness.init_group(rank, world_size, store_path)
    if device == "cuda":  # every rank on the one GPU; DDP's buckets and the hook's errors live there
        torch.cuda.set_device(0)
    start_iter, saved_at, steps = 2, 5, 8
    for ddp_kwargs, pass_model in ((_CAP, False), (_PER_PARAMETER, True), ({**_CAP, "static_graph": True}, True)):
        def build(seed):
            torch.manual_seed(seed)
            net = _Net().to(device)
            ddp = DistributedDataParallel(net, **ddp_kwargs)
            state = pride.ddp_hooks.OneBitHookState(start_iter=start_iter, **({"model": ddp} if pass_model else {}))
            ddp.register_comm_hook(state, pride.ddp_hooks.onebit_hook)
            return net, ddp, torch.optim.Adam(net.parameters(), lr=1e-2), state

        net, ddp, opt, state = build(0)
        _train(ddp, opt, range(saved_at), device)
        checkpoint = io.BytesIO()
        torch.save({"model": net.state_dict(), "opt": opt.state_dict(), "hook": state.state_dict()}, checkpoint)
        _train(ddp, opt, range(saved_at, steps), device)
        want = {n: p.detach().clone() for n, p in net.named_parameters()}
        assert state.iter == steps

        net, ddp, opt, state = build(1)  # another initialisation: everything must come from the checkpoint
        saved = torch.load(io.BytesIO(checkpoint.getvalue()), weights_only=True)
        net.load_state_dict(saved["model"])
        opt.load_state_dict(saved["opt"])
        state.load_state_dict(saved["hook"])
        _train(ddp, opt, range(saved_at, steps), device)
        for name, p in net.named_parameters():
            assert torch.equal(p.detach(), want[name]), \
                f"{ddp_kwargs}: {name} differs from the uninterrupted run by {(p.detach() - want[name]).abs().max()}"
        _assert_replicas_equal(net.parameters())
    dist.destroy_process_group()


def test_resume_in_a_fresh_ddp_model_is_exact():
    harness.run(_resume_worker, 2)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_resume_in_a_fresh_ddp_model_is_exact_on_cuda():
    """The same on CUDA buckets (2 ranks on the one GPU). With bucket_cap_mb the fresh model's first
    buckets are unions of saved layouts: the hook compresses each layout on its own and copies the
    results back in a callback, whose future must order DDP's stream after those copies."""
    harness.run(_resume_worker, 2, "cuda", deadline_s=300)


# ---- 2. start_iter 0 and 1: compressing DDP's buckets before its rebuild ------------------------------

def _start_iter_worker(rank, world_size, store_path):
    harness.init_group(rank, world_size, store_path)
    # start_iter 0: DDP's initial buckets (reverse registration order, bucket indices later taken by other
    # parameters of the same numel) compressed in iteration 0; under static_graph DDP rebuilds after its
    # second iteration. With bucket_cap_mb its single initial bucket is compressed, then split.
    # With DDP's defaults the model is one bucket throughout, its parameters in another order after the
    # rebuild: the rebuilt bucket starts from zero errors and is compressed whole (until the hook kept the
    # initial layout's errors and split every later bucket to use them).
    for start_iter, ddp_kwargs in ((0, _PER_PARAMETER), (0, {**_PER_PARAMETER, "static_graph": True}),
                                   (1, {**_CAP, "static_graph": True}), (0, _CAP), (0, {})):
        _check_start_iter(rank, world_size, start_iter, ddp_kwargs)
    dist.destroy_process_group()


def _check_start_iter(rank, world_size, start_iter, ddp_kwargs):
    import pride
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)
    net = _Net()
    ddp = DistributedDataParallel(net, **ddp_kwargs)
    names = {id(p): n for n, p in net.named_parameters()}
    state = pride.ddp_hooks.OneBitHookState(start_iter=start_iter)
    calls = []

    def recording_hook(st, bucket):
        calls.append((tuple(names[id(p)] for p in bucket.parameters()), st.iter, bucket.index()))
        return pride.ddp_hooks.onebit_hook(st, bucket)

    ddp.register_comm_hook(state, recording_hook)
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    unwrapped = _Net()
    # The oracle: float64 errors per parameter layout (the bucket's parameters, in order), zeros for a
    # layout not seen before, never another layout's.
    worker, server = {}, {}
    compressed_at = {}  # DDP bucket index -> the layouts compressed under it
    for step in range(6):
        # Every rank's local gradient: the same parameters on every rank's batch.
        unwrapped.load_state_dict(net.state_dict())
        local = []
        for r in range(world_size):
            unwrapped.zero_grad()
            _loss(unwrapped, step, r).backward()
            local.append({n: p.grad.reshape(-1).numpy().astype(np.float64) for n, p in unwrapped.named_parameters()})
        calls.clear()
        opt.zero_grad()
        _loss(ddp, step, rank).backward()
        got = {n: p.grad.reshape(-1).numpy().astype(np.float64) for n, p in net.named_parameters()}
        assert sorted(n for layout, _, _ in calls for n in layout) == sorted(got), calls
        for layout, it, index in calls:
            have = np.concatenate([got[n] for n in layout])
            xs = [np.concatenate([lr[n] for n in layout]) for lr in local]
            if it < start_iter:  # warm-up: DDP's own float32 mean
                np.testing.assert_allclose(have, np.mean(xs, axis=0), rtol=1e-5, atol=1e-7)
                continue
            compressed_at.setdefault(index, set()).add(layout)
            numel = xs[0].size
            sizes = [None] * world_size
            dist.all_gather_object(sizes, pride.compressed_allreduce_server_numel(numel))
            owned = [(sum(sizes[:j]), sizes[j]) for j in range(world_size)]
            want, worker[layout], server[layout] = _reference_round(
                xs, worker.get(layout, [np.zeros(numel)] * world_size),
                server.get(layout, [np.zeros(s) for s in sizes]), owned)
            np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-6 * np.abs(want).max(),
                                       err_msg=f"start_iter {start_iter}, {ddp_kwargs}, step {step}, bucket {layout}")
        opt.step()
    # DDP's buckets did change while compressed: some bucket index held other parameters at other times.
    assert any(len(layouts) > 1 for layouts in compressed_at.values()), compressed_at
    # Only the layouts of DDP's present buckets keep errors (the ones of its initial buckets are gone).
    present = {layout for layout, _, _ in calls}
    assert {tuple(e["params"]) for e in state.state_dict()["layout_errors"]} == present
    _assert_replicas_equal(net.parameters())


def test_start_iter_0_and_1_keep_errors_with_their_parameters():
    harness.run(_start_iter_worker, 2)


def test_start_iter_must_be_a_non_negative_int():
    import pytest

    import pride

    for bad in (-1, 1.5, "2", None):
        with pytest.raises(ValueError, match="start_iter"):
            pride.ddp_hooks.OneBitHookState(start_iter=bad)
    for good in (0, 1, 2):
        assert pride.ddp_hooks.OneBitHookState(start_iter=good).start_iter == good


# ---- 3. A state dict of the old format (errors keyed by bucket index) --------------------------------

def _old_format_worker(rank, world_size, store_path):
    import pride
    from torch.nn.parallel import DistributedDataParallel

    harness.init_group(rank, world_size, store_path)
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("pride").addHandler(handler)
    numel = 300 * 7
    server_numel = pride.compressed_allreduce_server_numel(numel)
    g = torch.Generator().manual_seed(rank)
    # Errors that fit DDP's one bucket by numel: an index-keyed state would apply them.
    old = {"iter": 7, "start_iter": 2,
           "errors": {0: (torch.randn(numel, generator=g), torch.randn(server_numel, generator=g))}}
    results = []
    for loaded in (True, False):
        torch.manual_seed(0)
        layer = torch.nn.Linear(300, 7, bias=False)
        ddp = DistributedDataParallel(layer)
        state = pride.ddp_hooks.OneBitHookState()
        if loaded:
            state.load_state_dict(old)
        else:  # what the old state dict means once its errors are dropped
            state.iter, state.start_iter = 7, 2
        ddp.register_comm_hook(state, pride.ddp_hooks.onebit_hook)
        opt = torch.optim.SGD(layer.parameters(), lr=0.1)
        for step in range(3):
            x = torch.randn(16, 300, generator=torch.Generator().manual_seed(10 * step + rank))
            opt.zero_grad()
            ddp(x).square().mean().backward()
            opt.step()
        assert state.iter == 10
        results.append(layer.weight.detach().clone())
    logging.getLogger("pride").removeHandler(handler)
    assert torch.equal(results[0], results[1]), "the old format's errors were applied"
    warned = [r.getMessage() for r in records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "bucket index" in warned[0] and "dropped" in warned[0], warned
    dist.destroy_process_group()


def test_old_format_state_dict_loads_without_its_errors(caplog):
    import pride

    state = pride.ddp_hooks.OneBitHookState(start_iter=5)
    old = {"iter": 12, "start_iter": 3, "errors": {0: (torch.ones(10), torch.ones(5)), 1: (torch.ones(4), torch.ones(2))}}
    with caplog.at_level(logging.WARNING, logger="pride"):
        state.load_state_dict(old)
    assert (state.iter, state.start_iter) == (12, 3)
    assert state.state_dict()["layout_errors"] == []
    assert len(caplog.records) == 1 and "2 error" in caplog.records[0].getMessage(), caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pride"):
        state.load_state_dict({"iter": 1, "start_iter": 3, "errors": {}})  # nothing to drop: no warning
    assert not caplog.records and state.iter == 1
    harness.run(_old_format_worker, 2)


# ---- 4. Rank 0's state loaded on every rank (the usual DDP checkpoint idiom) ------------------------

def _rank0_checkpoint_worker(rank, world_size, store_path, path):
    import pride
    from torch.nn.parallel import DistributedDataParallel

    harness.init_group(rank, world_size, store_path, timeout_s=30)
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("pride").addHandler(handler)

    def build():
        torch.manual_seed(0)
        net = _Net()
        ddp = DistributedDataParallel(net, **_CAP)
        state = pride.ddp_hooks.OneBitHookState(start_iter=2, model=ddp)
        ddp.register_comm_hook(state, pride.ddp_hooks.onebit_hook)
        return net, ddp, torch.optim.SGD(net.parameters(), lr=0.05), state

    net, ddp, opt, state = build()
    _train(ddp, opt, range(4))
    if rank == 0:
        torch.save({"model": net.state_dict(), "hook": state.state_dict()}, path)
    dist.barrier()
    # A fresh model: DDP's first bucket holds every parameter, a union of the two saved layouts. Rank 0
    # splits it by layout with its errors; every other rank must split it the same way, with zeros (rank
    # 1 used to drop the layouts and compress the bucket whole: the ranks' calls differed).
    net, ddp, opt, state = build()
    saved = torch.load(path, weights_only=True)
    net.load_state_dict(saved["model"])
    state.load_state_dict(saved["hook"])
    _train(ddp, opt, range(4, 7))
    _assert_replicas_equal(net.parameters())
    logging.getLogger("pride").removeHandler(handler)
    warned = [r.getMessage() for r in records if r.levelno == logging.WARNING]
    if rank == 0:
        assert not warned, warned
    else:
        assert len(warned) == 1 and "saved by rank 0 of 2" in warned[0] and "restart at zero" in warned[0], warned
    assert len(state.layout_errors) == 2 and all(len(k) == 4 for k in state.layout_errors), list(state.layout_errors)
    dist.destroy_process_group()


def test_rank_0s_state_loaded_on_every_rank_keeps_the_ranks_calls_alike(tmp_path):
    harness.run(_rank0_checkpoint_worker, 2, str(tmp_path / "hook.pt"), deadline_s=120)


# ---- 5. A bucket split by saved layout passes a collective's error on as an error --------------------

def _split_error_worker(rank, world_size, store_path, path):
    import pride
    from torch.nn.parallel import DistributedDataParallel

    harness.init_group(rank, world_size, store_path, timeout_s=30)
    torch.manual_seed(0)
    net = _Net()
    ddp = DistributedDataParallel(net, **_CAP)
    state = pride.ddp_hooks.OneBitHookState(start_iter=0, model=ddp)
    ddp.register_comm_hook(state, pride.ddp_hooks.onebit_hook)
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    _train(ddp, opt, range(3))
    saved = state.state_dict()
    # Only rank 0 resumes (a user's mistake): it splits DDP's first bucket of a fresh model by its saved
    # layouts, rank 1 compresses it whole, and pride's check of the calls fails on both.
    torch.manual_seed(0)
    net = _Net()
    ddp = DistributedDataParallel(net, **_CAP)
    state = pride.ddp_hooks.OneBitHookState(start_iter=0, model=ddp)
    if rank == 0:
        state.load_state_dict(saved)
    ddp.register_comm_hook(state, pride.ddp_hooks.onebit_hook)
    with pytest.raises(Exception) as failure:
        _loss(ddp, 3, rank).backward()
    # DDP reads the future's error from C++: it must be the collective's message (a Python value set with
    # set_exception came out as "Unable to cast ... to Tensor").
    message = str(failure.value)
    assert "compressed_allreduce" in message and "Unable to cast" not in message, message


def test_a_split_buckets_collective_error_reaches_ddp_as_an_error(tmp_path):
    harness.run(_split_error_worker, 2, str(tmp_path / "hook.pt"), deadline_s=120)


# ---- 6. An overflow under GradScaler on one rank: skipped on every rank, then training goes on ------

def _overflow_worker(rank, world_size, store_path):
    import pride
    from torch.nn.parallel import DistributedDataParallel

    harness.init_group(rank, world_size, store_path)
    trajectories = {}
    for hooked in (False, True):
        torch.manual_seed(0)
        net = _Net()
        ddp = DistributedDataParallel(net)
        if hooked:
            state = pride.ddp_hooks.OneBitHookState(start_iter=2, model=ddp)
            ddp.register_comm_hook(state, pride.ddp_hooks.onebit_hook)
        opt = torch.optim.SGD(net.parameters(), lr=0.05)
        scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
        trajectory = []
        for step in range(8):
            opt.zero_grad()
            loss = _loss(ddp, step, rank)
            if step == 4 and rank == 1:
                loss = loss * 1e38  # scaled by 1024: an overflow, on one rank only
            scaler.scale(loss).backward()
            finite = all(bool(torch.isfinite(p.grad).all()) for p in net.parameters())
            scaler.step(opt)
            scaler.update()
            trajectory.append((step, finite, scaler.get_scale()))
        trajectories[hooked] = trajectory
        if hooked:
            assert all(torch.isfinite(w).all() and torch.isfinite(s).all() for w, s in state.layout_errors.values())
            _assert_replicas_equal(net.parameters())
    # DDP's own hook is the oracle: the overflowed step is skipped on every rank, and the scale halves once.
    # (The hook's errors used to stay non-finite after it: every later step was skipped, the scale halving
    # each time.)
    assert trajectories[True] == trajectories[False], trajectories
    assert [f for _, f, _ in trajectories[True]] == [True] * 4 + [False] + [True] * 3, trajectories[True]
    dist.destroy_process_group()


def test_an_overflow_under_grad_scaler_is_skipped_once_as_with_ddps_own_hook():
    harness.run(_overflow_worker, 2)
