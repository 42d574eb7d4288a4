"""Standard collectives on pride against the same collective on Gloo, in the same job.

Inputs are integer-valued so that every reduction is exact in every dtype: pride and Gloo may
reduce in different orders, and exact arithmetic makes their results comparable bit for bit. Where
Gloo refuses a dtype or op, the result is checked against a plain oracle instead. The last test uses
random floats on purpose: it checks the bits every rank gets, and the order of small sums.
"""

import pytest
import torch
import torch.distributed as dist

from distributed_harness import init_group, run
from future_callbacks import future_callbacks

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int16,
          torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128]
OPS = {
    "sum": dist.ReduceOp.SUM, "product": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
    "max": dist.ReduceOp.MAX, "band": dist.ReduceOp.BAND, "bor": dist.ReduceOp.BOR,
    "bxor": dist.ReduceOp.BXOR, "avg": dist.ReduceOp.AVG,
}


def valid(op, dtype):
    if dtype.is_complex:  # torch.distributed itself allows only these on complex tensors
        return op in ("sum", "avg")
    if op in ("band", "bor", "bxor"):
        return not (dtype.is_floating_point or dtype.is_complex)
    if op in ("min", "max"):
        return not dtype.is_complex
    if op == "avg":
        return dtype.is_floating_point or dtype.is_complex
    return True


def make(rank, dtype, n, salt=0):
    g = torch.Generator().manual_seed(1000 * rank + salt)
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=g).bool()
    low = 0 if dtype == torch.uint8 else -2
    x = torch.randint(low, 3, (n,), generator=g)
    if dtype.is_complex:
        return torch.complex(x.double(), torch.randint(-2, 3, (n,), generator=g).double()).to(dtype)
    return x.to(dtype)


def oracle_reduce(tensors, op):
    out = tensors[0].clone()
    wide = [t.to(torch.complex128 if t.is_complex() else torch.float64) if t.dtype != torch.bool else t for t in tensors]
    if op == "sum" or op == "avg":
        acc = sum(wide[1:], wide[0].clone()) if tensors[0].dtype != torch.bool else torch.stack(tensors).any(0)
        if op == "avg":
            acc = acc / len(tensors)
        return acc.to(out.dtype)
    if op == "product":
        if tensors[0].dtype == torch.bool:
            return torch.stack(tensors).all(0)
        acc = wide[0].clone()
        for t in wide[1:]:
            acc = acc * t
        return acc.to(out.dtype)
    if op == "min":
        return torch.stack(tensors).min(0).values if tensors[0].dtype != torch.bool else torch.stack(tensors).all(0)
    if op == "max":
        return torch.stack(tensors).max(0).values if tensors[0].dtype != torch.bool else torch.stack(tensors).any(0)
    fn = {"band": torch.bitwise_and, "bor": torch.bitwise_or, "bxor": torch.bitwise_xor}[op]
    acc = tensors[0].clone()
    for t in tensors[1:]:
        acc = fn(acc, t)
    return acc


def gloo_or_oracle(fn_gloo, oracle):
    """Runs the collective on Gloo; if Gloo refuses it, returns the oracle instead."""
    try:
        return fn_gloo(), "gloo"
    except (RuntimeError, ValueError, TypeError):
        return oracle(), "oracle"


def same(a, b, what):
    assert a.dtype == b.dtype, what
    if a.is_floating_point() or a.is_complex():
        assert torch.equal(a, b) or torch.allclose(a, b, rtol=1e-3, atol=1e-3, equal_nan=True), f"{what}: {a} vs {b}"
    else:
        assert torch.equal(a, b), f"{what}: {a} vs {b}"


