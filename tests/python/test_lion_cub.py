"""Lion Cub's options of DistributedLion: the p-bit (int8) allreduce against pride's 1-bit vote and
against the authors' quantization formula re-computed here with numpy, and the momentum-sync
schedules against the authors' calculate_Tv loop."""

import os

import numpy as np
import pytest
import torch
import torch.distributed as dist

import distributed_harness as harness


def _grads(rank, step, shapes, dtype):
    g = torch.Generator().manual_seed(100 * step + rank)
    out = [torch.randn(s, generator=g).to(dtype) for s in shapes]
    out[0].view(-1)[:5] = 0.0  # exact zeros abstain in both paths
    return out


SHAPES = [(37, 50), (1290,), (3, 3, 70)]  # large enough that the int8 sum is not folded into the call check


def _int8_sign_equals_vote_worker(rank, world_size, store_path, mode, dtype):
    import pride

    harness.init_group(rank, world_size, store_path)
    torch.manual_seed(0)
    a = [torch.nn.Parameter(torch.randn(s).to(dtype)) for s in SHAPES]
    b = [torch.nn.Parameter(p.detach().clone()) for p in a]
    c = [torch.nn.Parameter(p.detach().clone()) for p in a]
    bits = pride.optim.DistributedLion(a, lr=0.01, weight_decay=0.1, mode=mode)
    int8 = pride.optim.DistributedLion(b, lr=0.01, weight_decay=0.1, mode=mode, aggregation="int8")
    runs = [("bits", bits, a), ("int8", int8, b)]
    if mode == "vote":  # the level vote returns only the sign: vote mode only
        runs.append(("levels", pride.optim.DistributedLion(c, lr=0.01, weight_decay=0.1, aggregation="levels"), c))
    traffic = {}
    for name, opt, params in runs:
        pride.reset_stats()
        for step in range(6):
            for p, g in zip(params, _grads(rank, step, SHAPES, dtype)):
                p.grad = g
            opt.step()
        traffic[name] = pride.stats()["bytes_sent"]
    for x, y, z in zip(a, b, c):
        assert torch.equal(x, y), "the int8 sum of signs and the 1-bit vote gave different parameters"
        if mode == "vote":
            assert torch.equal(x, z), "the level vote of signs and the 1-bit vote gave different parameters"
    numel = sum(int(np.prod(s)) for s in SHAPES)
    everyone = [None] * world_size
    dist.all_gather_object(everyone, traffic)
    total = {k: sum(t[k] for t in everyone) for k in traffic}
    # int8 ring: 2(N-1)/N bytes per element per step on average over the ranks (plus a layout check);
    # the 1-bit path (ternary here: the zeros make buckets go ternary) well under half of it.
    assert total["int8"] >= 6 * 2 * (world_size - 1) * numel, total
    assert total["bits"] < total["int8"] / 2, total
    if mode == "vote":  # signs as levels ±1: two planes out, two back, (N-1)/N each
        assert 6 * 4 * (world_size - 1) * numel / 8 <= total["levels"] < total["int8"] / 2.5, total
    dist.destroy_process_group()


@pytest.mark.parametrize("world_size,mode,dtype", [(3, "vote", torch.float32), (4, "vote", torch.bfloat16),
                                                   (4, "mean", torch.float32)])
def test_int8_sum_of_signs_is_the_one_bit_vote_bit_for_bit(world_size, mode, dtype):
    harness.run(_int8_sign_equals_vote_worker, world_size, mode, dtype)


def _authors_q(c, s, kind):
    """Lion Cub's code (mean_signlion.py, lioncub_8bit_l0.py, lioncub_8bit_linf.py) in numpy."""
    a = np.abs(c)
    scale = {"l1": a.mean(), "l0": np.exp(np.log(a + 1e-12).mean()), "linf": a.max()}[kind]
    return np.clip(np.round(c / scale * s / 2), -s, s)


