"""The Horovod-style helpers (pride.init, broadcast_parameters, broadcast_optimizer_state) beyond the
happy path that test_p2p_and_groups covers: what Horovod's users meet when ranks pass different things,
when the root's state cannot travel, and the error feedback that belongs to each rank."""

import logging
import os
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

import pride.horovod
from distributed_harness import init_group, run


def _raises_everywhere(fn, *fragments):
    """fn() must raise ValueError or TypeError on this rank with every fragment in its message."""
    try:
        fn()
    except (ValueError, TypeError) as e:
        for f in fragments:
            assert f in str(e), (f, str(e))
        return
    raise AssertionError(f"no error on rank {dist.get_rank()} (expected one saying {fragments})")


def _group_still_works(rank, world):
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    assert t.item() == world * (world + 1) / 2


def _refusals(rank, world, store_path):
    init_group(rank, world, store_path)
    model = torch.nn.Sequential(torch.nn.Linear(3, 2))
    # a module is not a state_dict: Horovod refuses it; pride took it as an iterable and did nothing
    _raises_everywhere(lambda: pride.broadcast_parameters(model), "not the module itself")
    _raises_everywhere(lambda: pride.broadcast_parameters({"a": torch.ones(2), "b": 3}), "entry 'b' has type int, not a tensor")
    # an entry that only rank 1 cannot send: it raises its own error, the others hear of it
    odd = {"a": torch.ones(2), "b": 3 if rank == 1 else torch.ones(1)}
    _raises_everywhere(lambda: pride.broadcast_parameters(odd), *(
        ["entry 'b' has type int"] if rank == 1 else ["rank 1 could not describe its tensors", "TypeError"]))
    _group_still_works(rank, world)
    # rank 2 passes one tensor fewer: before, it returned while the root waited for it until the timeout
    params = dict(model.state_dict())
    if rank == 2:
        params.pop("0.bias")
    _raises_everywhere(lambda: pride.broadcast_parameters(params, root_rank=0),
                       "rank 2 passed other tensors than rank 0", "1 entries against rank 0's 2")
    _group_still_works(rank, world)
    # the same count, another shape on rank 1
    shaped = [torch.zeros(4 if rank == 1 else 5), torch.zeros(2)]
    _raises_everywhere(lambda: pride.broadcast_parameters(shaped, root_rank=2),
                       "rank 1 passed other tensors than rank 0", "entry 0 is (None, (4,), 'torch.float32', 'cpu')")
    # the root's optimizer state cannot be pickled (a lambda among its hyper-parameters): before, the
    # root raised and every other rank waited for the state until the timeout
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    if rank == 1:
        opt.param_groups[0]["schedule"] = lambda step: 0.5 ** step
    _raises_everywhere(lambda: pride.broadcast_optimizer_state(opt, root_rank=1),
                       "rank 1 could not send its optimizer state", "lambda")
    opt.param_groups[0].pop("schedule", None)
    _group_still_works(rank, world)
    # ranks whose optimizers hold other parameters: before, only the receivers raised, in load_state_dict
    extra = [torch.nn.Parameter(torch.zeros(7))] if rank == 0 else []
    opt = torch.optim.SGD(list(model.parameters()) + extra, lr=0.1)
    _raises_everywhere(lambda: pride.broadcast_optimizer_state(opt, root_rank=2),
                       "rank 1 passed other parameters than rank 0", "2 entries against rank 0's 3")
    # the same parameters, but a receiver's optimizer refuses the root's state (another kind of optimizer)
    opt = (pride.optim.OneBitAdam if rank == 2 else torch.optim.Adam)(model.parameters(), lr=0.1)
    _raises_everywhere(lambda: pride.broadcast_optimizer_state(opt, root_rank=0), "other parameters")
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    if rank == 2:  # a pre-hook that fails on one receiver only: the others must hear of it
        def refuse(optimizer, state_dict):
            raise RuntimeError("mine")

        opt.register_load_state_dict_pre_hook(refuse)
    _raises_everywhere(lambda: pride.broadcast_optimizer_state(opt, root_rank=0),
                       "rank 2 could not load rank 0's state", "RuntimeError: mine")
    # a receiver that cannot make room for the state (out of memory, say): the others must not wait for it
    real = pride.horovod._receivers_tensors

    def no_room(*args):
        raise torch.OutOfMemoryError("no room here")

    if rank == 1:
        pride.horovod._receivers_tensors = no_room
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    _raises_everywhere(lambda: pride.broadcast_optimizer_state(opt, root_rank=0),
                       "rank 1 could not make room for the state", "OutOfMemoryError: no room here")
    pride.horovod._receivers_tensors = real
    _group_still_works(rank, world)
    dist.destroy_process_group()