def _allreduce_all(rank, world, store_path):
    init_group(rank, world, store_path)
    gloo = dist.new_group(backend="gloo")
    for dtype in DTYPES:
        for name, op in OPS.items():
            if not valid(name, dtype):
                continue
            for n in (1, 65, 1000, 70001):
                x = make(rank, dtype, n, salt=n)
                mine = x.clone()
                dist.all_reduce(mine, op=op)
                ref = x.clone()
                result, source = gloo_or_oracle(
                    lambda: (dist.all_reduce(ref, op=op, group=gloo), ref)[1],
                    lambda: oracle_reduce([make(r, dtype, n, salt=n) for r in range(world)], name))
                same(mine, result, f"allreduce {dtype} {name} n={n} vs {source}")
    # An op that is not defined for the dtype fails on the caller, before anything is sent.
    with pytest.raises(ValueError, match=rf"pride allreduce \(rank {rank}\): "):
        dist.all_reduce(torch.ones(3), op=dist.ReduceOp.BAND)
    with pytest.raises(ValueError, match=rf"pride allreduce \(rank {rank}\): ReduceOp.PREMUL_SUM is not supported"):
        dist.all_reduce(torch.ones(3), op=dist._make_nccl_premul_sum(2.0))
    # So do arguments that do not fit together, with the collective and the rank in the message.
    with pytest.raises(ValueError, match=rf"pride all_gather_into_tensor \(rank {rank}\): output has"):
        dist.all_gather_into_tensor(torch.empty(world * 3 + 1), torch.ones(3))
    with pytest.raises(ValueError, match=rf"pride all_to_all_single \(rank {rank}\): input splits sum to"):
        dist.all_to_all_single(torch.empty(world), torch.ones(world), input_split_sizes=[world + 1] + [0] * (world - 1))
    t = torch.ones(3)
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((3,), float(world)))
    dist.destroy_process_group()


