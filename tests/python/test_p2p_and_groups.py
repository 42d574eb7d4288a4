"""Point-to-point with tags, async operations in flight, subgroups, and the Horovod-style helpers."""

import os
import time

import pytest
import torch
import torch.distributed as dist

from distributed_harness import init_group, run


def _p2p(rank, world, store_path):
    init_group(rank, world, store_path)
    right, left = (rank + 1) % world, (rank - 1) % world
    # blocking send/recv with tags, in an order that would deadlock if irecv blocked the worker
    a = torch.full((5,), float(rank))
    b = torch.empty(5)
    req = dist.irecv(b, src=left, tag=7)
    dist.send(a, dst=right, tag=7)
    req.wait()
    assert torch.equal(b, torch.full((5,), float(left)))
    # tags keep messages apart even when posted out of order
    x1, x2 = torch.empty(3), torch.empty(3)
    r2 = dist.irecv(x2, src=left, tag=2)
    r1 = dist.irecv(x1, src=left, tag=1)
    s1 = dist.isend(torch.full((3,), 1.0 + rank), dst=right, tag=1)
    s2 = dist.isend(torch.full((3,), 100.0 + rank), dst=right, tag=2)
    for w in (r1, r2, s1, s2):
        w.wait()
    assert torch.equal(x1, torch.full((3,), 1.0 + left)) and torch.equal(x2, torch.full((3,), 100.0 + left))
    # batch_isend_irecv
    recv = torch.empty(4, dtype=torch.int64)
    ops = [dist.P2POp(dist.isend, torch.arange(4) + 10 * rank, right), dist.P2POp(dist.irecv, recv, left)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    assert torch.equal(recv, torch.arange(4) + 10 * left)
    # to itself: a receive posted before the send, and a send before its receive (torch's
    # test_batch_isend_irecv_nccl sends to every rank, itself included)
    mine = torch.empty(6)
    req = dist.irecv(mine, src=rank, tag=11)
    dist.isend(torch.arange(6.0) * (rank + 1), dst=rank, tag=11).wait()
    req.wait()
    assert torch.equal(mine, torch.arange(6.0) * (rank + 1))
    sent = dist.isend(torch.full((2,), -1.0 - rank), dst=rank, tag=12)
    dist.recv(mine[:2], src=rank, tag=12)
    sent.wait()
    assert torch.equal(mine[:2], torch.full((2,), -1.0 - rank))
    got = [torch.empty(3, dtype=torch.int32) for _ in range(world)]
    ops = [dist.P2POp(dist.isend, torch.full((3,), 10 * rank + peer, dtype=torch.int32), peer) for peer in range(world)]
    ops += [dist.P2POp(dist.irecv, got[peer], peer) for peer in range(world)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    assert all(torch.equal(got[peer], torch.full((3,), 10 * peer + rank, dtype=torch.int32)) for peer in range(world))
    # recv from any source reports the sender
    if rank == 0 and world > 1:
        got = torch.empty(1)
        sender = dist.recv(got)
        assert sender == int(got.item())
    elif rank == 1:
        dist.send(torch.tensor([1.0]), dst=0)
    dist.barrier()
    # pride.stats() counts point-to-point bytes both ways, under "p2p"
    import pride

    pride.reset_stats()
    got = torch.empty(1000)
    req = dist.irecv(got, src=left, tag=9)
    dist.send(torch.full((1000,), float(rank)), dst=right, tag=9)
    req.wait()
    p2p = pride.stats()["per_algorithm"]["p2p"]
    assert (p2p["bytes_sent"], p2p["bytes_received"]) == (4000, 4000), p2p
    dist.barrier()
    dist.destroy_process_group()


def test_point_to_point():
    run(_p2p, 3)


def _async_and_subgroups(rank, world, store_path):
    import pride

    init_group(rank, world, store_path)
    # many collectives in flight at once complete in order with the right values
    ts = [torch.full((1000 + i,), float(rank + i)) for i in range(8)]
    works = [dist.all_reduce(t, async_op=True) for t in ts]
    futs = [w.get_future() for w in works]
    for i, (w, f) in enumerate(zip(works, futs)):
        w.wait()
        assert torch.equal(f.value()[0], ts[i])
        assert torch.equal(ts[i], torch.full((1000 + i,), float(sum(r + i for r in range(world)))))
    # subgroups: evens and odds, each with its own pride backend
    evens = dist.new_group(ranks=[r for r in range(world) if r % 2 == 0], backend="pride")
    odds = dist.new_group(ranks=[r for r in range(world) if r % 2 == 1], backend="pride")
    mine = evens if rank % 2 == 0 else odds
    t = torch.tensor([float(rank)])
    dist.all_reduce(t, group=mine)
    assert t.item() == sum(r for r in range(world) if r % 2 == rank % 2)
    s = torch.tensor([1.0 if rank % 2 == 0 else -1.0])
    pride.sign_allreduce(s, group=mine, mode="mean")
    assert s.item() == (1.0 if rank % 2 == 0 else -1.0)
    # Horovod-style helpers
    assert pride.rank() == rank and pride.size() == world
    assert pride.local_size() == world and pride.local_rank() == rank
    model = torch.nn.Linear(4, 2)
    torch.nn.init.constant_(model.weight, float(rank))
    pride.broadcast_parameters(model.state_dict(), root_rank=1)
    assert torch.all(model.weight == 1.0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1 * (rank + 1), momentum=0.5)
    for p in model.parameters():  # a step each, with gradients of its own: every rank's state differs
        p.grad = torch.full_like(p, float(rank + 1))
    opt.step()
    pride.broadcast_optimizer_state(opt, root_rank=2)
    assert abs(opt.param_groups[0]["lr"] - 0.3) < 1e-12
    for p in model.parameters():  # root 2's momentum buffers: its gradient, 3
        assert torch.equal(opt.state[p]["momentum_buffer"], torch.full_like(p, 3.0)), opt.state[p]
    dist.destroy_process_group()


def test_async_subgroups_and_horovod_helpers():
    run(_async_and_subgroups, 4)


# ---- c10d lifecycle (issue 11): shutdown and abort ----

def _staggered_end(rank, world, store_path):
    init_group(rank, world, store_path)
    x = torch.ones(1000)
    dist.all_reduce(x)
    assert dist.get_backend() == "pride"
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    if hasattr(backend, "options"):  # torch 2.14 binds getBackendOptions(); 2.11 does not
        assert backend.options.backend == "pride", backend.options.backend
    time.sleep(0.4 * rank)  # the ranks end the group at different times, as hosts of a real job do
    dist.destroy_process_group()
    time.sleep(1.5)  # alive a while after: a peer's late close must not be reported as a failure


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_destroy_process_group_ends_quietly(transport, capfd):
    env = {"PRIDE_SHARED_MEMORY": "0"} if transport == "tcp" else {}
    run(_staggered_end, 4, env=env, deadline_s=90)
    err = capfd.readouterr().err
    assert "UCX reports" not in err and "warning" not in err.lower(), err[-3000:]


def _made_again_on_one_store(rank, world, store_path):
    # init, a collective, destroy, three times over one store object: c10d gives each incarnation the same
    # key prefix, and the second one read the first one's dead UCX addresses ("could not create the
    # backend"; Gloo goes on).
    from datetime import timedelta

    import pride  # noqa: F401

    store = dist.FileStore(store_path, world)
    for incarnation in range(3):
        dist.init_process_group("pride", store=store, rank=rank, world_size=world, timeout=timedelta(seconds=10))
        t = torch.full((4,), float(rank + incarnation))
        dist.all_reduce(t)
        assert torch.equal(t, torch.full((4,), float(sum(range(world)) + world * incarnation))), (incarnation, t)
        # c10d names a subgroup by a count that destroy_process_group resets: the same name comes back
        # with another size here (every rank, then ranks 0 and 1), on the same store.
        members = list(range(world)) if incarnation == 0 else [0, 1]
        group = dist.new_group(members)
        if rank in members:
            t = torch.ones(2)
            dist.all_reduce(t, group=group)
            assert torch.equal(t, torch.full((2,), float(len(members)))), (incarnation, t)
        dist.destroy_process_group()


def test_a_group_made_again_on_the_same_store_connects_afresh():
    run(_made_again_on_one_store, 3)


def _abort_hung_collective(rank, world, store_path):
    import threading

    from torch.distributed.distributed_c10d import _abort_process_group

    init_group(rank, world, store_path, timeout_s=60)
    dist.all_reduce(torch.ones(4))
    if rank == 1:
        time.sleep(6)  # never joins the next collective
        return
    # rank 0's all_reduce waits for rank 1; abort() from another thread must end it at once
    timer = threading.Timer(1.0, _abort_process_group)
    timer.start()
    start = time.monotonic()
    with pytest.raises(Exception, match="aborted") as err:
        dist.all_reduce(torch.ones(4))
    elapsed = time.monotonic() - start
    assert elapsed < 5, f"abort took {elapsed:.1f} s: {err.value}"
    assert "rank 0/2" in str(err.value), str(err.value)
    timer.join()


def test_abort_ends_a_hung_collective(capfd):
    outcome = run(_abort_hung_collective, 2, deadline_s=60, expect_failures=True)
    assert outcome[0] is None, outcome[0]
    # One abort, one error line: the collective it stopped logs it, and the destroy that follows (which
    # tells the peers once) adds none.
    errors = [line for line in capfd.readouterr().err.splitlines() if line.startswith("[rank 0]") and " error]" in line]
    assert len(errors) == 1 and "allreduce" in errors[0] and "aborted" in errors[0], errors


def _two_hosts_of_two(rank, world, store_path, sizes):
    os.environ["PRIDE_HOSTNAME"] = f"host{rank // 2}"  # read when the group starts
    init_group(rank, world, store_path)
    import pride
    from pride.horovod import _topology

    # Each rank has one same-host peer (shared memory, UCX's rendezvous) and two on the other host,
    # which it reaches through its second, eager UCX context.
    peers = {p["rank"]: p for p in _topology()["peers"]}
    for peer, p in peers.items():
        remote = peer // 2 != rank // 2
        assert p["eager"] == remote, (rank, p)
        shared_memory = any(t in p["route"] for t in ("posix", "sysv", "cma"))
        assert shared_memory != remote, (rank, p)
    # crossing transfers with every peer, small and past any rendezvous threshold
    for numel in sizes:
        sends = [torch.arange(numel, dtype=torch.int32) * (rank + 1) + peer for peer in range(world)]
        got = {peer: torch.empty(numel, dtype=torch.int32) for peer in range(world) if peer != rank}
        works = [dist.irecv(got[peer], src=peer, tag=3) for peer in got]
        works += [dist.isend(sends[peer], dst=peer, tag=3) for peer in got]
        for w in works:
            w.wait()
        for peer, t in got.items():
            assert torch.equal(t, torch.arange(numel, dtype=torch.int32) * (peer + 1) + rank), (rank, peer, numel)
    # same-tag messages to a remote peer arrive in the order sent; an any-source receive over the link
    if rank == 0:
        works = [dist.isend(torch.full((n,), float(i)), dst=2, tag=4) for i, n in enumerate((1 << 20, 1, 1 << 18))]
        for w in works:
            w.wait()
        dist.send(torch.tensor([5.0]), dst=3)
    elif rank == 2:
        for i, n in enumerate((1 << 20, 1, 1 << 18)):
            t = torch.empty(n)
            dist.recv(t, src=0, tag=4)
            assert torch.equal(t, torch.full((n,), float(i))), (i, t[:4])
    elif rank == 3:
        t = torch.empty(1)
        assert dist.recv(t) == 0 and t.item() == 5.0
    # a collective across both kinds of peer, against the sum computed here
    x = torch.arange(1 << 16, dtype=torch.float64) + rank
    dist.all_reduce(x)
    assert torch.equal(x, 4 * torch.arange(1 << 16, dtype=torch.float64) + 6)
    assert pride.stats()["per_algorithm"]["p2p"]["bytes_sent"] > 0
    dist.destroy_process_group()


@pytest.mark.skipif(any(v in os.environ for v in ("UCX_RNDV_THRESH", "UCX_TLS")),
                    reason="UCX_RNDV_THRESH or UCX_TLS set: the user's UCX settings decide the routes")
def test_point_to_point_between_two_hosts_of_two_ranks():
    run(_two_hosts_of_two, 4, [1, 3 << 20])


def _sharded_tensor_gather(rank, world, store_path):
    import warnings

    from torch.distributed._shard import sharded_tensor
    from torch.distributed._shard.sharding_spec import ChunkShardingSpec

    init_group(rank, world, store_path)
    # torch code that picks a device from the backend's registered devices (ShardedTensor, for every
    # backend but nccl and gloo) must find only "cpu" here, where no GPU is visible.
    devices = dist.BackendConfig(dist.get_backend()).get_device_backend_map()
    assert ("cuda" in devices) == (torch.cuda.device_count() > 0), devices
    spec = ChunkShardingSpec(dim=0, placements=[f"rank:{r}/cpu" for r in range(world)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # ShardedTensor is deprecated in favour of DTensor
        st = sharded_tensor.full(spec, (2 * world, 3), fill_value=float(rank))
        out = torch.empty(2 * world, 3) if rank == 0 else None
        st.gather(dst=0, out=out)
    if rank == 0:  # rows 2r and 2r + 1 are rank r's shard
        assert torch.equal(out, torch.arange(world, dtype=torch.float32).repeat_interleave(2)[:, None].expand(-1, 3)), out
    dist.destroy_process_group()


def test_sharded_tensor_gathers_as_over_gloo_without_a_gpu():
    # On a machine without a GPU pride registered for "cuda" too, and ShardedTensor.gather failed on
    # every rank with "Found no NVIDIA driver on your system" (Gloo gathers).
    if torch.cuda.device_count() > 0:
        pytest.skip("a GPU is visible: ShardedTensor then uses CUDA tensors, as with NCCL")
    run(_sharded_tensor_gather, 2)