def _authors_step(x, grads, momenta, s, kind, lr=0.01, beta1=0.9, beta2=0.99):
    """One Lion Cub step of one tensor by the authors' formula: every rank's c quantized and summed,
    x minus lr times the sum's sign. `grads` and `momenta` hold every rank's; the momenta advance in place."""
    total = np.zeros(x.size)
    for g, m in zip(grads, momenta):
        g = g.numpy().reshape(-1)
        c = (m * np.float32(beta1)).astype(np.float32) + (g * np.float32(1 - beta1)).astype(np.float32)
        total += _authors_q(c.astype(np.float64), s, kind)
        m[:] = (m * np.float32(beta2)).astype(np.float32) + (g * np.float32(1 - beta2)).astype(np.float32)
    return (x - np.float32(lr) * np.sign(total).astype(np.float32)).astype(np.float32)


def _l1_worker(rank, world_size, store_path, kind, bucket_mb, aggregation):
    import pride

    harness.init_group(rank, world_size, store_path)
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s)) for s in SHAPES]
    opt = pride.optim.DistributedLion(params, lr=0.01, betas=(0.9, 0.99), aggregation=aggregation,
                                      quantization=kind, bucket_mb=bucket_mb)
    s = 127 // world_size
    momenta = [[np.zeros(p.numel(), dtype=np.float32) for p in params] for _ in range(world_size)]
    x = [p.detach().numpy().reshape(-1).copy() for p in params]
    for step in range(4):
        everyone = [_grads(r, step, SHAPES, torch.float32) for r in range(world_size)]
        for p, g in zip(params, everyone[rank]):
            p.grad = g
        opt.step()
        for i in range(len(params)):
            x[i] = _authors_step(x[i], [grads[i] for grads in everyone], [mom[i] for mom in momenta], s, kind)
            np.testing.assert_array_equal(params[i].detach().numpy().reshape(-1), x[i], err_msg=f"step {step}")
    dist.destroy_process_group()


# bucket_mb=0.001: the int8 sums go out in pieces of 262 elements, several per tensor, in flight while
# the next tensor is quantized. "levels": the same Δ through pride.level_vote's bit planes.
@pytest.mark.parametrize("kind,bucket_mb,aggregation", [("l1", None, "int8"), ("l0", None, "int8"),
                                                        ("linf", None, "int8"), ("l1", 0.001, "int8"),
                                                        ("l1", None, "levels"), ("linf", 0.001, "levels")])
def test_quantized_vote_matches_the_authors_formula(kind, bucket_mb, aggregation):
    harness.run(_l1_worker, 3, kind, bucket_mb, aggregation)


def _calculate_tv(iters, k):
    """The authors' utils/sync.py schedule, as a loop."""
    tv, j = [0], 0
    while tv[-1] + 2 ** (j / k) <= iters:
        tv.append(int(tv[-1] + 2 ** (j / k)))
        j += 1
    return tv


def test_momentum_sync_schedules():
    from pride.optim import MomentumSync

    for k in (1, 4, 16):
        sync = MomentumSync(doubling_k=k)
        due = [t for t in range(1, 20001) if sync.due(t)]
        assert due == _calculate_tv(20000, k)[1:], k
    assert sum(MomentumSync(doubling_k=16).due(t) for t in range(1, 100001)) == len(_calculate_tv(100000, 16)) - 1 == 193
    assert [t for t in range(1, 31) if MomentumSync(every=7, until=20).due(t)] == [7, 14]
    with pytest.raises(ValueError, match="exactly one"):
        MomentumSync()
    with pytest.raises(ValueError, match="until"):
        MomentumSync(every=2, until=0)


def _momentum_sync_worker(rank, world_size, store_path):
    import pride

    harness.init_group(rank, world_size, store_path)
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s)) for s in SHAPES]
    sync = pride.optim.MomentumSync(every=3, params=[params[0], params[2]])
    opt = pride.optim.DistributedLion(params, lr=0.01, momentum_sync=sync)
    for step in range(6):
        for p, g in zip(params, _grads(rank, step, SHAPES, torch.float32)):
            p.grad = g
        opt.step()
        momenta = [opt.state[p]["exp_avg"].clone() for p in params]
        gathered = [None] * world_size
        dist.all_gather_object(gathered, [m.numpy().tobytes() for m in momenta])
        same = [all(g[i] == gathered[0][i] for g in gathered) for i in range(len(params))]
        if (step + 1) % 3 == 0:
            assert same == [True, False, True], (step, same)  # the selected ones are averaged, the others not
        else:
            assert same == [False, False, False], (step, same)
    assert opt.state_dict()["pride"]["steps"] == 6
    dist.destroy_process_group()