def _other_collectives(rank, world, store_path):
    init_group(rank, world, store_path)
    gloo = dist.new_group(backend="gloo")
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.uint8, torch.bool,
                  torch.complex64):
        x = make(rank, dtype, 37)
        everyone = [make(r, dtype, 37) for r in range(world)]
        # broadcast from each root
        for root in range(world):
            t = x.clone()
            dist.broadcast(t, src=root)
            assert torch.equal(t, everyone[root]), f"broadcast {dtype} root {root}"
        # reduce (sum) to root
        if dtype != torch.bool:
            for root in range(world):
                t = x.clone()
                dist.reduce(t, dst=root)
                if rank == root:
                    same(t, oracle_reduce(everyone, "sum"), f"reduce {dtype}")
                else:
                    assert torch.equal(t, x), "reduce must leave non-root buffers intact"
        # all_gather (list) and all_gather_into_tensor
        outs = [torch.empty_like(x) for _ in range(world)]
        dist.all_gather(outs, x)
        for r in range(world):
            assert torch.equal(outs[r], everyone[r]), f"all_gather {dtype}"
        ref = [torch.empty_like(x) for _ in range(world)]
        try:
            dist.all_gather(ref, x, group=gloo)
        except RuntimeError:  # Gloo lacks some dtypes; the oracle above covers them
            ref = None
        if ref is not None:
            assert all(torch.equal(outs[r], ref[r]) for r in range(world)), f"all_gather {dtype} vs gloo"
        # all_gather into outputs of different sizes (rank r's input is 2r rows, none on rank 0), views of
        # one tensor as torch's suite makes them; then every rank gives an input that does not fit its
        # slot, each is refused before anything is sent, and the group goes on.
        rows = [2 * r for r in range(world)]
        mine = make(rank, dtype, rows[rank] * 3).view(rows[rank], 3)
        for async_op in (False, True):
            whole = torch.empty(sum(rows), 3, dtype=dtype)
            work = dist.all_gather(list(torch.split(whole, rows)), mine, async_op=async_op)
            if async_op:
                work.wait()
            want = torch.cat([make(r, dtype, rows[r] * 3).view(rows[r], 3) for r in range(world)])
            assert torch.equal(whole, want), f"all_gather of different sizes {dtype} async={async_op}"
        with pytest.raises(ValueError, match="size of output"):
            dist.all_gather(list(torch.split(torch.empty(sum(rows), 3, dtype=dtype), rows)),
                            make(rank, dtype, (rows[rank] + 1) * 3).view(rows[rank] + 1, 3))
        with pytest.raises(ValueError, match=r"output tensors must have \d+ elements, got \d+"):  # one size
            dist.all_gather([torch.empty(37, dtype=dtype) for _ in range(world)], torch.empty(40, dtype=dtype))
        flat = torch.empty(world * 37, dtype=dtype)
        dist.all_gather_into_tensor(flat, x)
        assert torch.equal(flat, torch.cat(everyone)), f"all_gather_into_tensor {dtype}"
        # gather / scatter
        for root in range(world):
            g = [torch.empty_like(x) for _ in range(world)] if rank == root else None
            dist.gather(x, gather_list=g, dst=root)
            if rank == root:
                assert all(torch.equal(g[r], everyone[r]) for r in range(world)), f"gather {dtype}"
            out = torch.empty_like(x)
            dist.scatter(out, scatter_list=[everyone[r] for r in range(world)] if rank == root else None, src=root)
            assert torch.equal(out, everyone[rank]), f"scatter {dtype}"
        # reduce_scatter (list and tensor)
        if dtype != torch.bool:
            pieces = [make(rank, dtype, 11, salt=s) for s in range(world)]
            out = torch.empty(11, dtype=dtype)
            dist.reduce_scatter(out, pieces)
            want = oracle_reduce([make(r, dtype, 11, salt=rank) for r in range(world)], "sum")
            same(out, want, f"reduce_scatter {dtype}")
            out2 = torch.empty(11, dtype=dtype)
            dist.reduce_scatter_tensor(out2, torch.cat(pieces))
            same(out2, want, f"reduce_scatter_tensor {dtype}")
            # inputs of different sizes: input r (2r rows, none for rank 0) is reduced into rank r's output
            rows = [2 * r for r in range(world)]
            whole = make(rank, dtype, sum(rows) * 2).view(sum(rows), 2)
            out_v = torch.empty(rows[rank], 2, dtype=dtype)
            dist.reduce_scatter(out_v, list(torch.split(whole, rows)))
            start = sum(rows[:rank])
            want_v = oracle_reduce([make(r, dtype, sum(rows) * 2).view(sum(rows), 2)[start:start + rows[rank]]
                                    for r in range(world)], "sum")
            same(out_v, want_v, f"reduce_scatter of different sizes {dtype}")
            with pytest.raises(ValueError, match="size of input"):
                dist.reduce_scatter(torch.empty(rows[rank] + 1, 2, dtype=dtype), list(torch.split(whole, rows)))
        # all_to_all (list) and all_to_all_single (equal and unequal splits)
        send = [torch.full((r + 1,), rank * 10 + r).to(dtype) for r in range(world)]
        recv = [torch.empty(rank + 1, dtype=dtype) for _ in range(world)]
        dist.all_to_all(recv, send)
        for r in range(world):
            assert torch.equal(recv[r], torch.full((rank + 1,), r * 10 + rank).to(dtype)), f"all_to_all {dtype}"
        inp = torch.arange(world * 2).to(dtype)
        out = torch.empty(world * 2, dtype=dtype)
        dist.all_to_all_single(out, inp)
        in_splits = [r + 1 for r in range(world)]
        out_splits = [rank + 1] * world
        inp = torch.cat([torch.full((r + 1,), rank).to(dtype) for r in range(world)])
        out = torch.empty(sum(out_splits), dtype=dtype)
        dist.all_to_all_single(out, inp, out_splits, in_splits)
        assert torch.equal(out, torch.cat([torch.full((rank + 1,), r).to(dtype) for r in range(world)]))
    # all_to_all_single in place (output is input): with 3 ranks a block received in one step was sent
    # from the same memory in a later one. Equal splits, then splits that differ per pair.
    t = torch.arange(world * 2, dtype=torch.float32) + 100 * rank
    dist.all_to_all_single(t, t)
    assert torch.equal(t, torch.cat([torch.arange(2 * rank, 2 * rank + 2, dtype=torch.float32) + 100 * r
                                     for r in range(world)])), "all_to_all_single in place"
    sizes = [[(a + b) % 3 + 1 for b in range(world)] for a in range(world)]  # rank a sends sizes[a][b] to b
    t = torch.cat([torch.full((sizes[rank][b],), 10.0 * rank + b) for b in range(world)])
    dist.all_to_all_single(t, t, [sizes[a][rank] for a in range(world)], sizes[rank])
    assert torch.equal(t, torch.cat([torch.full((sizes[a][rank],), 10.0 * a + rank) for a in range(world)])), \
        "all_to_all_single in place, uneven"
    # coalesced variants
    ts = [make(rank, torch.float32, n) for n in (3, 5, 7)]
    dist.all_reduce_coalesced(ts)
    for i, n in enumerate((3, 5, 7)):
        assert torch.equal(ts[i], oracle_reduce([make(r, torch.float32, n) for r in range(world)], "sum"))
    # non-contiguous tensors are staged and written back
    m = torch.arange(12.0).reshape(3, 4).t()
    dist.all_reduce(m)
    assert torch.equal(m, torch.arange(12.0).reshape(3, 4).t() * world)
    dist.barrier()
    dist.destroy_process_group()


