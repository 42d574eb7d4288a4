"""CUDA tensors end to end (SPEC §2, §3): sign-allreduce on the GPU against the int32 oracle, CUDA stream
semantics, the standard collectives on CUDA tensors, DistributedLion on CUDA parameters against the
CPU step (itself tested against plain Lion and the oracle). Ranks share the one GPU when there is one.

Marked gpu: scripts/device_test.sh runs them on the GPU machine; elsewhere they skip.
"""

import pytest
import torch

from distributed_harness import init_group, run
from future_callbacks import future_callbacks

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine"),
]

DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def _inputs(world_size, numel, dtype, seed):
    """Every rank's input, the same on every rank: ordinary values mixed with ±0, NaN and ±inf."""
    g = torch.Generator().manual_seed(seed)
    xs = []
    for _ in range(world_size):
        x = torch.randn(numel, generator=g)
        special = torch.tensor([0.0, -0.0, float("nan"), float("inf"), -float("inf")])
        pick = torch.randint(0, 12, (numel,), generator=g)
        x = torch.where(pick < 5, special[pick.clamp(max=4)], x)
        xs.append(x.to(dtype))
    return xs


def _oracle(xs, mode, votes, dtype):
    """The int32 sum of the ranks' ±1 (or 0) votes, then sign or s/N (SPEC §2), computed plainly on the CPU."""
    n = len(xs)
    s = torch.zeros(xs[0].numel(), dtype=torch.int32)
    for x in xs:
        xf = x.float()
        if votes == "binary":
            s += torch.where(xf > 0, 1, -1).int()
        else:
            s += (xf > 0).int() - (xf < 0).int()
    if mode == "vote":
        return torch.sign(s).to(dtype)
    return (s.float() / float(n)).to(dtype)


def _same_bits(a, b):
    return torch.equal(a.view(torch.int16 if a.element_size() == 2 else torch.int32),
                       b.view(torch.int16 if b.element_size() == 2 else torch.int32))


def _sign_sweep(rank, world_size, store_path, algorithm, path=None):
    import pride

    init_group(rank, world_size, store_path)
    torch.cuda.set_device(0)
    pride.reset_stats()
    for numel in (1, 1000, 65 * 64 + 3, 300_001):
        for dtype in DTYPES:
            for mode in ("vote", "mean"):
                for votes in ("binary", "ternary"):
                    seed = numel * 7 + DTYPES.index(dtype) * 3 + (mode == "mean") * 11 + (votes == "ternary")
                    xs = _inputs(world_size, numel, dtype, seed)
                    x = xs[rank].cuda()
                    pride.sign_allreduce(x, mode=mode, votes=votes)
                    want = _oracle(xs, mode, votes, dtype)
                    got = x.cpu()
                    assert _same_bits(got, want), (
                        f"rank {rank} {algorithm} {path} {mode} {votes} {dtype} numel {numel}: "
                        f"{(got.float() != want.float()).sum().item()} elements differ from the oracle")
    if path is not None and world_size > 1:
        # The data path taken is the one asked for: every byte of the direct algorithm left from GPU
        # memory (device), or none did (host staging).
        direct = pride.stats()["per_algorithm"]["direct"]
        want_device = direct["bytes_sent"] if path == "device" else 0
        assert direct["bytes_sent"] > 0 and direct["device_bytes_sent"] == want_device, (rank, path, direct)


@pytest.mark.parametrize("algorithm", ["ring", "tree", "allgather"])
def test_sign_allreduce_on_cuda_matches_the_oracle_4ranks(algorithm):
    run(_sign_sweep, 4, algorithm, env={"PRIDE_ALGO": algorithm}, deadline_s=300)


@pytest.mark.parametrize("path", ["device", "host"])
def test_sign_allreduce_on_cuda_direct_both_data_paths_4ranks(path):
    """The direct algorithm with the planes moved GPU to GPU by UCX and counted on the GPU (device), and
    staged through pinned host memory (host): the same bits as the oracle either way (PRIDE_CUDA_PATH)."""
    run(_sign_sweep, 4, "direct", path, env={"PRIDE_ALGO": "direct", "PRIDE_CUDA_PATH": path}, deadline_s=300)