def test_momentum_sync_averages_the_selected_momenta():
    harness.run(_momentum_sync_worker, 3)


def _steps_apart_worker(rank, world_size, store_path, aggregation):
    import pride

    harness.init_group(rank, world_size, store_path)
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s)) for s in SHAPES]
    opt = pride.optim.DistributedLion(params, lr=0.01, aggregation=aggregation,
                                      momentum_sync=pride.optim.MomentumSync(every=3))
    for step in range(5):
        for p, g in zip(params, _grads(rank, step, SHAPES, torch.float32)):
            p.grad = g
        opt.step()
        if step == 3:
            older = opt.state_dict()
    # rank 1 resumes from the checkpoint one step older than rank 0's
    opt.load_state_dict(older if rank == 1 else opt.state_dict())
    for p, g in zip(params, _grads(rank, 5, SHAPES, torch.float32)):
        p.grad = g
    with pytest.raises(ValueError, match=r"step counts differ \(rank 0 at step 5, rank 1 at step 4\)"):
        opt.step()
    dist.destroy_process_group()


@pytest.mark.parametrize("aggregation", ["bits", "int8"])
def test_ranks_whose_momentum_sync_schedules_are_a_step_apart_are_told_the_steps(aggregation):
    """The ranks used to meet at the first step whose schedule differed, one averaging its momenta and the
    other voting: "ranks disagree on the collective: allreduce SUM ... vs ...", without the counts."""
    harness.run(_steps_apart_worker, 2, aggregation)


def test_lion_cub_options_refuse_bad_combinations():
    import pride

    p = [torch.nn.Parameter(torch.zeros(3))]
    with pytest.raises(ValueError, match="aggregation='int8'"):
        pride.optim.DistributedLion(p, quantization="l1")
    with pytest.raises(ValueError, match="mode='global'"):
        pride.optim.DistributedLion(p, aggregation="int8", mode="global")
    with pytest.raises(ValueError, match="quantization"):
        pride.optim.DistributedLion(p, aggregation="int8", quantization="l2")
    with pytest.raises(TypeError, match="MomentumSync"):
        pride.optim.DistributedLion(p, momentum_sync={"every": 2})
    with pytest.raises(ValueError, match="aggregation='levels' returns only the sign.*needs aggregation='int8'"):
        pride.optim.DistributedLion(p, aggregation="levels", mode="mean")
    with pytest.raises(ValueError, match="needs aggregation='bits'"):
        pride.optim.DistributedLion(p, aggregation="levels", mode="global")