def _complex32(rank, world, store_path):
    """complex32 (torch's ComplexHalf, two float16 parts), which torch.equal cannot compare: the collectives
    that reduce it (SUM and AVG, all torch.distributed allows on complex tensors) and the ones that move
    it, against the oracle and Gloo, compared as float16 pairs."""
    import warnings

    warnings.filterwarnings("ignore", message="ComplexHalf support is experimental")
    init_group(rank, world, store_path)
    gloo = dist.new_group(backend="gloo")

    def make32(r, n, salt=0):
        return make(r, torch.complex64, n, salt).to(torch.complex32)

    def check(got, want, what):
        assert got.dtype == torch.complex32 and torch.equal(torch.view_as_real(got), torch.view_as_real(want)), (
            f"complex32 {what}: {got.to(torch.complex64)} vs {want.to(torch.complex64)}")

    x = make32(rank, 37)
    everyone = [make32(r, 37) for r in range(world)]
    for root in range(world):
        t = x.clone()
        dist.reduce(t, dst=root)
        ref = x.clone()
        dist.reduce(ref, dst=root, group=gloo)
        if rank == root:
            check(t, oracle_reduce(everyone, "sum"), f"reduce to {root}")
            check(t, ref, f"reduce to {root}, against Gloo")
        t = x.clone()
        dist.broadcast(t, src=root)
        check(t, everyone[root], f"broadcast from {root}")
    for op in ("sum", "avg"):
        t = x.clone()
        dist.all_reduce(t, op=OPS[op])
        check(t, oracle_reduce(everyone, op), f"all_reduce {op}")
    pieces = [make32(rank, 11, salt=s) for s in range(world)]
    want = oracle_reduce([make32(r, 11, salt=rank) for r in range(world)], "sum")
    out, ref = torch.empty(11, dtype=torch.complex32), torch.empty(11, dtype=torch.complex32)
    dist.reduce_scatter(out, pieces)
    dist.reduce_scatter(ref, pieces, group=gloo)
    check(out, want, "reduce_scatter")
    check(out, ref, "reduce_scatter, against Gloo")
    out = torch.empty(11, dtype=torch.complex32)
    dist.reduce_scatter_tensor(out, torch.cat(pieces))
    check(out, want, "reduce_scatter_tensor")
    outs = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(outs, x)
    for r in range(world):
        check(outs[r], everyone[r], f"all_gather, rank {r}'s")
    inp = torch.cat([make32(rank, 3, salt=r) for r in range(world)])
    out = torch.empty(3 * world, dtype=torch.complex32)
    dist.all_to_all_single(out, inp)
    check(out, torch.cat([make32(r, 3, salt=rank) for r in range(world)]), "all_to_all_single")
    with pytest.raises(ValueError, match=rf"pride reduce \(rank {rank}\): .*PRODUCT.*complex"):
        dist.reduce(x.clone(), dst=0, op=dist.ReduceOp.PRODUCT)
    dist.destroy_process_group()


@pytest.mark.parametrize("world", [2, 3])
def test_complex32_collectives_match_gloo(world):
    run(_complex32, world, deadline_s=120)


@pytest.mark.parametrize("world", [3, 4])
def test_allreduce_every_dtype_and_op_matches_gloo(world):
    run(_allreduce_all, world, deadline_s=300)


