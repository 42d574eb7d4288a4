"""pride.sign_allreduce on real process groups against the int32 oracle (SPEC §2)."""

import os
import time

import pytest
import torch
import torch.distributed as dist

from distributed_harness import init_group, run


def make(rank, dtype, n, salt=0):
    g = torch.Generator().manual_seed(7919 * rank + salt)
    x = torch.randn(n, generator=g)
    if n == 0:
        return x.to(dtype)
    specials = torch.tensor([0.0, -0.0, float("nan"), float("inf"), -float("inf")])
    idx = torch.randperm(n, generator=g)[: max(1, n // 10)]  # unique: duplicate writes race
    x[idx] = specials[torch.randint(0, 5, idx.shape, generator=g)]
    return x.to(dtype)


def votes(x, kind):
    pos = (x > 0).to(torch.int32)
    if kind == "binary":
        return 2 * pos - 1
    return pos - (x < 0).to(torch.int32)  # ±0 and NaN abstain


def expected(world, dtype, n, mode, kind, salt):
    s = sum(votes(make(r, dtype, n, salt), kind) for r in range(world))
    if mode == "vote":
        return torch.sign(s).to(dtype)
    return (s.to(torch.float32) / torch.tensor(world, dtype=torch.float32)).to(dtype)


def _sign_job(rank, world, store_path):
    import pride

    init_group(rank, world, store_path)
    salt = 0
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for mode in ("vote", "mean"):
            for kind in ("binary", "ternary"):
                for n in (0, 1, 63, 64, 65, 1000, 100003):
                    salt += 1
                    x = make(rank, dtype, n, salt)
                    pride.sign_allreduce(x, mode=mode, votes=kind)
                    want = expected(world, dtype, n, mode, kind, salt)
                    assert torch.equal(x.view(torch.int16 if dtype != torch.float32 else torch.int32),
                                       want.view(torch.int16 if dtype != torch.float32 else torch.int32)), \
                        f"{dtype} {mode} {kind} n={n}"
    # several in flight, completed in issue order
    xs = [make(rank, torch.float32, 5000 + i, 900 + i) for i in range(6)]
    works = [pride.sign_allreduce(x, async_op=True) for x in xs]
    for i, w in enumerate(works):
        w.wait()
        assert torch.equal(xs[i], expected(world, torch.float32, 5000 + i, "vote", "binary", 900 + i))
    # a tensor that is not contiguous (every other column of a matrix): the result lands in the view,
    # the elements between are left alone
    whole = make(rank, torch.float32, 2 * 3001, 777).view(3001, 2)
    untouched = whole[:, 1].clone()
    view = whole[:, 0]
    assert not view.is_contiguous()
    pride.sign_allreduce(view, mode="mean", votes="ternary")
    want = sum(votes(make(r, torch.float32, 2 * 3001, 777).view(3001, 2)[:, 0], "ternary") for r in range(world))
    assert torch.equal(view, want.float() / world)
    assert torch.equal(whole[:, 1].contiguous().view(torch.int32), untouched.view(torch.int32))  # NaNs among them
    # packed API
    n = 77
    x = make(rank, torch.float32, n, 4242)
    bits = torch.from_numpy(__import__("numpy").packbits((x > 0).numpy(), bitorder="little"))
    out = pride.sign_allreduce_packed(bits, n, mode="vote")
    assert out.dtype == torch.int8
    assert torch.equal(out, expected(world, torch.float32, n, "vote", "binary", 4242).to(torch.int8))
    mean = pride.sign_allreduce_packed(bits, n, mode="mean")
    assert torch.equal(mean, expected(world, torch.float32, n, "mean", "binary", 4242))
    work = pride.sign_allreduce_packed(bits, n, mode="mean", async_op=True)
    work.wait()
    assert torch.equal(work.result()[0], expected(world, torch.float32, n, "mean", "binary", 4242))
    # stats count the sign-allreduce traffic
    s = pride.stats()
    assert s["collectives"] > 0
    if world > 1:
        assert s["bytes_sent"] > 0 and s["bytes_received"] > 0
    dist.destroy_process_group()


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_sign_allreduce_matches_oracle(world):
    run(_sign_job, world, deadline_s=300)


@pytest.mark.parametrize("algo", ["ring", "tree", "direct", "allgather", "hier"])
def test_every_algorithm_through_pride_algo(algo):
    run(_sign_job, 3, env={"PRIDE_ALGO": algo}, deadline_s=300)


@pytest.mark.parametrize("world", [3, 4])
def test_coded_results_through_pride_result_coding(world):
    """The direct algorithm's result chunks sent coded (PRIDE_RESULT_CODING=packed): votes that can tie
    as trits, means as counts packed in base N + 1 (N = 4: base 5) or 2N + 1 (N = 3: base 7; N = 3
    binary, base 4, stays planes). The same bits as the oracle, through torch.distributed."""
    run(_sign_job, world, env={"PRIDE_ALGO": "direct", "PRIDE_RESULT_CODING": "packed"}, deadline_s=300)


def _bad_input(rank, world, store_path):
    import pride

    init_group(rank, world, store_path)
    with pytest.raises(TypeError, match="float32, bfloat16 or float16"):
        pride.sign_allreduce(torch.ones(4, dtype=torch.int32))
    with pytest.raises(ValueError, match=rf'pride sign_allreduce \(rank {rank}\): mode must be "vote" or "mean"'):
        pride.sign_allreduce(torch.ones(4), mode="median")
    with pytest.raises(ValueError, match=rf'pride sign_allreduce \(rank {rank}\): votes must be "binary" or "ternary"'):
        pride.sign_allreduce(torch.ones(4), votes="exact")
    with pytest.raises(ValueError, match=rf"pride sign_allreduce_packed \(rank {rank}\): numel must be at least 0"):
        pride.sign_allreduce_packed(torch.zeros(3, dtype=torch.uint8), -1)
    with pytest.raises(ValueError, match="CPU tensor"):
        pride.sign_allreduce(torch.ones(4, device="meta"))
    with pytest.raises(TypeError, match="torch.Tensor"):
        pride.sign_allreduce([1.0, 2.0])
    with pytest.raises(ValueError, match="packed bytes"):
        pride.sign_allreduce_packed(torch.zeros(3, dtype=torch.uint8), 100)
    with pytest.raises(ValueError, match="group has"):
        dist.all_gather([torch.ones(2)], torch.ones(2))  # list length != world size
    if torch.cuda.is_available() and not pride._C.cuda_supported():
        with pytest.raises(ValueError, match="no CUDA support"):
            pride.sign_allreduce(torch.ones(4, device="cuda"))
    gloo = dist.new_group(backend="gloo")
    with pytest.raises(TypeError, match="not 'pride'"):
        pride.sign_allreduce(torch.ones(4), group=gloo)
    # what Python would quietly round, or pass on to a message that names no collective
    with pytest.raises(TypeError, match="sign_allreduce_packed: numel must be an int, got float 15.7"):
        pride.sign_allreduce_packed(torch.zeros(2, dtype=torch.uint8), 15.7)
    with pytest.raises(TypeError, match="numel must be an int, got a bool"):
        pride.sign_allreduce_packed(torch.zeros(2, dtype=torch.uint8), True)
    with pytest.raises(TypeError, match="sign_allreduce: group must be a torch.distributed ProcessGroup"):
        pride.sign_allreduce(torch.ones(4), group="world")
    with pytest.raises(TypeError, match="sign_allreduce: mode must be a string, got NoneType"):
        pride.sign_allreduce(torch.ones(4), mode=None)
    with pytest.raises(TypeError, match="level_vote: max_level must be an int"):
        pride.level_vote(torch.ones(4, dtype=torch.int8), 1.5)
    t = torch.zeros(4096)
    server = torch.zeros(pride.compressed_allreduce_server_numel(4096))
    assert server.numel() > 0
    with pytest.raises(ValueError, match=rf"compressed_allreduce \(rank {rank}\): t and worker_error share memory"):
        pride.compressed_allreduce(t, t, server)
    both = torch.zeros(4096 + server.numel())
    with pytest.raises(ValueError, match="worker_error and server_error share memory"):
        pride.compressed_allreduce(t, both[:4096], both[4095:4095 + server.numel()])
    through_numpy = torch.from_numpy(both.numpy()[4095:4095 + server.numel()])  # another storage, same bytes
    with pytest.raises(ValueError, match="worker_error and server_error share memory"):
        pride.compressed_allreduce(t, both[:4096], through_numpy)
    pride.compressed_allreduce(t, both[:4096], both[4096:])  # adjacent, not shared: accepted
    # the group is still usable after every refused call
    x = torch.full((10,), float(rank) - 0.5)
    pride.sign_allreduce(x, mode="mean")
    want = sum(1 if r - 0.5 > 0 else -1 for r in range(world)) / world
    assert torch.allclose(x, torch.full((10,), want))
    dist.destroy_process_group()


def test_bad_input_raises_and_group_survives():
    run(_bad_input, 2)


def _reset_with_a_collective_in_flight(rank, world, store_path):
    import pride

    store = init_group(rank, world, store_path)
    x = torch.randn(1 << 16)
    pride.sign_allreduce(x)
    pride.reset_stats()
    pride.sign_allreduce(x)
    one_call = pride.stats()["bytes_sent"]
    assert pride.stats()["collectives"] == 1 and one_call > 0
    pride.sign_allreduce(x)
    if rank == 0:
        work = pride.sign_allreduce(x, async_op=True)
        time.sleep(0.5)  # the worker has begun it and waits for rank 1, which waits for this reset
        pride.reset_stats()
        assert pride.stats()["collectives"] == 0
        store.set("reset", "done")
        work.wait()
    else:
        pride.reset_stats()  # nothing in flight here
        store.wait(["reset"])
        pride.sign_allreduce(x)
    # the call in flight at the reset counts in full, the two before it not at all
    assert (pride.stats()["collectives"], pride.stats()["bytes_sent"]) == (1, one_call), pride.stats()
    pride.sign_allreduce(x)
    assert (pride.stats()["collectives"], pride.stats()["bytes_sent"]) == (2, 2 * one_call), pride.stats()
    dist.destroy_process_group()


def test_reset_stats_with_a_collective_in_flight_loses_and_repeats_nothing():
    run(_reset_with_a_collective_in_flight, 2)


def _dtypes_differ(rank, world, store_path):
    import pride

    init_group(rank, world, store_path)
    mine, theirs = ("float32", "bfloat16") if rank == 0 else ("bfloat16", "float32")
    x = torch.ones(1000, dtype=getattr(torch, mine))
    # Each rank's error names it, the collective, and both calls (its own first).
    with pytest.raises(Exception, match=rf"pride rank {rank}/2: sign_allreduce #1 .*ranks disagree on the collective: "
                                        rf"this rank called sign_allreduce vote binary {mine} numel 1000 .*"
                                        rf"rank {1 - rank} called sign_allreduce vote binary {theirs} numel 1000"):
        pride.sign_allreduce(x)
    dist.destroy_process_group()


def test_ranks_disagreeing_on_the_dtype_fail_on_every_rank():
    run(_dtypes_differ, 2, deadline_s=60)


def test_sign_allreduce_needs_an_initialized_group():
    import pride

    with pytest.raises(RuntimeError, match="init_process_group"):
        pride.sign_allreduce(torch.ones(3))