def _level_vote_worker(rank, world_size, store_path, device="cpu", numels=(10_007,)):
    """device "cuda": every rank's levels on the one GPU (checked, packed and unpacked there, cuda_level_ops.h);
    "mixed": even ranks on the GPU, odd ones on the CPU, which must agree bit for bit."""
    import pride

    harness.init_group(rank, world_size, store_path)
    dev = "cuda" if device == "cuda" or (device == "mixed" and rank % 2 == 0) else "cpu"
    if dev == "cuda":
        torch.cuda.set_device(0)
    # The largest levels N ranks may sum in int8, and the smallest ones (levels ±1 and ±2 pack as counts
    # under PRIDE_RESULT_CODING=counts/packed).
    top = 127 // world_size

    def levels_of(r, seed, s, numel):  # every rank's values, reproducible on every rank
        g = torch.Generator().manual_seed(seed + r)
        q = torch.randint(-s, s + 1, (numel,), generator=g, dtype=torch.int8)
        q[:3] = torch.tensor([s, -s, s if r % 2 else -s], dtype=torch.int8)  # extremes, and a tie at even N
        return q

    coded = os.environ.get("PRIDE_RESULT_CODING", "auto") not in ("auto", "planes")
    for numel in numels:
        for seed, s in ((1, top), (2, top), (3, 1), (4, 2)):
            everyone = [levels_of(r, 10 * seed, s, numel) for r in range(world_size)]
            want = torch.sign(torch.stack([q.to(torch.int32) for q in everyone]).sum(0)).to(torch.int8)
            q = everyone[rank].to(dev)
            pride.reset_stats()
            pride.level_vote(q, s)
            assert torch.equal(q.cpu(), want), f"rank {rank} ({dev}, s={s}, n={numel}): the level vote differs from " \
                                                "the int32 oracle's sign"
            if coded:
                continue
            sent = pride.stats()["per_algorithm"]["level_direct"]["bytes_sent"]
            planes = int(np.ceil(np.log2(2 * s + 1)))
            # Each owner's chunk is whole 64-element words, so per-rank bytes vary a little around the formula.
            assert abs(sent - (world_size - 1) / world_size * (planes + 2) * numel / 8) < 64 * world_size, sent
    numel, s = numels[0], top

    # A strided view and an async call: the result lands in the caller's tensor.
    base = torch.zeros(2 * numel, dtype=torch.int8, device=dev)
    base[::2] = levels_of(rank, 5, s, numel).to(dev)
    view = base[::2]
    pride.level_vote(view, s, async_op=True).wait()
    want = torch.sign(torch.stack([levels_of(r, 5, s, numel).to(torch.int32) for r in range(world_size)]).sum(0))
    assert torch.equal(view.cpu(), want.to(torch.int8)) and not base[1::2].any()

    # Ordering (GPU ranks): the values are written after a long kernel on the caller's stream, and nothing
    # synchronizes; then a kernel queued after wait() reads the result. Every rank votes s, so the sign is
    # +1: reading the values before the write gives −2, reading the result before the unpack 2s (in int8:
    # −2 at s = 127), never 2.
    big = 1 << 22
    if dev == "cuda":
        q = torch.full((big,), -1, dtype=torch.int8, device=dev)
        torch.cuda._sleep(200_000_000)  # about 0.1 s of GPU time
        q.fill_(s)
    else:
        q = torch.full((big,), s, dtype=torch.int8)
    work = pride.level_vote(q, s, async_op=True)
    work.wait()
    doubled = q * 2
    assert torch.equal(doubled.cpu(), torch.full((big,), 2, dtype=torch.int8)), \
        f"rank {rank} ({dev}): the level vote did not follow the caller's stream"

    # Out of range on one rank: every rank raises, naming it; the group stays usable.
    q = torch.ones(100, dtype=torch.int8, device=dev)
    if rank == world_size - 1:
        q[7] = -s - 1  # within int8 for every s, even a world of one's 127
    with pytest.raises(ValueError, match=f"rank {world_size - 1} has values outside"):
        pride.level_vote(q, s)
    with pytest.raises(TypeError, match="int8"):
        pride.level_vote(torch.ones(5, device=dev), s)
    q = torch.full((64,), 1, dtype=torch.int8, device=dev)
    pride.level_vote(q, 1)
    assert torch.equal(q.cpu(), torch.ones(64, dtype=torch.int8))
    dist.destroy_process_group()


@pytest.mark.parametrize("world_size", [3, 4])
def test_level_vote_is_the_sign_of_the_int32_sum(world_size):
    harness.run(_level_vote_worker, world_size)


# On CUDA tensors: the GPU's packing and unpacking (cuda/level_kernels.cu, cuda_level_ops.h) between the
# same host messages, so ranks on the GPU and on the CPU agree bit for bit, with the levels and results
# as planes or coded (PRIDE_RESULT_CODING; ±1 and ±2 pack as counts).
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("world_size,device,coding", [(1, "cuda", "planes"), (4, "cuda", "planes"),
                                                      (4, "cuda", "packed"), (3, "mixed", "planes"),
                                                      (3, "mixed", "packed")])
def test_level_vote_on_cuda_is_the_sign_of_the_int32_sum(world_size, device, coding):
    harness.run(_level_vote_worker, world_size, device, (10_007, (1 << 20) + 13),
                env={"PRIDE_RESULT_CODING": coding}, deadline_s=300)