@pytest.mark.parametrize("world", [2, 3])
def test_other_collectives(world):
    run(_other_collectives, world, deadline_s=300)


def _self_overlapping_outputs(rank, world, store_path):
    # An expand()ed tensor (stride 0) cannot hold a result: every rank is refused before anything is sent,
    # naming the collective and the rank, and the group goes on working. Read-only inputs may be expanded.
    init_group(rank, world, store_path)
    expanded = torch.ones(1).expand(4)
    calls = {
        "allreduce": lambda: dist.all_reduce(expanded),
        "broadcast": lambda: dist.broadcast(expanded, src=0),
        "allgather": lambda: dist.all_gather([torch.empty(4), expanded], torch.ones(4)),
        "all_gather_into_tensor": lambda: dist.all_gather_into_tensor(torch.ones(1).expand(4 * world), torch.ones(4)),
        "reduce_scatter_tensor": lambda: dist.reduce_scatter_tensor(expanded, torch.ones(4 * world)),
        "all_to_all_single": lambda: dist.all_to_all_single(torch.ones(1).expand(2 * world), torch.ones(2 * world)),
    }
    for name, call in calls.items():
        with pytest.raises(ValueError, match=rf"pride {name} \(rank {rank}\): output tensor \d+ .*share memory"):
            call()
    gathered = [torch.empty(4) for _ in range(world)]
    dist.all_gather(gathered, torch.full((1,), float(rank)).expand(4))  # an expanded input is only read
    assert all(torch.equal(g, torch.full((4,), float(r))) for r, g in enumerate(gathered)), gathered
    t = torch.full((3,), float(rank + 1))
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((3,), float(sum(range(1, world + 1)))))
    sparse = torch.sparse_coo_tensor([[rank]], [1.0], (4,))  # no strides at all: not refused
    dist.all_reduce(sparse)
    assert torch.equal(sparse.to_dense(), torch.tensor([1.0] * world + [0.0] * (4 - world)))
    dist.destroy_process_group()


def test_outputs_whose_elements_share_memory_are_refused_before_sending():
    run(_self_overlapping_outputs, 2)


def _the_group_goes_on(world):
    t = torch.ones(3)
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((3,), float(world)))


def _results_into_autograd_and_inference_tensors(rank, world, store_path):
    # Results written into tensors autograd or inference mode guard, as Gloo writes them: pride's worker
    # copies them back below autograd (it refused the copy after the exchange, and the group failed).
    init_group(rank, world, store_path)
    gloo = dist.new_group(backend="gloo")
    results = {}
    for name, group in (("pride", None), ("gloo", gloo)):
        got = results.setdefault(name, {})
        with torch.inference_mode():
            gathered = [torch.zeros(2) for _ in range(world)]
            dist.all_gather(gathered, torch.full((2,), float(rank)), group=group)  # the list form: copied back
            got["all_gather under inference_mode"] = torch.stack(gathered)
            x = torch.arange(6.0).reshape(2, 3).t() + rank  # non-contiguous: reduced in a copy
            dist.all_reduce(x, group=group)
            got["all_reduce of a non-contiguous tensor under inference_mode"] = x.clone()
        weight = torch.nn.Parameter(torch.arange(6.0).reshape(2, 3) * (rank + 1))
        view = weight.t()  # a view of a leaf that requires grad, as torch's own collectives take it
        dist.all_reduce(view, group=group)
        got["all_reduce of a parameter's transposed view"] = weight.detach().clone()
        conv = torch.nn.Conv2d(3, 4, 3).to(memory_format=torch.channels_last)
        with torch.no_grad():
            conv.weight.copy_(torch.arange(conv.weight.numel(), dtype=torch.float32).reshape(conv.weight.shape)
                              * (rank + 1))
        dist.broadcast(conv.weight, src=world - 1, group=group)
        got["broadcast of a channels_last weight"] = conv.weight.detach().clone()
        assert weight.requires_grad and conv.weight.requires_grad and weight.grad_fn is None
    for what, want in results["gloo"].items():
        assert torch.equal(results["pride"][what], want), (what, results["pride"][what], want)
    _the_group_goes_on(world)
    dist.destroy_process_group()


