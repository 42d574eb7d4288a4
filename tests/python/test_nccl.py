"""The NCCL transport (issue 14): sign-allreduce over NCCL against the int32 oracle and against the bytes
of the same call over UCX, the standard collectives on CUDA tensors over NCCL against plain torch, the
DistributedLion step over NCCL against the CPU step, a killed rank, mismatched calls.

Ranks share the one GPU of the GPU machine: NCCL refuses two ranks of one communicator on one GPU
unless each rank says it is a host of its own (NCCL_HOSTID), and then moves the bytes over its socket
transport on loopback. PRIDE_CUDA_TRANSPORT=nccl forces NCCL, since "auto" (rightly) sees a shared GPU.

Marked gpu: scripts/device_test.sh runs them on the GPU machine; elsewhere they skip, as they do in a
build of pride without NCCL.
"""

import os
import signal
import time

import pytest
import torch
import torch.distributed as dist

from distributed_harness import init_group, run
from test_cuda import (DTYPES, _inputs, _lion_cpu_vs_cuda, _oracle, _pieces_of_different_sizes, _same_bits,
                       _standard_collectives)


def _nccl_built():
    import pride

    return pride._C.nccl_supported()


pytestmark = [
    pytest.mark.gpu,
    # One after another under pytest-xdist (device_test.sh runs --dist loadgroup): several NCCL groups at
    # once on the one GPU would time-slice spinning NCCL kernels of a dozen processes.
    pytest.mark.xdist_group("nccl"),
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine"),
    pytest.mark.skipif(not _nccl_built(), reason="this build of pride has no NCCL transport"),
]


def _on_nccl(rank, world_size, store_path, fn, *args):
    """Runs fn as one rank of a group whose CUDA tensors go over NCCL, ranks sharing the one GPU."""
    os.environ["NCCL_HOSTID"] = f"pride-test-host-{rank}"
    os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
    # Sockets over loopback only: an InfiniBand/RoCE adapter on the machine would otherwise carry the
    # "separate hosts" over NCCL's IB transport, and multi-node NVLink detection could merge them again.
    os.environ.setdefault("NCCL_IB_DISABLE", "1")
    os.environ.setdefault("NCCL_MNNVL_ENABLE", "0")
    os.environ["PRIDE_CUDA_TRANSPORT"] = "nccl"
    failed = True
    try:
        fn(rank, world_size, store_path, *args)
        failed = False
    finally:
        # A group left alive would be torn down at interpreter exit, after CUDA's own teardown, where
        # finalizing its NCCL communicator can block until the harness's deadline. After a failure the
        # test's own error is the one to report, not the teardown's.
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:
                if not failed:
                    raise


def _sign_over_nccl(rank, world_size, store_path, algorithm):
    import pride

    init_group(rank, world_size, store_path)
    torch.cuda.set_device(0)
    on_ucx, on_nccl = algorithm, "nccl_" + algorithm
    for numel in (1, 1000, 65 * 64 + 3, 64 * 4 * 7, 300_001):
        for dtype in DTYPES:
            for mode in ("vote", "mean"):
                for votes in ("binary", "ternary"):
                    seed = numel * 5 + DTYPES.index(dtype) * 3 + (mode == "mean") * 11 + (votes == "ternary")
                    xs = _inputs(world_size, numel, dtype, seed)
                    want = _oracle(xs, mode, votes, dtype)
                    pride.reset_stats()
                    x = xs[rank].cuda()
                    pride.sign_allreduce(x, mode=mode, votes=votes)
                    got = x.cpu()
                    where = f"rank {rank} {on_nccl} {mode} {votes} {dtype} numel {numel}"
                    assert _same_bits(got, want), f"{where}: {(got.float() != want.float()).sum().item()} differ"
                    # The same call on a CPU tensor runs the algorithm over UCX (SPEC §4's formula, tested
                    # in the engine): NCCL must put exactly as many bytes on the wire.
                    y = xs[rank].clone()
                    pride.sign_allreduce(y, mode=mode, votes=votes)
                    assert _same_bits(y, want), where
                    per = pride.stats()["per_algorithm"]
                    if world_size > 1:
                        assert per[on_nccl]["bytes_sent"] == per[on_ucx]["bytes_sent"], (where, per)
                        assert per[on_nccl]["bytes_received"] == per[on_ucx]["bytes_received"], (where, per)
                        assert per[on_nccl]["device_bytes_sent"] == per[on_nccl]["bytes_sent"], (where, per)
    dist.destroy_process_group()


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("algorithm", ["direct", "allgather"])
def test_sign_allreduce_over_nccl_matches_the_oracle_and_the_wire_formula(world_size, algorithm):
    # Result planes on both transports (the coded results: the next test).
    env = {"PRIDE_ALGO": algorithm, "PRIDE_RESULT_CODING": "planes"}
    run(_on_nccl, world_size, _sign_over_nccl, algorithm, env=env, deadline_s=400)