def _same(a, b):
    """Equal values, NaN equal to NaN (payloads aside), as float32 compares them: every value of both dtypes
    here is exact in float32."""
    a, b = a.float(), b.float()
    return a.shape == b.shape and bool(((a == b) | (a.isnan() & b.isnan())).all())


def _torch_interpolation(g, m, beta1, beta2):
    """c and the new m as the torch path computes them, in the tensors' dtype."""
    c = torch.mul(m, beta1).add_(torch.mul(g, 1 - beta1))
    m_next = torch.mul(m, beta2).add_(torch.mul(g, 1 - beta2))
    return c, m_next


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("quantization", ["sign", "l1", "l0", "linf"])
@pytest.mark.parametrize("infinite", [False, True])
def test_fused_cpu_passes_equal_torch_operations(dtype, quantization, infinite):
    """The CPU's fused passes (collectives/bits/lion_cub.h) against torch's own operations on the same
    data: c and m, q (for l1 with the scale as float64's mean of |c| rounded to float32, which the
    fused pass computes where torch sums in float32), and the apply."""
    from pride import _C
    from pride.optim import lion_cub

    gen = torch.Generator().manual_seed(17)
    n, s = 10_007, 31
    g = (torch.randn(n, generator=gen) * 1e-3).to(dtype)
    m = (torch.randn(n, generator=gen) * 1e-3).to(dtype)
    g[:5], m[:5] = 0.0, 0.0  # c = 0: abstains
    g[5:8] = float("nan")  # c = NaN: abstains too
    g[8] = 1e-3 * (torch.finfo(dtype).eps / 4)  # rounds away in c
    if infinite:  # the scale is then infinite too (but for l0): finite c send 0, and inf/inf (NaN) sends 0
        g[9], g[10] = float("inf"), float("-inf")
    assert lion_cub._fused_on(m, g, m)
    want_c, want_m = _torch_interpolation(g, m, 0.9, 0.99)
    want_c = torch.nan_to_num(want_c.float(), nan=0.0, posinf=float("inf"), neginf=float("-inf"))

    q, c32, m_fused = torch.empty(n, dtype=torch.int8), torch.empty(n), m.clone()
    lion_cub._fused_quantize(g, m_fused, 0.9, 0.99, quantization, s, q, c32)
    assert _same(m_fused, want_m), "momentum differs from torch's"
    assert torch.equal(c32, want_c), "c differs from torch's"

    if quantization == "l1":  # the scale: float64's mean of |c|, rounded to float32
        scale = torch.tensor(np.abs(want_c.numpy().astype(np.float64)).mean(), dtype=torch.float32)
        want_q = torch.div(want_c, scale).mul_(s / 2).round_().clamp_(-s, s).nan_to_num_(nan=0.0).to(torch.int8)
    else:
        want_q = torch.empty(n, dtype=torch.int8)
        lion_cub.quantize_(want_c.clone(), quantization, s, want_q, torch.empty(n))
    assert torch.equal(q, want_q), f"q differs from torch's in {int((q != want_q).sum())} elements"
    assert (q[:8] == 0).all()

    # The apply: x·(1 − lr·λ) − lr·sign(Σq), as the torch path's mul_ and add_.
    total = torch.randint(-100, 101, (n,), generator=gen, dtype=torch.int8)
    x = torch.randn(n, generator=gen).to(dtype)
    want_x = x.clone().mul_(1 - 3e-3 * 0.1).add_(torch.sign(total).to(dtype), alpha=-3e-3)
    _C.lion_cub_apply_sign(x, total, 3e-3, 0.1)
    assert _same(x, want_x), "the apply differs from torch's"


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("quantization", ["l1", "linf"])
def test_a_scale_that_is_not_positive_sends_zeros(fused, quantization):
    """Every c 0, or (l1) one subnormal among zeros, whose mean rounds to a float32 0: q is 0 everywhere on
    both paths, though c/0 would be ±inf for the subnormal (the torch path decides this on the device,
    without reading the scale on the host)."""
    from pride.optim import lion_cub

    n, s = 1000, 31
    for value in (0.0, float(torch.finfo(torch.float32).smallest_normal) * 2 ** -23):
        if value == 0.0 or quantization == "l1":
            g, m = torch.zeros(n), torch.zeros(n)
            g[7] = value / 0.1  # c = 0.1·g rounds back to the subnormal (or 0)
            q = torch.full((n,), 5, dtype=torch.int8)
            if fused:
                lion_cub._fused_quantize(g, m, 0.9, 0.99, quantization, s, q, torch.empty(n))
            else:
                c, _ = _torch_interpolation(g, m, 0.9, 0.99)
                if value and quantization == "l1":
                    assert c[7] != 0 and c.abs().mean() == 0, "the case needs a mean that underflows"
                lion_cub.quantize_(c, quantization, s, q, torch.empty(n))
            assert (q == 0).all(), f"value {value}: {int((q != 0).sum())} nonzero q"