def test_broadcast_helpers_raise_on_every_rank_where_ranks_differ_or_the_state_cannot_travel():
    run(_refusals, 3)


def _in_place(rank, world, store_path):
    init_group(rank, world, store_path)
    oracle = dist.new_group(backend="gloo")  # the root's values, as torch's Gloo carries them
    pride.horovod._BUCKET_BYTES = 256  # several buckets, and tensors that go alone, at test sizes
    torch.manual_seed(rank)
    tensors = {
        "big": torch.randn(100),  # 400 bytes: alone, in place
        "small.a": torch.randn(3),
        "small.b": torch.randn(40),
        "small.c": torch.randn(5, 6).t(),  # a non-contiguous view: flattened, then copied back
        "large.t": torch.randn(10, 12).t() if rank == 1 else torch.randn(12, 10),  # the root's alone non-contiguous
        "ints": torch.randint(0, 1000, (70,)),
        "half": torch.randn(9).half(),
        "empty": torch.empty(0),
    }
    expected = {k: v.clone(memory_format=torch.contiguous_format) for k, v in tensors.items()}  # Gloo: contiguous
    for v in expected.values():
        dist.broadcast(v, src=1, group=oracle)
    pride.broadcast_parameters(tensors, root_rank=1)
    for k in tensors:
        assert torch.equal(tensors[k], expected[k]), k
    assert not tensors["small.c"].is_contiguous()

    # the root's state tensors laid out otherwise than the receivers' (a transposed momentum against the
    # contiguous ones they make): the same broadcasts in the same order on every rank, each to its tensor
    w, c = torch.nn.Parameter(torch.zeros(10, 8)), torch.nn.Parameter(torch.zeros(80))
    sgd = torch.optim.SGD([w, c], lr=0.1, momentum=0.9)
    if rank == 2:
        sgd.state[w]["momentum_buffer"] = torch.full((8, 10), 1.0).t()
        sgd.state[c]["momentum_buffer"] = torch.full((80,), 2.0)
    pride.broadcast_optimizer_state(sgd, root_rank=2)
    assert torch.equal(sgd.state[w]["momentum_buffer"], torch.full((10, 8), 1.0))
    assert torch.equal(sgd.state[c]["momentum_buffer"], torch.full((80,), 2.0))
    # a receiver's own state tensor of the right shape is filled in place, not made again
    mine = sgd.state[c]["momentum_buffer"]
    sgd.state[c]["momentum_buffer"] = torch.full((80,), 3.0) if rank == 2 else mine
    pride.broadcast_optimizer_state(sgd, root_rank=2)
    assert torch.equal(sgd.state[c]["momentum_buffer"], torch.full((80,), 3.0))
    if rank != 2:
        assert sgd.state[c]["momentum_buffer"].data_ptr() == mine.data_ptr()
    # ... but not where it shares memory: two entries holding one tensor, or a view of a parameter
    d = torch.nn.Parameter(torch.zeros(80))
    sgd = torch.optim.SGD([w, c, d], lr=0.1, momentum=0.9)
    if rank == 2:
        sgd.state[c]["momentum_buffer"] = torch.full((80,), 2.0)
        sgd.state[d]["momentum_buffer"] = torch.full((80,), 4.0)
    else:
        sgd.state[c]["momentum_buffer"] = sgd.state[d]["momentum_buffer"] = torch.zeros(80)
    sgd.state[w]["momentum_buffer"] = w.data if rank != 2 else torch.full((10, 8), 1.0)
    pride.broadcast_optimizer_state(sgd, root_rank=2)
    assert torch.equal(sgd.state[c]["momentum_buffer"], torch.full((80,), 2.0))
    assert torch.equal(sgd.state[d]["momentum_buffer"], torch.full((80,), 4.0))
    assert torch.equal(sgd.state[w]["momentum_buffer"], torch.full((10, 8), 1.0))
    assert torch.equal(w, torch.zeros(10, 8)), "the parameter under a state view must keep its value"

    # OneBitAdam past its warm-up: moments the same on every rank, error feedback of each rank's own
    model = torch.nn.Linear(16, 8)
    pride.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = pride.optim.OneBitAdam(model.parameters(), lr=1e-2, freeze_step=2)
    for step in range(4):
        for p in model.parameters():
            p.grad = torch.randn_like(p) * (rank + 1)
        opt.step()
    errors = {id(p): {k: opt.state[p][k].clone() for k in ("worker_error", "server_error") if k in opt.state[p]}
              for p in model.parameters()}
    assert any(errors[id(p)] for p in model.parameters()), "no error feedback after the warm-up"
    for group in opt.param_groups:
        group["lr"] = 1e-3 * (rank + 1)  # hyper-parameters that differ: the root's must win
    moments = [opt.state[p]["exp_avg"].clone() for p in model.parameters()]
    for m in moments:
        dist.broadcast(m, src=2, group=oracle)
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("pride").addHandler(handler)
    pride.broadcast_optimizer_state(opt, root_rank=2)
    logging.getLogger("pride").removeHandler(handler)
    assert not [r for r in records if "reset" in r.getMessage()], [r.getMessage() for r in records]
    assert opt.param_groups[0]["lr"] == 3e-3
    for p, m in zip(model.parameters(), moments):
        assert torch.equal(opt.state[p]["exp_avg"], m)
        for k, e in errors[id(p)].items():
            assert torch.equal(opt.state[p][k], e), (k, "this rank's own error feedback must stay")

    # Adam whose state exists on the root only: every rank gets it, its "step" a CPU tensor as Adam keeps it
    opt = torch.optim.Adam(model.parameters(), lr=0.1, betas=(0.8, 0.9))
    if rank == 0:
        for p in model.parameters():
            p.grad = torch.ones_like(p)
        opt.step()
    pride.broadcast_optimizer_state(opt, root_rank=0)
    assert opt.param_groups[0]["betas"] == (0.8, 0.9)
    for p in model.parameters():
        assert torch.is_tensor(opt.state[p]["step"]) and opt.state[p]["step"].item() == 1
        assert torch.allclose(opt.state[p]["exp_avg"], torch.full_like(p, 0.2), rtol=1e-6, atol=0)
    dist.destroy_process_group()