@pytest.mark.parametrize("variant,env", [
    ("segments", {"PRIDE_SEGMENT_BYTES": "4096"}),
    ("packed", {"PRIDE_RESULT_CODING": "packed"}),
])
def test_sign_allreduce_on_cuda_device_path_pipelined_and_packed_4ranks(variant, env):
    """What the sweep above leaves out at its sizes: the direct algorithm's pipeline over several
    segments with two buffer sets in device memory (4 KiB segments: about ten at 300,001 elements), and
    result chunks sent coded, encoded and decoded on the GPU: votes as trits, means as counts packed in
    base 5 (binary) or 9 (ternary); the cost model never picks them on one host. Both settings are in
    the call's fingerprint, so every rank gets them."""
    run(_sign_sweep, 4, "direct", "device", env={"PRIDE_ALGO": "direct", "PRIDE_CUDA_PATH": "device", **env},
        deadline_s=300)


def _mixed_paths(rank, world_size, store_path):
    import os

    # Ranks on different data paths send the same messages: half the group stages through the host.
    os.environ["PRIDE_CUDA_PATH"] = "device" if rank % 2 == 0 else "host"
    _sign_sweep(rank, world_size, store_path, "direct", os.environ["PRIDE_CUDA_PATH"])


@pytest.mark.parametrize("env", [{}, {"PRIDE_SEGMENT_BYTES": "4096", "PRIDE_RESULT_CODING": "packed"}],
                         ids=["one-segment", "segments-and-packed"])
def test_sign_allreduce_on_cuda_ranks_on_different_data_paths_4ranks(env):
    run(_mixed_paths, 4, env={"PRIDE_ALGO": "direct", **env}, deadline_s=300)


def test_sign_allreduce_on_cuda_one_rank():
    run(_sign_sweep, 1, "auto", deadline_s=300)


def _stream_semantics(rank, world_size, store_path):
    import pride

    init_group(rank, world_size, store_path)
    torch.cuda.set_device(0)
    n = 1 << 24
    # Ordering: a long kernel runs before the write the collective must see. Nothing synchronizes.
    x = torch.full((n,), -1.0, device="cuda")
    torch.cuda._sleep(200_000_000)  # about 0.1 s of GPU time on the current stream
    x.fill_(1.0)
    pride.sign_allreduce(x)
    assert torch.equal(x.cpu(), torch.ones(n)), f"rank {rank}: the collective did not wait for the caller's stream"

    # Wait semantics: a kernel queued after work.wait() on the current stream reads the result.
    for trial in range(3):
        value = -1.0 if trial % 2 == 0 else 1.0
        y = torch.full((n,), value, device="cuda")
        work = pride.sign_allreduce(y, async_op=True)
        work.wait()
        doubled = y * 2
        assert torch.equal(doubled.cpu(), torch.full((n,), 2 * value)), f"rank {rank}: read before the result was there"

    # A side stream as the caller's current stream works the same way.
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        z = torch.full((4096,), -3.0, device="cuda")
        pride.sign_allreduce(z, mode="mean")
        assert torch.equal(z.cpu(), torch.full((4096,), -1.0))

    # The Future of a CUDA work orders the waiter's stream too.
    w = torch.full((n,), 5.0, device="cuda")
    fut = pride.sign_allreduce(w, async_op=True).get_future()
    fut.wait()
    assert torch.equal((w + 1).cpu(), torch.full((n,), 2.0))


def test_cuda_stream_semantics_2ranks():
    run(_stream_semantics, 2, deadline_s=240)