def test_results_into_autograd_and_inference_tensors_as_gloo_writes_them():
    run(_results_into_autograd_and_inference_tensors, 2)


def _coalesced_calls(rank, world, store_path):
    from torch.distributed.distributed_c10d import _coalescing_manager

    init_group(rank, world, store_path)
    # Several parts, every one written: the coalesced Work ends when all have, its future holds them all.
    outs = [torch.full((3 * world,), -1.0), torch.full((5 * world,), -1.0)]
    with _coalescing_manager(async_ops=True) as cm:
        dist.all_gather_into_tensor(outs[0], torch.full((3,), float(rank)))
        dist.all_gather_into_tensor(outs[1], torch.full((5,), float(rank + 10)))
    cm.wait()
    assert torch.equal(outs[0], torch.arange(world).float().repeat_interleave(3))
    assert torch.equal(outs[1], (torch.arange(world) + 10).float().repeat_interleave(5))
    parts = [torch.full((2,), -1.0), torch.full((4,), -1.0)]
    with _coalescing_manager(async_ops=True) as cm:
        dist.reduce_scatter_tensor(parts[0], torch.arange(2.0 * world) + rank)
        dist.reduce_scatter_tensor(parts[1], torch.arange(4.0 * world) * (rank + 1))
    (work,) = cm.works
    assert work.wait() and work.is_completed() and work.is_success()
    assert all(torch.equal(a, b) for a, b in zip(work.get_future().wait(), parts))
    assert torch.equal(parts[0], world * torch.arange(2.0 * rank, 2.0 * rank + 2) + sum(range(world)))
    assert torch.equal(parts[1], torch.arange(4.0 * rank, 4.0 * rank + 4) * sum(range(1, world + 1)))
    # A part that fails (the ranks' sizes differ) fails the whole call, though a later part succeeds: the
    # last part's Work alone said success, with the first output never written.
    n = 2 + rank
    with pytest.raises(RuntimeError, match="ranks disagree"):
        with _coalescing_manager(async_ops=True) as cm:
            dist.all_gather_into_tensor(torch.empty(n * world), torch.ones(n))
            dist.all_gather_into_tensor(torch.empty(2 * world), torch.ones(2))
        cm.wait()
    with pytest.raises(RuntimeError, match="ranks disagree"):
        with _coalescing_manager(async_ops=True) as cm:
            dist.reduce_scatter_tensor(torch.empty(n), torch.ones(n * world))
            dist.reduce_scatter_tensor(torch.empty(2), torch.ones(2 * world))
        cm.works[0].get_future().wait()
    with pytest.raises(RuntimeError, match="ranks disagree"):
        dist.all_gather_coalesced([[torch.empty(n), torch.empty(2)] for _ in range(world)], [torch.ones(n), torch.ones(2)])
    _the_group_goes_on(world)
    dist.destroy_process_group()


def test_coalesced_calls_end_with_every_part_and_fail_with_any():
    run(_coalesced_calls, 2)


def _sparse_tensors_that_differ(rank, world, store_path):
    # Ranks whose sparse tensors differ in sizes, dtype or sparse dims are refused on every rank, naming
    # a peer and both tensors (as Gloo refuses them); the entries of a larger tensor summed into a smaller
    # one made an invalid tensor. The group goes on.
    init_group(rank, world, store_path)
    cases = {
        "sizes": torch.sparse_coo_tensor([[0]], [1.0], (4 + rank,)),
        "dtype": torch.sparse_coo_tensor([[0]], torch.ones(1, dtype=torch.float32 if rank == 0 else torch.float64), (4,)),
        "sparse dims": (torch.sparse_coo_tensor([[0], [1]], [1.0], (4, 4)) if rank == 0
                        else torch.sparse_coo_tensor([[0]], torch.ones(1, 4), (4, 4))),
        "a size past the 8th": torch.sparse_coo_tensor([[0]] * 9, [1.0], (2,) * 8 + (2 + rank,)),
    }
    for what, t in cases.items():
        with pytest.raises(RuntimeError, match=rf"pride rank {rank}/{world}: allreduce of a sparse tensor: the ranks' "
                                               rf"tensors differ: this rank's is .* peer {1 - rank}'s"):
            dist.all_reduce(t)
    same = torch.sparse_coo_tensor([[rank, 3]], [1.0, 2.0], (5,))
    dist.all_reduce(same)
    assert torch.equal(same.to_dense(), torch.tensor([1.0, 1.0, 0.0, 4.0, 0.0]))
    dist.destroy_process_group()