@pytest.mark.parametrize("world_size", [2, 4])
def test_sign_allreduce_over_nccl_with_results_packed_matches_the_oracle_and_the_wire_formula(world_size):
    # The direct algorithm's results coded (a tie-capable vote as trits, a mean's counts packed in base
    # N + 1 or 2N + 1), on NCCL as on UCX: the same bits, the same bytes (fewer than planes: the engine's
    # tests check the formula). N = 2 and N = 4 chunk 4 words evenly or not (ncclAllGather, or grouped
    # send/recv) across the sizes of _sign_over_nccl.
    env = {"PRIDE_ALGO": "direct", "PRIDE_RESULT_CODING": "packed"}
    run(_on_nccl, world_size, _sign_over_nccl, "direct", env=env, deadline_s=400)


def test_standard_collectives_over_nccl_3ranks():
    """The CUDA tests of the staged path (test_cuda.py), now over NCCL: allreduce, broadcast, all_gather,
    all_gather_into_tensor, reduce_scatter_tensor (in place too), all_to_all_single, p2p, barrier."""
    run(_on_nccl, 3, _standard_collectives, deadline_s=300)


def _more_collectives(rank, world_size, store_path):
    import pride

    init_group(rank, world_size, store_path)
    torch.cuda.set_device(0)
    dev = torch.device("cuda", 0)
    n = 777
    base = torch.arange(n, dtype=torch.float64, device=dev)
    pride.reset_stats()
    every = torch.stack([(base * (r + 1)).to(torch.int32).cpu() for r in range(world_size)])
    for op, fold in ((dist.ReduceOp.SUM, every.sum(0, dtype=torch.int32)), (dist.ReduceOp.MIN, every.amin(0)),
                     (dist.ReduceOp.MAX, every.amax(0))):
        t = (base * (rank + 1)).to(torch.int32)
        dist.reduce(t, dst=2, op=op)
        want = fold if rank == 2 else (base * (rank + 1)).to(torch.int32).cpu()  # off the root: untouched
        assert torch.equal(t.cpu(), want), (rank, op)
    t = torch.full((n,), 2.0 + rank, device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    assert torch.allclose(t.cpu(), torch.full((n,), 2.0 + (world_size - 1) / 2)), t[:4]
    # a bucket of tensors in one NCCL group
    ts = [torch.full((k + 1,), float(rank + k), device=dev) for k in range(5)]
    dist.all_reduce_coalesced(ts)
    for k, t in enumerate(ts):
        assert torch.equal(t.cpu(), torch.full((k + 1,), float(sum(range(world_size)) + world_size * k)))
    # gather and scatter (grouped send/recv)
    outs = [torch.empty(n, dtype=torch.float64, device=dev) for _ in range(world_size)] if rank == 1 else None
    dist.gather(base + rank, outs, dst=1)
    if rank == 1:
        for r, o in enumerate(outs):
            assert torch.equal(o.cpu(), (base + r).cpu())
    got = torch.empty(n, dtype=torch.float64, device=dev)
    dist.scatter(got, [base * r for r in range(world_size)] if rank == 0 else None, src=0)
    assert torch.equal(got.cpu(), (base * rank).cpu())
    # uneven all_to_all_single: rank r sends r + 1 + p rows to rank p
    splits_in = [rank + 1 + p for p in range(world_size)]
    splits_out = [q + 1 + rank for q in range(world_size)]
    send = torch.cat([torch.full((s, 3), float(100 * rank + p), device=dev) for p, s in enumerate(splits_in)])
    recv = torch.empty(sum(splits_out), 3, device=dev)
    dist.all_to_all_single(recv, send, splits_out, splits_in)
    want = torch.cat([torch.full((s, 3), float(100 * q + rank)) for q, s in enumerate(splits_out)])
    assert torch.equal(recv.cpu(), want)
    # list all_to_all
    ins = [torch.full((4,), float(10 * rank + p), device=dev) for p in range(world_size)]
    outs = [torch.empty(4, device=dev) for _ in range(world_size)]
    dist.all_to_all(outs, ins)
    for q, o in enumerate(outs):
        assert torch.equal(o.cpu(), torch.full((4,), float(10 * q + rank)))
    # In place (output is input): NCCL's send of a piece and its receive into that same memory are posted
    # in one group, so pride sends from a copy. Pieces of 1 MiB, so that NCCL moves each in several chunks.
    piece = 1 << 18
    t = torch.arange(world_size * piece, dtype=torch.float32, device=dev) + 1e7 * rank
    dist.all_to_all_single(t, t)
    want = torch.cat([torch.arange(rank * piece, (rank + 1) * piece, dtype=torch.float32) + 1e7 * q
                      for q in range(world_size)])
    assert torch.equal(t.cpu(), want), "all_to_all_single in place"
    sizes = [[(a + b) % 3 + 1 for b in range(world_size)] for a in range(world_size)]  # a sends sizes[a][b] to b
    t = torch.cat([torch.full((sizes[rank][b] * piece,), 10.0 * rank + b, device=dev) for b in range(world_size)])
    dist.all_to_all_single(t, t, [sizes[a][rank] * piece for a in range(world_size)],
                           [sizes[rank][b] * piece for b in range(world_size)])
    want = torch.cat([torch.full((sizes[a][rank] * piece,), 10.0 * a + rank) for a in range(world_size)])
    assert torch.equal(t.cpu(), want), "all_to_all_single in place, uneven"
    ts = [torch.full((piece,), float(10 * rank + p), device=dev) for p in range(world_size)]
    dist.all_to_all(ts, ts)
    for q, o in enumerate(ts):
        assert torch.equal(o.cpu(), torch.full((piece,), float(10 * q + rank))), "all_to_all in place"
    _pieces_of_different_sizes(rank, world_size, dev)  # an all_gather and a reduce_scatter
    # reduce_scatter_v whose output is memory that another rank's piece of the input is read from (the
    # reduces are one NCCL group): rank r's output is the start of its input piece for rank r + 1.
    lengths = [piece + 5 * r for r in range(world_size)]  # increasing: each output fits in the next piece
    pieces = [torch.arange(k, dtype=torch.float32, device=dev) * (rank + 1) for k in lengths]
    want = torch.arange(lengths[rank], dtype=torch.float32) * sum(range(1, world_size + 1))
    out = pieces[rank + 1][:lengths[rank]] if rank + 1 < world_size else torch.empty(lengths[rank], device=dev)
    dist.reduce_scatter(out, pieces)
    assert torch.equal(out.cpu(), want), "reduce_scatter_v into memory another rank's piece is read from"
    # the calls above went over NCCL; a bool allreduce (no NCCL op for it) still works, staged
    flags = torch.tensor([rank == 0, True, False], device=dev)
    dist.all_reduce(flags, op=dist.ReduceOp.BOR)
    assert flags.cpu().tolist() == [True, True, False]
    # 3 reduce, the AVG allreduce, the coalesced allreduce, gather, scatter, the five all-to-alls and
    # the uneven all_gather and both reduce_scatters: one NCCL call each; the bool BOR went the staged way
    # and is counted elsewhere.
    assert pride.stats()["per_algorithm"]["nccl"]["calls"] == 15, pride.stats()
    # Coalesced calls (one Work over their parts, coalesced_work.h): its wait(), and its future's, order
    # the current stream after every part, so the copies below, queued at once, read the results.
    from torch.distributed.distributed_c10d import _coalescing_manager

    gathered = [torch.empty(world_size * k, device=dev) for k in (piece, 7)]
    scattered = [torch.empty(k, device=dev) for k in (piece, 7)]
    with _coalescing_manager(async_ops=True) as gathers:  # one kind of call per manager
        for out in gathered:
            dist.all_gather_into_tensor(out, torch.full((out.numel() // world_size,), float(rank), device=dev))
    with _coalescing_manager(async_ops=True) as scatters:
        for out in scattered:
            dist.reduce_scatter_tensor(out, torch.arange(world_size * out.numel(), dtype=torch.float32, device=dev))
    gathers.wait()
    (scatter_work,) = scatters.works
    scatter_work.get_future().wait()  # the future too orders the current stream after every part
    copies = [t.clone() for t in gathered + scattered]  # on the current stream, no host synchronisation
    for k, got in zip((piece, 7), copies[:2]):
        assert torch.equal(got.cpu(), torch.arange(world_size, dtype=torch.float32).repeat_interleave(k))
    for k, got in zip((piece, 7), copies[2:]):
        assert torch.equal(got.cpu(), torch.arange(rank * k, (rank + 1) * k, dtype=torch.float32) * world_size)
    dist.destroy_process_group()


def test_reduce_gather_scatter_alltoall_and_coalesced_over_nccl_3ranks():
    run(_on_nccl, 3, _more_collectives, deadline_s=300)


@pytest.mark.parametrize("mode,votes", [("vote", "binary"), ("mean", "ternary"), ("vote", "exact")])
def test_distributed_lion_over_nccl_equals_the_cpu_step_and_replicas_agree_4ranks(mode, votes):
    run(_on_nccl, 4, _lion_cpu_vs_cuda, torch.float32, mode, votes, True, None, True, env={"PRIDE_ALGO": "direct"},
        deadline_s=400)


def _killed_mid_collective(rank, world_size, store_path, stamp_path):
    import pride

    init_group(rank, world_size, store_path, timeout_s=30)
    torch.cuda.set_device(0)
    x = torch.randn(1 << 22, device="cuda")
    pride.sign_allreduce(x)  # everyone is up, the communicator exists
    dist.all_reduce(x)
    torch.cuda.synchronize()
    if rank == 1:
        with open(stamp_path, "w") as f:
            f.write(repr(time.time()))
        os.kill(os.getpid(), signal.SIGKILL)
    with pytest.raises(Exception) as err:
        for _ in range(1000):
            dist.all_reduce(x)
            pride.sign_allreduce(x)
        torch.cuda.synchronize()
    raised = time.time()
    with open(stamp_path) as f:
        killed = float(f.read())
    message = str(err.value)
    assert "pride" in message and "peer 1" in message, message
    assert raised - killed < 10, f"raised {raised - killed:.1f} s after the kill (timeout 30 s): {message}"


def test_killed_rank_mid_collective_survivors_raise_naming_it_3ranks(tmp_path):
    outcome = run(_on_nccl, 3, _killed_mid_collective, str(tmp_path / "killed_at"), expect_failures=True,
                  deadline_s=200)
    assert outcome[0] is None and outcome[2] is None, outcome


def _out_of_memory_mid_collective(rank, world_size, store_path):
    init_group(rank, world_size, store_path, timeout_s=60)
    torch.cuda.set_device(0)
    x = torch.arange(3 << 24, dtype=torch.float32, device="cuda")  # 192 MiB
    dist.all_reduce(x[:1024])  # everyone is up, the communicator exists
    torch.cuda.synchronize()
    if rank == 1:
        # In-place all-to-all sends from a copy of x, made on pride's stream once the collective has begun
        # (after the fingerprint check, so the peers are in it): leave this rank no room for that copy.
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction((torch.cuda.memory_reserved() + (32 << 20)) / total)
    start = time.monotonic()
    with pytest.raises(Exception) as err:
        dist.all_to_all_single(x, x)
        torch.cuda.synchronize()
    took = time.monotonic() - start
    message = str(err.value)
    if rank == 1:
        assert "out of memory" in message.lower(), message
    else:  # told by rank 1, not timed out: it failed after the peers had posted their NCCL calls
        assert "rank 1/3" in message and "failed on this rank" in message and "out of memory" in message.lower(), \
            message
        assert took < 20, f"raised after {took:.1f} s (timeout 60 s): {message}"


def test_local_failure_mid_collective_is_told_to_the_peers_3ranks():
    """A rank whose part of a collective fails for a reason of its own (no GPU memory for a copy) tells
    the peers at once, instead of leaving them to wait for it until their deadline."""
    run(_on_nccl, 3, _out_of_memory_mid_collective, deadline_s=200)


def _mismatched(rank, world_size, store_path):
    import pride

    init_group(rank, world_size, store_path, timeout_s=30)
    torch.cuda.set_device(0)
    with pytest.raises(Exception, match="ranks disagree|different arguments"):
        dist.all_reduce(torch.ones(100 + (rank == 1), device="cuda"))
    with pytest.raises(Exception, match="ranks disagree|different arguments"):
        pride.sign_allreduce(torch.ones(100, device="cuda"), mode="mean" if rank == 2 else "vote")
    dist.destroy_process_group()


def test_mismatched_calls_fail_on_every_rank_3ranks():
    run(_on_nccl, 3, _mismatched, deadline_s=120)