def test_fused_cpu_passes_refuse_what_they_cannot_take():
    from pride import _C
    from pride.optim import lion_cub

    x = torch.zeros(10)
    assert not lion_cub._fused_on(x.half(), x.half(), x.half())  # float16 keeps torch's operations
    assert not lion_cub._fused_on(x, torch.zeros(20)[::2], x)  # a strided gradient too
    with pytest.raises(ValueError, match="contiguous CPU float32 or bfloat16"):
        _C.lion_cub_interpolate(x.half(), x.half(), 0.9, 0.99, x)
    with pytest.raises(ValueError, match="c must be a contiguous CPU Float tensor of 10 elements"):
        _C.lion_cub_interpolate(x, x.clone(), 0.9, 0.99, torch.zeros(9))
    with pytest.raises(ValueError, match="scale must be > 0"):
        _C.lion_cub_levels(x, torch.zeros(10, dtype=torch.int8), 0.0, 3)
    with pytest.raises(ValueError, match="max_level must be in"):
        _C.lion_cub_levels(x, torch.zeros(10, dtype=torch.int8), 1.0, 128)


def test_fused_cpu_passes_do_not_depend_on_the_thread_count():
    """Several chunks of 2^16 elements on torch's threads: c, m, the l1 scale and q are the same with one
    thread as with two; an empty tensor is a no-op."""
    from pride.optim import lion_cub

    gen = torch.Generator().manual_seed(23)
    n = 300_001
    g, m0 = torch.randn(n, generator=gen), torch.randn(n, generator=gen)
    results = []
    saved = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            m, q, c = m0.clone(), torch.empty(n, dtype=torch.int8), torch.empty(n)
            lion_cub._fused_quantize(g, m, 0.9, 0.99, "l1", 31, q, c)
            results.append((m, q, c))
    finally:
        torch.set_num_threads(saved)
    for a, b in zip(*results):
        assert torch.equal(a, b)
    assert results[0][1].abs().max() > 1  # real levels, not only signs
    empty = torch.empty(0)
    lion_cub._fused_quantize(empty, empty.clone(), 0.9, 0.99, "l1", 31, torch.empty(0, dtype=torch.int8), empty.clone())