def test_sparse_tensors_that_differ_across_ranks_are_refused_on_every_rank():
    run(_sparse_tensors_that_differ, 2)


def _float8_moved(rank, world, store_path):
    # The collectives that only move bytes take the float8 dtypes (pride refused them), as NCCL does; Gloo
    # refuses them too, so the oracle is Gloo moving the same bytes as uint8.
    init_group(rank, world, store_path)
    gloo = dist.new_group(backend="gloo")
    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        got = {}
        for name, group, as_type in (("pride", None, dtype), ("gloo", gloo, torch.uint8)):
            def mine(salt, n=5):
                return (torch.arange(n, dtype=torch.float32) * 0.25 + rank + salt).to(dtype).view(as_type)

            def empty(*shape):
                return torch.empty(*shape, dtype=dtype).view(as_type)

            r = got.setdefault(name, {})
            b = mine(0)
            dist.broadcast(b, src=world - 1, group=group)
            r["broadcast"] = b
            gathered = [empty(5) for _ in range(world)]
            dist.all_gather(gathered, mine(1), group=group)
            r["all_gather"] = torch.stack(gathered)
            flat = empty(5 * world)
            dist.all_gather_into_tensor(flat, mine(2), group=group)
            r["all_gather_into_tensor"] = flat
            out = empty(2 * world)
            dist.all_to_all_single(out, mine(3, 2 * world), group=group)
            r["all_to_all_single"] = out
            if name == "pride":  # Gloo has the list form from torch 2.12 on: its oracle is below
                outs = [empty(3) for _ in range(world)]
                dist.all_to_all(outs, [mine(4 + i, 3) for i in range(world)], group=group)
                r["all_to_all"] = torch.stack(outs)
            gather_to = [empty(5) for _ in range(world)] if rank == 0 else None
            dist.gather(mine(5), gather_to, dst=0, group=group)
            if rank == 0:
                r["gather"] = torch.stack(gather_to)
            scattered = empty(5)
            dist.scatter(scattered, [mine(6 + i) for i in range(world)] if rank == 0 else None, src=0, group=group)
            r["scatter"] = scattered
        for what, want in got["gloo"].items():
            assert got["pride"][what].dtype == dtype, what
            assert torch.equal(got["pride"][what].view(torch.uint8), want), (dtype, what)
        # all_to_all: rank q sent this rank its piece number `rank`, made with salt 4 + rank
        want = torch.stack([(torch.arange(3, dtype=torch.float32) * 0.25 + q + 4 + rank).to(dtype)
                            for q in range(world)])
        assert torch.equal(got["pride"]["all_to_all"].view(torch.uint8), want.view(torch.uint8)), dtype
    with pytest.raises(TypeError, match=rf"pride allreduce \(rank {rank}\): unsupported dtype"):
        dist.all_reduce(torch.ones(2, dtype=torch.float8_e4m3fn))  # a reduction needs arithmetic pride lacks
    dist.destroy_process_group()


def test_float8_tensors_are_moved_byte_for_byte():
    run(_float8_moved, 2)


def _tree_order_sum(xs):
    """pride's small-buffer allreduce order in plain float32 (collectives/engine/standard/allreduce.cc):
    ranks p2..N-1 fold into rank r - p2 (leaf i is x[i] + x[i + p2]), then a balanced tree over the
    leaves, lower half first."""
    p2 = 1
    while p2 * 2 <= len(xs):
        p2 *= 2
    level = [xs[i] + xs[i + p2] if i + p2 < len(xs) else xs[i] for i in range(p2)]
    while len(level) > 1:
        level = [level[i] + level[i + 1] for i in range(0, len(level), 2)]
    return level[0]