def test_broadcasts_travel_in_place_and_keep_each_ranks_error_feedback():
    run(_in_place, 3)


def _clean_env():
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    return env


def test_init_without_a_launcher_is_a_world_of_one_and_says_when_another_group_exists():
    code = """
import warnings
import torch, torch.distributed as dist, pride
pride.init()
assert (pride.rank(), pride.size(), pride.local_rank(), pride.local_size()) == (0, 1, 0, 1)
t = torch.tensor([1.0, -2.0])
pride.broadcast_parameters([t])
pride.sign_allreduce(t)
assert t.tolist() == [1.0, -1.0]
dist.destroy_process_group()
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    pride.init()
assert any("already exists with backend 'gloo'" in str(w.message) for w in caught), caught
assert dist.get_backend() == "gloo"
print("OK")
"""
    out = subprocess.run([sys.executable, "-c", code], env=_clean_env(), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip().endswith("OK"), out.stdout + out.stderr


def _on_cuda(rank, world, store_path):
    init_group(rank, world, store_path)
    oracle = dist.new_group(backend="gloo")
    torch.manual_seed(rank)
    model = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.BatchNorm1d(16)).cuda()
    expected = {k: v.cpu() for k, v in model.state_dict().items()}
    for v in expected.values():
        dist.broadcast(v, src=1, group=oracle)
    pride.broadcast_parameters(model.state_dict(), root_rank=1)
    for k, v in model.state_dict().items():
        assert v.is_cuda and torch.equal(v.cpu(), expected[k]), k
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    opt.step()
    moments = [opt.state[p]["exp_avg_sq"].cpu() for p in model.parameters()]
    for m in moments:
        dist.broadcast(m, src=1, group=oracle)
    pride.broadcast_optimizer_state(opt, root_rank=1)
    for p, m in zip(model.parameters(), moments):
        assert opt.state[p]["exp_avg_sq"].device == p.device and torch.equal(opt.state[p]["exp_avg_sq"].cpu(), m)
        assert opt.state[p]["step"].device.type == "cpu"
    dist.destroy_process_group()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
def test_broadcasts_of_cuda_parameters_and_optimizer_state_2ranks():
    run(_on_cuda, 2)