@pytest.mark.parametrize("quantization,mode", [("sign", "vote"), ("sign", "mean"), ("l0", "vote"), ("linf", "vote")])
def test_one_rank_step_fused_equals_the_torch_path(monkeypatch, quantization, mode):
    """DistributedLion's whole int8 step in one process (no group), float32 and bfloat16 parameters, one
    without a gradient: the fused passes against the same step with them switched off. ("l1"'s scale is
    summed differently on the two paths, test_fused_cpu_passes_equal_torch_operations covers it.)"""
    import pride
    from pride.optim import lion_cub

    gen = torch.Generator().manual_seed(31)
    shapes = [(300, 7), (5,), (4099,)]
    start = [torch.randn(s, generator=gen).to(dt) for s in shapes for dt in (torch.float32, torch.bfloat16)]
    fused = [torch.nn.Parameter(t.clone()) for t in start]
    plain = [torch.nn.Parameter(t.clone()) for t in start]
    kw = dict(lr=1e-2, betas=(0.9, 0.99), weight_decay=0.1, mode=mode, aggregation="int8", quantization=quantization)
    opt_fused, opt_plain = pride.optim.DistributedLion(fused, **kw), pride.optim.DistributedLion(plain, **kw)
    calls = []
    original = lion_cub._fused_quantize
    monkeypatch.setattr(lion_cub, "_fused_quantize", lambda *a, **k: calls.append(1) or original(*a, **k))
    for step in range(4):
        for i, (a, b) in enumerate(zip(fused, plain)):
            g = torch.randn(a.shape, generator=gen).to(a.dtype)
            g.view(-1)[:3] = 0.0
            a.grad, b.grad = (None, None) if (i + step) % 5 == 0 else (g, g.clone())
        opt_fused.step()
        with monkeypatch.context() as m:
            m.setattr(lion_cub, "_fused_on", lambda *tensors: False)
            m.setattr(lion_cub, "_FUSED_DTYPES", ())
            opt_plain.step()
        for i, (a, b) in enumerate(zip(fused, plain)):
            assert torch.equal(a, b), f"step {step}, tensor {i} ({a.dtype}): the fused step differs"
            sa, sb = opt_fused.state[a], opt_plain.state[b]
            assert ("exp_avg" in sa) == ("exp_avg" in sb)
            assert "exp_avg" not in sa or torch.equal(sa["exp_avg"], sb["exp_avg"])
    assert calls, "the fused passes never ran"


def _fused_vs_torch_path_worker(rank, world_size, store_path, options):
    from pride.optim import DistributedLion, lion_cub

    harness.init_group(rank, world_size, store_path)
    shapes = [(3,), (64,), (65, 7), (1000, 33), (70_000,), (5,)]
    for dtype, missing in ((torch.float32, True), (torch.bfloat16, False)):
        g = torch.Generator().manual_seed(1234)
        start = [torch.randn(s, generator=g).to(dtype) for s in shapes]
        fused = [torch.nn.Parameter(t.clone()) for t in start]
        plain = [torch.nn.Parameter(t.clone()) for t in start]
        kw = dict(lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1, mode="vote", votes="exact", **options)
        opt_fused, opt_plain = DistributedLion(fused, **kw), DistributedLion(plain, bucket_mb=0.1, **kw)
        rank_gen = torch.Generator().manual_seed(99 + rank)
        for step in range(6):
            for i, (a, b) in enumerate(zip(fused, plain)):
                grad = torch.randn(a.shape, generator=rank_gen).to(dtype)
                if step == 2:
                    grad[..., :1] = 0.0
                absent = missing and ((i + rank + step) % 3 == 0 or (i == 1 and step == 3))
                a.grad, b.grad = (None, None) if absent else (grad, grad.clone())
            opt_fused.step()
            saved = lion_cub._fused_on, lion_cub._FUSED_DTYPES
            lion_cub._fused_on, lion_cub._FUSED_DTYPES = (lambda *tensors: False), ()
            try:
                opt_plain.step()
            finally:
                lion_cub._fused_on, lion_cub._FUSED_DTYPES = saved
            for i, (a, b) in enumerate(zip(fused, plain)):
                assert torch.equal(a.view(torch.int16 if dtype == torch.bfloat16 else torch.int32),
                                   b.view(torch.int16 if dtype == torch.bfloat16 else torch.int32)), \
                    f"rank {rank} {dtype} step {step} tensor {i}: the fused step differs from the torch path"
                sa, sb = opt_fused.state[a], opt_plain.state[b]
                assert ("exp_avg" in sa) == ("exp_avg" in sb)
                assert "exp_avg" not in sa or torch.equal(sa["exp_avg"], sb["exp_avg"])


# What tests/python/test_cuda.py's Lion Cub test rests on, at its 4 ranks: CUDA parameters take torch's
# operations, CPU ones the fused passes, and the GPU test compares the two bit for bit. Here both run on
# the CPU, the second with the fused passes switched off and in several buckets, over the same group.
@pytest.mark.parametrize("aggregation,quantization",
                         [("int8", "sign"), ("int8", "linf"), ("levels", "linf"), ("levels", "sign")])
def test_fused_step_equals_the_torch_path_4ranks(aggregation, quantization):
    harness.run(_fused_vs_torch_path_worker, 4, {"aggregation": aggregation, "quantization": quantization})