def _float_sums_beside_gloo(rank, world, store_path):
    # Float sums depend on the order, which the integer inputs above hide: every rank must get the same
    # bits, in the documented order for small buffers, round after round, with Gloo's collectives
    # running on the same ranks in between (DeepSpeed beside pride, as in test_onebit_vs_deepspeed).
    init_group(rank, world, store_path, backend="gloo")
    pg = dist.new_group(backend="pride")
    for rnd in range(30):
        for numel in (1, 2304, 4608, 40000):  # 40000 floats (156 KiB) take the ring: no order pinned
            xs = [torch.randn(numel, generator=torch.Generator().manual_seed(7 * rnd + 1000 * r + numel)) * (r + 1)
                  for r in range(world)]
            got = xs[rank].clone()
            dist.all_reduce(got, group=pg)
            where = f"rank {rank}, round {rnd}, {numel} floats"
            if numel * 4 <= 64 << 10:
                want = _tree_order_sum(xs)
                assert torch.equal(got, want), f"{where}: {int((got != want).sum())} elements not in the tree order"
            else:
                wide = sum(x.double() for x in xs)
                torch.testing.assert_close(got.double(), wide, rtol=1e-5, atol=1e-5, msg=where)
            everyone = [torch.empty_like(got) for _ in range(world)]
            dist.all_gather(everyone, got)  # over Gloo
            assert all(torch.equal(e, got) for e in everyone), f"{where}: the ranks' bits differ"
            if rnd % 10 == 0:
                dist.all_reduce(got, group=pg, op=dist.ReduceOp.AVG)  # AVG divides the same bits everywhere
                dist.all_gather(everyone, got)
                assert all(torch.equal(e, got) for e in everyone), f"{where}: the ranks' averages differ"
    dist.destroy_process_group()


@pytest.mark.parametrize("world", [3, 4])
def test_float_sums_give_the_same_bits_on_every_rank_beside_gloo(world):
    run(_float_sums_beside_gloo, world, deadline_s=180)


def test_future_callbacks_may_wait_for_collectives_and_use_autograd_as_on_gloo(tmp_path):
    for backend in ("gloo", "pride"):
        run(future_callbacks, 2, backend, str(tmp_path / f"{backend}.pt"), "cpu", deadline_s=90)
    # PowerSGD's result over pride against the same training over Gloo (2 ranks: each sum has one order).
    for a, b in zip(torch.load(tmp_path / "pride.pt"), torch.load(tmp_path / "gloo.pt")):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


_FORKED_CHILD_SCRIPT = r"""
import os, sys, threading, time
import torch, torch.distributed as dist
import pride  # noqa: F401

def one_rank_group(path):
    dist.init_process_group("pride", store=dist.FileStore(path, 1), rank=0, world_size=1)

def doubled_by_a_callback():
    # Behind a long sign_allreduce, so that the allreduce's Future is asked for before it completes and
    # the callback runs where pride completes it, not inline here.
    ahead = pride.sign_allreduce(torch.randn(1 << 23), async_op=True)
    where = []
    t = torch.ones(3)
    fut = dist.all_reduce(t, async_op=True).get_future()
    doubled = fut.then(lambda f: where.append(threading.current_thread() is threading.main_thread()) or f.value()[0] * 2)
    ahead.wait()
    return doubled.wait(), where

one_rank_group(sys.argv[1] + ".parent")
assert doubled_by_a_callback()[1] == [False]  # a callback thread now waits, idle, in this process
dist.destroy_process_group()
pid = os.fork()
if pid == 0:  # the child has none of the parent's threads: its callbacks must still run
    one_rank_group(sys.argv[1] + ".child")
    doubled, where = doubled_by_a_callback()
    os._exit(0 if torch.equal(doubled, torch.full((3,), 2.0)) and where == [False] else 2)
end = time.monotonic() + 30
while time.monotonic() < end:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        sys.exit(os.waitstatus_to_exitcode(status))
    time.sleep(0.05)
os.kill(pid, 9)
sys.exit("the forked child's callback never ran")
"""


def test_future_callbacks_run_in_a_process_forked_after_some_ran(tmp_path):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _FORKED_CHILD_SCRIPT, str(tmp_path / "store")], capture_output=True,
                          text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-3000:]