def test_future_callbacks_on_cuda_may_wait_for_collectives_as_on_gloo_2ranks(tmp_path):
    for backend in ("gloo", "pride"):
        # a chain of callbacks each waiting for the next all_reduce, a callback reading its result behind a
        # long kernel, torch's PowerSGD hook over CUDA DDP (tests/python/future_callbacks.py)
        run(future_callbacks, 2, backend, str(tmp_path / f"{backend}.pt"), "cuda", deadline_s=240)
    for a, b in zip(torch.load(tmp_path / "pride.pt"), torch.load(tmp_path / "gloo.pt")):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def _pieces_of_different_sizes(rank, world_size, dev):
    """all_gather into outputs of different sizes and reduce_scatter of inputs of different sizes (rank
    r's piece: 2r rows, none on rank 0), as views of one tensor: the staged path, or NCCL's calls."""
    import torch.distributed as dist

    rows = [2 * r for r in range(world_size)]
    whole = torch.empty(sum(rows), 5, device=dev)
    dist.all_gather(list(torch.split(whole, rows)), torch.full((rows[rank], 5), float(7 * rank + 1), device=dev))
    assert torch.equal(whole.cpu(), torch.cat([torch.full((rows[r], 5), float(7 * r + 1)) for r in range(world_size)]))
    every = [(torch.arange(sum(rows) * 2).view(sum(rows), 2) * (r + 1)) for r in range(world_size)]
    mine = every[rank].to(dev)
    out = torch.empty(rows[rank], 2, dtype=torch.int64, device=dev)
    dist.reduce_scatter(out, list(torch.split(mine, rows)))
    start = sum(rows[:rank])
    assert torch.equal(out.cpu(), sum(e[start:start + rows[rank]] for e in every))
    assert torch.equal(mine.cpu(), every[rank]), "reduce_scatter must leave its inputs as they were"


def _standard_collectives(rank, world_size, store_path):
    import torch.distributed as dist

    init_group(rank, world_size, store_path)
    torch.cuda.set_device(0)
    dev = torch.device("cuda", 0)
    n = 1000
    base = torch.arange(n, dtype=torch.float32, device=dev)

    t = base + rank
    dist.all_reduce(t)
    assert torch.equal(t.cpu(), (base * world_size + sum(range(world_size))).cpu())

    t = (base + rank).to(torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    assert torch.equal(t.cpu(), (base + world_size - 1).to(torch.int64).cpu())

    t = base + rank if rank == 1 else torch.zeros(n, device=dev)
    dist.broadcast(t, src=1)
    assert torch.equal(t.cpu(), (base + 1).cpu())

    outs = [torch.empty(n, device=dev) for _ in range(world_size)]
    dist.all_gather(outs, base + rank)
    for r, o in enumerate(outs):
        assert torch.equal(o.cpu(), (base + r).cpu())

    flat = torch.empty(world_size * n, device=dev)
    dist.all_gather_into_tensor(flat, base + rank)
    assert torch.equal(flat.view(world_size, n).cpu(), torch.stack([base.cpu() + r for r in range(world_size)]))

    out = torch.empty(n, device=dev)
    dist.reduce_scatter_tensor(out, torch.cat([base + rank + 10 * r for r in range(world_size)]))
    want = sum(base.cpu() + q + 10 * rank for q in range(world_size))
    assert torch.equal(out.cpu(), want)

    # In place: the output is the rank's own chunk of the input (a view); only outputs go back to the
    # device, so the input's stale copy of that chunk cannot overwrite the result.
    full = torch.cat([base + rank + 10 * r for r in range(world_size)])
    mine = full.chunk(world_size)[rank]
    dist.reduce_scatter_tensor(mine, full)
    assert torch.equal(mine.cpu(), want)

    _pieces_of_different_sizes(rank, world_size, dev)

    send = torch.arange(world_size * 4, dtype=torch.float32, device=dev) + 100 * rank
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send)
    want = torch.cat([torch.arange(4) + 4 * rank + 100 * r for r in range(world_size)]).float()
    assert torch.equal(recv.cpu(), want)

    peer = (rank + 1) % world_size
    src = (rank - 1) % world_size
    msg = torch.full((n,), float(rank), device=dev)
    got = torch.empty(n, device=dev)
    reqs = [dist.isend(msg, peer), dist.irecv(got, src)]
    for r in reqs:
        r.wait()
    assert torch.equal(got.cpu(), torch.full((n,), float(src)))
    # to every rank, itself included, as torch's test_batch_isend_irecv_nccl does
    gots = [torch.empty(3, dtype=torch.int32, device=dev) for _ in range(world_size)]
    ops = [dist.P2POp(dist.isend, torch.full((3,), 10 * rank + q, dtype=torch.int32, device=dev), q)
           for q in range(world_size)]
    ops += [dist.P2POp(dist.irecv, gots[q], q) for q in range(world_size)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    for q in range(world_size):
        assert torch.equal(gots[q].cpu(), torch.full((3,), 10 * q + rank, dtype=torch.int32))

    dist.barrier()


def test_standard_collectives_on_cuda_tensors_3ranks():
    run(_standard_collectives, 3, deadline_s=240)


def _lion_cpu_vs_cuda(rank, world_size, store_path, dtype, mode, votes, missing=False, path=None, over_nccl=False,
                      options=None):
    import torch.distributed as dist

    import pride

    from pride.optim import DistributedLion

    if world_size > 1:
        init_group(rank, world_size, store_path)
    torch.cuda.set_device(0)
    g = torch.Generator().manual_seed(1234)
    shapes = [(3,), (64,), (65, 7), (1000, 33), (70_000,), (5,)]
    params_cpu = [torch.randn(s, generator=g).to(dtype) for s in shapes]
    params_gpu = [p.clone().cuda() for p in params_cpu]
    params_cpu = [torch.nn.Parameter(p) for p in params_cpu]
    params_gpu = [torch.nn.Parameter(p) for p in params_gpu]
    kw = dict(lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1, mode=mode, votes=votes, **(options or {}))
    opt_cpu = DistributedLion(params_cpu, **kw)
    opt_gpu = DistributedLion(params_gpu, bucket_mb=0.1, **kw)  # several buckets
    rank_gen = torch.Generator().manual_seed(99 + rank)
    for step in range(6):
        for i, (pc, pg) in enumerate(zip(params_cpu, params_gpu)):
            grad = torch.randn(pc.shape, generator=rank_gen).to(dtype)
            if step == 2:
                grad[..., :1] = 0.0  # exact zeros take part too
            # missing gradients: a rank- and step-dependent pattern, and tensor 1 has none anywhere at step 3
            absent = missing and ((i + rank + step) % 3 == 0 or (i == 1 and step == 3))
            pc.grad = None if absent else grad
            pg.grad = None if absent else grad.cuda()
        opt_cpu.step()
        opt_gpu.step()
        for i, (pc, pg) in enumerate(zip(params_cpu, params_gpu)):
            assert _same_bits(pc.detach(), pg.detach().cpu()), f"rank {rank} step {step} tensor {i}: parameters differ"
            assert ("exp_avg" in opt_cpu.state[pc]) == ("exp_avg" in opt_gpu.state[pg])
            if "exp_avg" in opt_cpu.state[pc]:
                mc, mg = opt_cpu.state[pc]["exp_avg"], opt_gpu.state[pg]["exp_avg"]
                assert _same_bits(mc, mg.cpu()), f"rank {rank} step {step} tensor {i}: momentum differs"
    if world_size > 1:
        # Replicas identical: every rank's parameters equal rank 0's.
        flat = torch.cat([p.detach().float().reshape(-1).cpu() for p in params_gpu])
        gathered = [torch.empty_like(flat) for _ in range(world_size)]
        dist.all_gather(gathered, flat)
        for r, other in enumerate(gathered):
            assert torch.equal(other.view(torch.int32), flat.view(torch.int32)), f"replica {r} differs from rank {rank}"
        if path is not None:
            device_bytes = pride.stats()["device_bytes_sent"]
            assert (device_bytes > 0) == (path == "device"), (rank, path, pride.stats())
        if over_nccl:  # the GPU optimizer's votes went over NCCL (the CPU one's over UCX)
            assert pride.stats()["per_algorithm"].get("nccl_direct", {}).get("calls", 0) > 0, (rank, pride.stats())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode,votes", [("vote", "binary"), ("vote", "ternary"), ("mean", "binary"), ("mean", "ternary"),
                                        ("vote", "exact"), ("mean", "exact")])
def test_distributed_lion_cuda_equals_the_cpu_step_one_process(dtype, mode, votes):
    _lion_cpu_vs_cuda(0, 1, None, dtype, mode, votes)


@pytest.mark.parametrize("mode,votes", [("vote", "exact"), ("mean", "binary")])
def test_distributed_lion_cuda_missing_gradients_equal_the_cpu_step_one_process(mode, votes):
    # A world of one steps each tensor with a gradient in one pass (lion_local_slices) and skips the others.
    _lion_cpu_vs_cuda(0, 1, None, torch.float32, mode, votes, missing=True)


@pytest.mark.parametrize("path", ["device", "host"])
@pytest.mark.parametrize("mode,votes", [("vote", "binary"), ("mean", "ternary"), ("vote", "exact")])
def test_distributed_lion_cuda_equals_the_cpu_step_4ranks(mode, votes, path):
    env = {"PRIDE_ALGO": "direct", "PRIDE_CUDA_PATH": path}
    run(_lion_cpu_vs_cuda, 4, torch.float32, mode, votes, False, path, env=env, deadline_s=300)
    run(_lion_cpu_vs_cuda, 4, torch.bfloat16, mode, votes, False, path, env=env, deadline_s=300)


@pytest.mark.parametrize("path", ["device", "host"])
@pytest.mark.parametrize("mode,votes", [("vote", "exact"), ("mean", "binary")])
def test_distributed_lion_cuda_missing_gradients_equal_the_cpu_step_4ranks(mode, votes, path):
    env = {"PRIDE_ALGO": "direct", "PRIDE_CUDA_PATH": path}
    run(_lion_cpu_vs_cuda, 4, torch.float32, mode, votes, True, path, env=env, deadline_s=300)


def _remembered_abstentions_on_cuda(rank, world_size, store_path, dtype, mode, path):
    """Exact votes on CUDA parameters where each rank has more exactly-zero updates than a bucket may list
    every step (dead units: 1 element in 100 on every rank, as replicas' dead units are, and 1 in 500 on
    each rank, a different set each; an eighth of both come alive at step 6): the CUDA step lists them on
    the device, the buckets remember their union, re-vote the part where some rank votes after binary votes
    and leave the part where all abstain at a count of 0 (device_revote.h). Against the CPU step, bit for
    bit, every step; and the bytes: near binary votes', far from ternary ones'."""
    import torch.distributed as dist

    import pride

    from pride.optim import DistributedLion

    init_group(rank, world_size, store_path)
    torch.cuda.set_device(0)
    g = torch.Generator().manual_seed(4321)
    shapes = [(3,), (64,), (65, 7), (1000, 33), (70_000,), (5,)]
    initial = [torch.randn(s, generator=g).to(dtype) for s in shapes]
    kw = dict(lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1, mode=mode)
    runs = {}
    for name, device, votes in [("cpu", "cpu", "exact"), ("exact", "cuda", "exact"), ("binary", "cuda", "binary"),
                                ("ternary", "cuda", "ternary")]:
        params = [torch.nn.Parameter(p.clone().to(device)) for p in initial]
        runs[name] = (params, DistributedLion(params, bucket_mb=0.1, votes=votes, **kw), [0])
    rank_gen = torch.Generator().manual_seed(7 + rank)
    sizes = {}
    for step in range(12):
        grads = []
        for shape in shapes:
            grad = torch.randn(shape, generator=rank_gen).to(dtype)
            idx = torch.arange(grad.numel()).reshape(shape)
            dead = ((idx * 13) % 100 == 0) | ((idx * 7 + rank * 101) % 500 == 0)
            # From step 6 on, the dead elements of one hundred in eight come alive on every rank (of
            # both sets: a parity of idx would not do, the ranks' own sets are ≡ rank mod 2): few enough
            # that U stays and the elements of E where some rank votes again are listed and taken out
            # (bucket_agreement.cc), which the memory's sizes below show.
            grads.append(torch.where(dead & ((step < 6) | ((idx // 100) % 8 != 0)), torch.zeros_like(grad), grad))
        for name, (params, opt, sent) in runs.items():
            for p, grad in zip(params, grads):
                p.grad = grad.to(p.device)
            before = pride.stats()["bytes_sent"]
            opt.step()
            sent[0] += pride.stats()["bytes_sent"] - before
        if step in (5, 6):
            memory = next(iter(runs["exact"][1]._abstention_memories.values()))
            sizes[step] = (memory.remembered, memory.everywhere)
        for i, (pc, pg) in enumerate(zip(runs["cpu"][0], runs["exact"][0])):
            assert _same_bits(pc.detach(), pg.detach().cpu()), f"rank {rank} step {step} tensor {i}: parameters differ"
            mc, mg = runs["cpu"][1].state[pc]["exp_avg"], runs["exact"][1].state[pg]["exp_avg"]
            assert _same_bits(mc, mg.cpu()), f"rank {rank} step {step} tensor {i}: momentum differs"
    flat = torch.cat([p.detach().float().reshape(-1).cpu() for p in runs["exact"][0]])
    gathered = [torch.empty_like(flat) for _ in range(world_size)]
    dist.all_gather(gathered, flat)
    for r, other in enumerate(gathered):
        assert torch.equal(other.view(torch.int32), flat.view(torch.int32)), f"replica {r} differs from rank {rank}"
    remembered = [m.remembered for m in runs["exact"][1]._abstention_memories.values()]
    assert remembered and all(any(size > 0 for size in r) for r in remembered), remembered
    # Step 6 kept the buckets' unions (a refresh would have made them of the shorter lists; in bf16 a few
    # momenta and gradients cancel to an exact 0 and extend them) and took from their parts known to
    # abstain everywhere what came alive, but not all of it (as when too many come alive to list).
    (union_5, everywhere_5), (union_6, everywhere_6) = sizes[5], sizes[6]
    assert all(u6 >= u5 for u5, u6 in zip(union_5, union_6)), sizes
    assert all(0 < e6 <= e5 for e5, e6 in zip(everywhere_5, everywhere_6)), sizes
    assert sum(everywhere_6) < sum(everywhere_5), sizes
    # The same agreements as the CPU step's, whose bytes in this scenario stay well under half of what
    # ternary votes add to binary ones; every bucket ternary would be all of it and more.
    sent = {name: run_[2][0] for name, run_ in runs.items()}
    assert sent["ternary"] > sent["binary"], (rank, sent)
    assert sent["exact"] - sent["binary"] < 0.5 * (sent["ternary"] - sent["binary"]), (rank, sent)
    if path is not None:
        assert (pride.stats()["device_bytes_sent"] > 0) == (path == "device"), (rank, path, pride.stats())


@pytest.mark.parametrize("mode,path", [("vote", "device"), ("mean", "device"), ("vote", "host")])
def test_distributed_lion_cuda_remembers_abstentions_and_revotes_them_exactly_4ranks(mode, path):
    env = {"PRIDE_ALGO": "direct", "PRIDE_CUDA_PATH": path}
    run(_remembered_abstentions_on_cuda, 4, torch.float32, mode, path, env=env, deadline_s=300)
    # The lists, the re-vote and its re-encoding see bits, not the dtype: bf16 on one pair only, to keep
    # the GPU session's first call short.
    if (mode, path) == ("vote", "device"):
        run(_remembered_abstentions_on_cuda, 4, torch.bfloat16, mode, path, env=env, deadline_s=300)


# Lion Cub's int8 sum on CUDA parameters: torch operations on the device against the same on the CPU. The
# signs, and the L-inf levels (a max, the same whatever the reduction order), give the same bits; L1 and L0
# take a mean, whose float32 sum a GPU orders differently. Missing gradients abstain on both. "levels":
# the same sums' signs through pride.level_vote, its CUDA levels packed on the GPU (cuda_level_ops.h);
# ("levels", "sign") also issues each level_vote without any host read of the device before it (no
# scale to compute), so a pack that did not wait for the caller's stream would show.
@pytest.mark.parametrize("aggregation,quantization",
                         [("int8", "sign"), ("int8", "linf"), ("levels", "linf"), ("levels", "sign")])
def test_lion_cub_int8_on_cuda_equals_the_cpu_step_4ranks(aggregation, quantization):
    options = {"aggregation": aggregation, "quantization": quantization}
    run(_lion_cpu_vs_cuda, 4, torch.float32, "vote", "exact", True, None, False, options, deadline_s=300)
    run(_lion_cpu_vs_cuda, 4, torch.bfloat16, "vote", "exact", False, None, False, options, deadline_s=300)


def _lion_cub_scaled_on_cuda(rank, world_size, store_path, kind):
    """Lion Cub's "l1" and "l0" quantizations on CUDA parameters, which take torch's operations on the
    device (their scale is a float32 mean there, a float64 one in the CPU passes, so the two paths are
    not compared bit for bit): every rank's parameters must be identical, and equal the authors'
    formula in numpy (float64 scale) except where the scale's last bit moves a q across a rounding
    half, which these sizes make a rare event."""
    import numpy as np
    import torch.distributed as dist

    from pride.optim import DistributedLion
    from test_lion_cub import SHAPES, _authors_step, _grads

    init_group(rank, world_size, store_path)
    torch.cuda.set_device(0)
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(shape).cuda()) for shape in SHAPES]
    opt = DistributedLion(params, lr=0.01, betas=(0.9, 0.99), aggregation="int8", quantization=kind)
    s = 127 // world_size
    momenta = [[np.zeros(p.numel(), dtype=np.float32) for p in params] for _ in range(world_size)]
    x = [p.detach().cpu().numpy().reshape(-1).copy() for p in params]
    differing = total_elements = 0
    for step in range(4):
        everyone = [_grads(r, step, SHAPES, torch.float32) for r in range(world_size)]
        for p, g in zip(params, everyone[rank]):
            p.grad = g.cuda()
        opt.step()
        for i, p in enumerate(params):
            x[i] = _authors_step(x[i], [grads[i] for grads in everyone], [mom[i] for mom in momenta], s, kind)
            got = p.detach().cpu().numpy().reshape(-1)
            differing += int((got != x[i]).sum())
            total_elements += got.size
            x[i] = got.copy()  # follow the device's parameters, so one difference is counted once
    assert differing <= total_elements // 1000, f"rank {rank}: {differing} of {total_elements} elements off the formula"
    mine = torch.cat([p.detach().cpu().reshape(-1) for p in params])
    every = [torch.empty_like(mine) for _ in range(world_size)]
    dist.all_gather(every, mine)
    for r, theirs in enumerate(every):
        assert torch.equal(theirs.view(torch.int32), mine.view(torch.int32)), f"rank {rank}: rank {r}'s replica differs"
    dist.destroy_process_group()


@pytest.mark.parametrize("kind", ["l1", "l0"])
def test_lion_cub_l1_l0_on_cuda_follow_the_authors_formula_and_replicas_agree_3ranks(kind):
    run(_lion_cub_scaled_on_cuda, 3, kind, deadline_s=240)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_distributed_lion_cuda_two_param_groups_on_two_streams_one_process(dtype):
    """A world of one keeps the slice table it last copied to the device. Two parameter groups step one
    after the other with a table each, so each brings its own (copied without the host waiting for the
    other group's kernel); a one-group optimizer of its own workspace finds its table again every
    step (new gradients come back at the same addresses). Every third step runs on a side stream, which
    must wait for the copy of a table it reuses, and hand it back to the stream that frees it."""
    from pride.optim import DistributedLion

    g = torch.Generator().manual_seed(8)
    shapes = [(300, 7), (33,), (70_001,), (5,)]
    p0 = [torch.randn(s, generator=g).to(dtype) for s in shapes]
    pc = [torch.nn.Parameter(p.clone()) for p in p0]
    pg = [torch.nn.Parameter(p.clone().cuda()) for p in p0]

    def groups(ps):
        return [{"params": ps[:2], "weight_decay": 0.1}, {"params": ps[2:], "weight_decay": 0.0}]

    oc, og = DistributedLion(groups(pc), lr=1e-3), DistributedLion(groups(pg), lr=1e-3)
    # One group (its own workspace, float16 so that it is not the groups' dtype either).
    qc = [torch.nn.Parameter(torch.randn(s, generator=g).half()) for s in ((1000,), (7, 9))]
    qg = [torch.nn.Parameter(q.detach().cuda()) for q in qc]
    one_c, one_g = DistributedLion(qc, lr=1e-3), DistributedLion(qg, lr=1e-3)
    side = torch.cuda.Stream()
    for step in range(9):
        for a, b in zip(pc + qc, pg + qg):
            grad = torch.randn(a.shape, generator=g).to(a.dtype)
            a.grad, b.grad = grad, grad.cuda()
        oc.step()
        one_c.step()
        if step % 3 == 2:
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                og.step()
                one_g.step()
            torch.cuda.current_stream().wait_stream(side)
        else:
            og.step()
            one_g.step()
        for i, (a, b) in enumerate(zip(pc + qc, pg + qg)):
            assert _same_bits(a.detach(), b.detach().cpu()), f"step {step} tensor {i}: the CUDA step differs from the CPU's"


@pytest.mark.parametrize("mode", ["vote", "global"])
def test_a_non_contiguous_cuda_parameter_steps_like_the_cpu_one_one_process(mode):
    """A transposed view registered as a parameter is stepped through a contiguous copy written back
    (test_optim checks the CPU step against lion-pytorch): on CUDA the copies are on the caller's stream,
    around the step's kernels, and the result is the CPU step's, bit for bit, in the parameter's memory."""
    from pride.optim import DistributedLion

    g = torch.Generator().manual_seed(5)
    base, other = torch.randn(70, 90, generator=g), torch.randn(600, generator=g)
    pc = [torch.nn.Parameter(base.clone().t()), torch.nn.Parameter(other.clone())]
    pg = [torch.nn.Parameter(base.cuda().t()), torch.nn.Parameter(other.cuda())]
    assert not pg[0].is_contiguous()
    kw = dict(lr=0.01, betas=(0.9, 0.99), weight_decay=0.1, mode=mode)
    oc, og = DistributedLion(pc, **kw), DistributedLion(pg, **kw)
    for step in range(4):
        grads = [torch.randn(90, 70, generator=g).t().contiguous().t(), torch.randn(600, generator=g)]
        for a, b, grad in zip(pc, pg, grads):
            a.grad, b.grad = grad.clone(), grad.cuda()
        oc.step()
        og.step()
        for i, (a, b) in enumerate(zip(pc, pg)):
            assert _same_bits(a.detach(), b.detach().cpu()), f"step {step} tensor {i}: differs from the CPU step"
        assert pg[0].stride() == (1, 90), "the parameter must be stepped in place, not replaced"


def _global_mode(rank, world_size, store_path, dtype, side_stream):
    from pride.optim import DistributedLion

    init_group(rank, world_size, store_path)
    torch.cuda.set_device(0)
    g = torch.Generator().manual_seed(5)
    # Odd sizes: G-Lion's averaged gradients are views of one flat buffer, each placed on 16 bytes so
    # that the one-pass CUDA step (lion_local_slices) reads them with vector loads, as it does the rest.
    shapes = [(561,), (17,), (85, 3), (10_000,), (5,)]
    p0 = [torch.randn(s, generator=g).to(dtype) for s in shapes]
    pc = [torch.nn.Parameter(p.clone()) for p in p0]
    pg = [torch.nn.Parameter(p.clone().cuda()) for p in p0]
    oc, og = DistributedLion(pc, lr=1e-3, mode="global"), DistributedLion(pg, lr=1e-3, mode="global")
    gen = torch.Generator().manual_seed(rank)
    stream = torch.cuda.Stream() if side_stream else torch.cuda.current_stream()
    for _ in range(3):
        for a, b in zip(pc, pg):
            grad = torch.randint(-4, 5, a.shape, generator=gen).to(dtype)  # exact sums in any reduction order
            a.grad, b.grad = grad, grad.cuda()
        oc.step()
        # On a stream of the caller's other than the default one: the step's kernels follow the current stream.
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            og.step()
        torch.cuda.current_stream().wait_stream(stream)
    for i, (a, b) in enumerate(zip(pc, pg)):
        assert _same_bits(a.detach(), b.detach().cpu()), f"rank {rank} tensor {i}: G-Lion on CUDA differs from the CPU step"


@pytest.mark.parametrize("dtype,side_stream", [(torch.float32, False), (torch.bfloat16, False), (torch.float32, True)])
def test_global_mode_on_cuda_matches_cpu_2ranks(dtype, side_stream):
    run(_global_mode, 2, dtype, side_stream, deadline_s=240)


def test_cuda_support_is_compiled_in():
    import pride

    assert pride._C.cuda_supported(), "this build of pride was made without CUDA support on a machine with a GPU"


def test_nccl_transport_is_compiled_in():
    """The GPU machine has torch's NCCL wheel: a build there must carry the NCCL transport."""
    import pride

    assert pride._C.nccl_supported(), "this build of pride was made without the NCCL transport on a machine with a GPU"
