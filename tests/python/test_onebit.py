"""The 1-bit compressed allreduce and the optimizers on it (1-bit Adam, 0/1 Adam), against independent
oracles: a float64 reference of DeepSpeed's compressed_allreduce formulas written here with numpy,
torch.optim.AdamW for the full-precision warm-up, and the optimizers' own uninterrupted runs for
resume."""

import io
import os

import numpy as np
import pytest
import torch
import torch.distributed as dist

import distributed_harness as harness


# ---- The collective ----------------------------------------------------------------------------

def _reference_round(xs, worker_errors, server_errors, owned):
    """DeepSpeed's compressed_allreduce in float64 for all ranks at once: returns the result and the
    new errors. xs/worker_errors: one array per rank; owned[j] = (begin, size) of rank j's chunk."""
    n = len(xs)
    ys = [x.astype(np.float64) + e.astype(np.float64) for x, e in zip(xs, worker_errors)]
    scales = [np.sqrt(np.sum(y * y) / y.size) for y in ys]
    signs = [np.where(y >= 0, 1.0, -1.0) for y in ys]
    new_worker = [y - s * sg for y, s, sg in zip(ys, scales, signs)]
    result = np.empty(xs[0].size)
    new_server = []
    for j, (begin, size) in enumerate(owned):
        part = slice(begin, begin + size)
        z = sum(s * sg[part] for s, sg in zip(scales, signs)) / n + server_errors[j].astype(np.float64)
        scale = np.sqrt(np.sum(z * z) / size) if size else 0.0
        sg = np.where(z >= 0, 1.0, -1.0)
        result[part] = scale * sg
        new_server.append(z - scale * sg)
    return result, new_worker, new_server


def _compressed_allreduce_worker(rank, world_size, store_path, numel, rounds, device):
    import pride

    if device == "mixed":  # CPU and CUDA ranks in one group: the same messages, the same result
        device = "cuda" if rank % 2 else "cpu"
    harness.init_group(rank, world_size, store_path)
    sizes = [None] * world_size
    dist.all_gather_object(sizes, pride.compressed_allreduce_server_numel(numel))
    owned, begin = [], 0
    for size in sizes:  # rank order, contiguous
        owned.append((begin, size))
        begin += size
    assert begin == numel
    worker = torch.zeros(numel, device=device)
    server = torch.zeros(sizes[rank], device=device)
    pride.reset_stats()
    for rnd in range(rounds):
        xs = [torch.from_numpy(np.random.default_rng(100 * rnd + r).standard_normal(numel).astype(np.float32) * (r + 1))
              for r in range(world_size)]
        if rnd == 1:
            for x in xs:
                x[:3] = torch.tensor([0.0, -0.0, 0.0])
        states = [None] * world_size
        dist.all_gather_object(states, (worker.cpu().numpy().copy(), server.cpu().numpy().copy()))
        want, want_worker, want_server = _reference_round([x.numpy() for x in xs], [s[0] for s in states],
                                                          [s[1] for s in states], owned)
        t = xs[rank].to(device)
        pride.compressed_allreduce(t, worker, server)
        got = t.cpu().numpy().astype(np.float64)
        scale = np.abs(want).max() + 1
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * scale, err_msg=f"round {rnd}")
        np.testing.assert_allclose(worker.cpu().numpy(), want_worker[rank], rtol=1e-5, atol=1e-5 * scale)
        np.testing.assert_allclose(server.cpu().numpy(), want_server[rank], rtol=1e-5, atol=1e-5 * scale)
        everyone = [None] * world_size
        dist.all_gather_object(everyone, t.cpu().numpy().tobytes())
        assert all(b == everyone[0] for b in everyone), f"round {rnd}: ranks got different bits"
    traffic = pride.stats()["per_algorithm"]["onebit_direct"]
    assert traffic["calls"] == rounds
    # 2(N-1)/N bits per element plus a scale per message (8 bytes each, words rounded up).
    expected = rounds * 2 * (world_size - 1) * (numel / 8 / world_size + 8)
    assert abs(traffic["bytes_sent"] - expected) <= rounds * 2 * (world_size - 1) * 16, (traffic, expected)
    dist.destroy_process_group()


@pytest.mark.parametrize("world_size,numel", [(2, 1000), (3, 4099), (4, 130)])
def test_compressed_allreduce_matches_a_float64_reference(world_size, numel):
    harness.run(_compressed_allreduce_worker, world_size, numel, 3, "cpu")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("world_size,numel,device", [(2, 5000, "cuda"), (4, (1 << 20) + 13, "cuda"),
                                                     (3, 4099, "mixed")])
def test_compressed_allreduce_cuda_tensors_match_the_reference(world_size, numel, device):
    """CUDA tensors are compressed, averaged and expanded on the GPU (cuda_onebit_ops.h)."""
    harness.run(_compressed_allreduce_worker, world_size, numel, 3, device)


def test_compressed_allreduce_of_a_world_of_one_matches_the_reference():
    """No process group: the optimizers compress alone (both compressions, nothing sent), in C++."""
    from pride import _C

    numel = 3000
    worker, server = torch.zeros(numel), torch.zeros(numel)
    for rnd in range(3):
        x = torch.from_numpy(np.random.default_rng(rnd).standard_normal(numel).astype(np.float32))
        want, want_worker, want_server = _reference_round([x.numpy()], [worker.numpy().copy()],
                                                          [server.numpy().copy()], [(0, numel)])
        _C.compressed_allreduce_alone(x, worker, server)
        scale = np.abs(want).max() + 1
        np.testing.assert_allclose(x.numpy(), want, rtol=1e-5, atol=1e-6 * scale, err_msg=f"round {rnd}")
        np.testing.assert_allclose(worker.numpy(), want_worker[0], rtol=1e-5, atol=1e-5 * scale)
        np.testing.assert_allclose(server.numpy(), want_server[0], rtol=1e-5, atol=1e-5 * scale)


def _bad_arguments_worker(rank, world_size, store_path):
    import pride

    harness.init_group(rank, world_size, store_path)
    t = torch.ones(100)
    server_numel = pride.compressed_allreduce_server_numel(100)
    with pytest.raises(TypeError, match="float32"):
        pride.compressed_allreduce(t.double(), torch.zeros(100), torch.zeros(server_numel))
    with pytest.raises(ValueError, match="worker_error has 99"):
        pride.compressed_allreduce(t, torch.zeros(99), torch.zeros(server_numel))
    with pytest.raises(ValueError, match="compressed_allreduce_server_numel"):
        pride.compressed_allreduce(t, torch.zeros(100), torch.zeros(server_numel + 1))
    pride.compressed_allreduce(t, torch.zeros(100), torch.zeros(server_numel))  # the group still works
    dist.destroy_process_group()


def test_compressed_allreduce_refuses_bad_arguments_before_sending():
    harness.run(_bad_arguments_worker, 2)


# ---- The optimizers -----------------------------------------------------------------------------

def _model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def _batch(rank, step):
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(32, 8, generator=g)
    target = torch.linspace(-1, 1, 8).unsqueeze(1)
    return x, x @ target + 0.05 * torch.randn(32, 1, generator=g)


def _loss(model, rank, step):
    x, y = _batch(rank, step)
    dtype = next(model.parameters()).dtype
    return torch.nn.functional.mse_loss(model(x.to(dtype)), y.to(dtype))


def _make(kind, params, **kw):
    import pride

    if kind == "onebit":
        return pride.optim.OneBitAdam(params, lr=1e-2, **kw)
    return pride.optim.ZeroOneAdam(params, lr=1e-2, **kw)


def _train(model, opt, rank, steps, first=0):
    losses = []
    for step in range(first, first + steps):
        opt.zero_grad()
        loss = _loss(model, rank, step)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _params_bytes(model):
    return b"".join((p.detach() if p.element_size() == 4 else p.detach().view(torch.int16)).numpy().tobytes()
                    for p in model.parameters())


def _warmup_is_adamw_worker(rank, world_size, store_path, kind):
    harness.init_group(rank, world_size, store_path)
    # Beside the model: a frozen layer (no gradient ever), a branch every rank uses for the first 8 steps
    # only, and one only rank 0 uses. torch's AdamW takes no step for the first two once their gradients
    # are None (not even weight decay) and averages the third with the other ranks' zeros.
    model, frozen, until8, rank0 = _model(), torch.nn.Linear(4, 4), torch.nn.Linear(8, 1), torch.nn.Linear(8, 1)
    frozen.requires_grad_(False)
    params = [*model.parameters(), *frozen.parameters(), *until8.parameters(), *rank0.parameters()]
    kw = dict(freeze_step=50) if kind == "onebit" else dict(var_freeze_step=50, var_update_scaler=1000)
    opt = _make(kind, params, bias_correction=True, weight_decay=0.1, **kw)
    # The oracle: torch's AdamW on the mean of every rank's gradient, computed here from every rank's data.
    torch.manual_seed(1)
    ref_layers = [_model(), torch.nn.Linear(4, 4), torch.nn.Linear(8, 1), torch.nn.Linear(8, 1)]
    for ref, mine in zip(ref_layers, (model, frozen, until8, rank0)):
        ref.load_state_dict(mine.state_dict())
    ref_layers[1].requires_grad_(False)
    ref_params = [p for layer in ref_layers for p in layer.parameters()]
    ref_opt = torch.optim.AdamW(ref_params, lr=1e-2, weight_decay=0.1, foreach=False)

    def loss_of(layers, r, step):
        x, y = _batch(r, step)
        out = layers[0](x)
        if step < 8:
            out = out + layers[2](x)
        if r == 0:
            out = out + layers[3](x)
        return torch.nn.functional.mse_loss(out, y)

    for step in range(20):
        opt.zero_grad()
        loss_of((model, frozen, until8, rank0), rank, step).backward()
        opt.step()
        grads = []
        for r in range(world_size):
            ref_opt.zero_grad()
            loss_of(ref_layers, r, step).backward()
            grads.append([None if p.grad is None else p.grad.clone() for p in ref_params])
        for p, *gs in zip(ref_params, *grads):
            present = [g for g in gs if g is not None]
            p.grad = sum(present[1:], present[0].clone()) / world_size if present else None
        ref_opt.step()
        for i, (a, b) in enumerate(zip(params, ref_params)):
            torch.testing.assert_close(a, b, rtol=0, atol=0, msg=f"step {step}, parameter {i}")
    dist.destroy_process_group()


@pytest.mark.parametrize("kind", ["onebit", "zeroone"])
def test_full_precision_steps_are_torch_adamw_on_the_mean_gradient(kind):
    # 1-bit Adam's warm-up, and 0/1 Adam's variance steps (every step while the interval stays 1).
    harness.run(_warmup_is_adamw_worker, 2, kind)


def _replicas_worker(rank, world_size, store_path, kind):
    import pride

    harness.init_group(rank, world_size, store_path)
    model = _model()
    if kind == "onebit":
        opt = _make(kind, model.parameters(), freeze_step=10)
    else:
        opt = _make(kind, model.parameters(), var_freeze_step=30, var_update_scaler=4, local_step_scaler=10,
                    local_step_clipper=4)
    pride.reset_stats()
    schedule = []
    losses = []
    synced_params = []
    for step in range(80):
        if kind == "zeroone":
            schedule.append(opt.next_step_communicates())
        losses += _train(model, opt, rank, 1, first=step)
        synced = kind == "onebit" or schedule[-1] != "none"
        if synced:
            everyone = [None] * world_size
            dist.all_gather_object(everyone, _params_bytes(model))
            assert all(b == everyone[0] for b in everyone), f"step {step}: replicas differ"
            synced_params.append(everyone[0])
    # Every synchronised step moves the parameters (0/1 Adam's local steps too: a synchronisation that
    # restored the last one's parameters would keep the replicas identical and train nothing).
    assert all(a != b for a, b in zip(synced_params, synced_params[1:])), "a step left the parameters unchanged"
    first, last = np.mean(losses[:10]), np.mean(losses[-10:])
    assert last < 0.7 * first, (first, last)
    calls = pride.stats()["per_algorithm"].get("onebit_direct", {}).get("calls", 0)
    if kind == "onebit":
        assert calls == 70  # every step after the 10 warm-up steps
    else:
        assert schedule.count("1bit") == calls
        # Variance steps at intervals 1, 2, 4, 8 (4 each), then local steps whose interval doubles
        # every 10 steps up to 4.
        full = [i + 1 for i, s in enumerate(schedule) if s == "full"]
        assert full == [1, 2, 3, 4, 6, 8, 10, 12, 16, 20, 24, 28], full
        syncs = [i + 1 for i, s in enumerate(schedule[30:], start=30) if s == "1bit"]
        assert syncs[:10] == list(range(31, 41)) and syncs[10:15] == [42, 44, 46, 48, 50], syncs
        assert all(b - a == 4 for a, b in zip(syncs[-5:], syncs[-4:])), syncs
    dist.destroy_process_group()


@pytest.mark.parametrize("kind", ["onebit", "zeroone"])
def test_replicas_stay_identical_and_the_loss_falls(kind):
    harness.run(_replicas_worker, 3, kind)


def _resume_worker(rank, world_size, store_path, kind, dtype):
    harness.init_group(rank, world_size, store_path)
    kw = dict(freeze_step=5) if kind == "onebit" else dict(var_freeze_step=12, var_update_scaler=2,
                                                           local_step_scaler=5, local_step_clipper=4)
    straight = _model().to(dtype)
    opt = _make(kind, straight.parameters(), **kw)
    _train(straight, opt, rank, 40)

    first = _model().to(dtype)
    opt = _make(kind, first.parameters(), **kw)
    _train(first, opt, rank, 17)  # mid-way through an interval
    model_bytes, opt_bytes = io.BytesIO(), io.BytesIO()
    torch.save(first.state_dict(), model_bytes)
    torch.save(opt.state_dict(), opt_bytes)
    del first, opt
    model_bytes.seek(0)
    opt_bytes.seek(0)
    resumed = _model(seed=99).to(dtype)
    resumed.load_state_dict(torch.load(model_bytes))
    opt = _make(kind, resumed.parameters(), **kw)
    opt.load_state_dict(torch.load(opt_bytes))
    # The state is float32 whatever the parameters (torch's loading would cast it to theirs).
    assert all(t.dtype == torch.float32 for st in opt.state.values() for t in st.values() if torch.is_tensor(t)
               and t.is_floating_point()), {k: t.dtype for st in opt.state.values() for k, t in st.items()
                                            if torch.is_tensor(t)}
    _train(resumed, opt, rank, 23, first=17)
    assert _params_bytes(resumed) == _params_bytes(straight), "resume differs from the uninterrupted run"
    dist.destroy_process_group()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kind", ["onebit", "zeroone"])
def test_saving_and_loading_each_ranks_state_resumes_exactly(kind, dtype):
    harness.run(_resume_worker, 2, kind, dtype)


def _dcp_options(flatten):
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(flatten_optimizer_state_dict=flatten)


def _onebit_kwargs(kind):
    return dict(freeze_step=5) if kind == "onebit" else dict(var_freeze_step=12, var_update_scaler=2,
                                                             local_step_scaler=5, local_step_clipper=4)


def _dcp_state(model, opt, flatten):
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    return {"model": get_model_state_dict(model), "optim": get_optimizer_state_dict(model, opt,
                                                                                     options=_dcp_options(flatten))}


def _dcp_resume_worker(rank, world_size, store_path, kind, flatten, checkpoint):
    # Through checkpoint files, as a training job writes them: dcp.save keeps one copy of every key for all
    # ranks, and torch's DCP state-dict API keeps only "state" and "param_groups" and loads only the entries
    # that a step on a fresh optimizer creates (it takes one with lr 0). Every rank must get its own errors
    # back. Saved at step 17: a 1-bit Adam step, and a 0/1 Adam synchronisation (interval 1 until step
    # 17), after which the replicas' parameters and momenta are the same (mid-way through a 0/1 Adam
    # interval each rank's are its own, and a DCP checkpoint of the model keeps one rank's).
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

    harness.init_group(rank, world_size, store_path)
    kw = _onebit_kwargs(kind)
    straight = _model()
    opt = _make(kind, straight.parameters(), **kw)
    _train(straight, opt, rank, 17)
    dcp.save(_dcp_state(straight, opt, flatten), checkpoint_id=checkpoint)
    errors = {k: v.clone() for k, v in opt.state[next(straight.parameters())].items() if k.endswith("_error")}
    _train(straight, opt, rank, 23, first=17)

    resumed = _model(seed=99)
    opt = _make(kind, resumed.parameters(), **kw)
    state = _dcp_state(resumed, opt, flatten)
    dcp.load(state, checkpoint_id=checkpoint)
    set_model_state_dict(resumed, state["model"])
    set_optimizer_state_dict(resumed, opt, state["optim"], options=_dcp_options(flatten))
    loaded = opt.state[next(resumed.parameters())]
    for key, value in errors.items():
        assert torch.equal(loaded[key], value), f"rank {rank}: {key} is not this rank's"
    _train(resumed, opt, rank, 23, first=17)
    assert _params_bytes(resumed) == _params_bytes(straight), "resume through DCP differs from the uninterrupted run"
    dist.destroy_process_group()


@pytest.mark.parametrize("flatten", [False, True], ids=["nested", "flattened"])
@pytest.mark.parametrize("kind", ["onebit", "zeroone"])
def test_resuming_through_torch_dcp_files_gives_every_rank_its_own_errors(kind, flatten, tmp_path):
    harness.run(_dcp_resume_worker, 3, kind, flatten, str(tmp_path / "checkpoint"))


class _Warnings:
    def __init__(self):
        import logging

        self.messages = []
        handler = logging.Handler()
        handler.emit = lambda record: self.messages.append(record.getMessage())
        logging.getLogger("pride").addHandler(handler)


def _save_at_3(rank, world_size, store_path, kind, where):
    import torch.distributed.checkpoint as dcp

    harness.init_group(rank, world_size, store_path)
    model = _model()
    opt = _make(kind, model.parameters(), **_onebit_kwargs(kind))
    _train(model, opt, rank, 17)
    dcp.save(_dcp_state(model, opt, False), checkpoint_id=os.path.join(where, "dcp"))
    if rank == 0:  # what a job that saves rank 0's state dict and loads it everywhere writes
        torch.save({"model": model.state_dict(), "optim": opt.state_dict()}, os.path.join(where, "rank0.pt"))
        first = next(model.parameters())
        torch.save({k: opt.state[first][k] for k in ("exp_avg", "exp_avg_sq")}, os.path.join(where, "moments.pt"))
    dist.destroy_process_group()


def _load_at_2(rank, world_size, store_path, kind, where, how):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import DefaultLoadPlanner
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

    import pride

    harness.init_group(rank, world_size, store_path)
    warnings = _Warnings()
    model = _model(seed=99)
    opt = _make(kind, model.parameters(), **_onebit_kwargs(kind))
    if how == "rank0":
        saved = torch.load(os.path.join(where, "rank0.pt"))
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optim"])
        assert any("rank 0 of 3" in m and "reset" in m for m in warnings.messages), warnings.messages
    else:
        state = _dcp_state(model, opt, False)
        if how == "dcp":  # the errors of this rank at this size are not in the checkpoint
            with pytest.raises(dcp.api.CheckpointException) as raised:
                dcp.load(state, checkpoint_id=os.path.join(where, "dcp"))
            said = {r: str(e) for r, e in raised.value.failures.items()}
            assert all(f"worker_error.rank{r}_of2" in said[r] for r in range(world_size)), said
            dist.destroy_process_group()
            return
        dcp.load(state, checkpoint_id=os.path.join(where, "dcp"), planner=DefaultLoadPlanner(allow_partial_load=True))
        set_model_state_dict(model, state["model"])
        set_optimizer_state_dict(model, opt, state["optim"])
    first = next(model.parameters())
    for key, value in torch.load(os.path.join(where, "moments.pt")).items():
        assert torch.equal(opt.state[first][key], value), f"rank {rank}: {key} is not the saved one"
    # The errors restart at zero: dropped (made at the next step) or zeros of this rank's sizes.
    st = opt.state[first]
    numel = sum(p.numel() for p in model.parameters())
    sizes = {"worker_error": numel, "server_error": pride.compressed_allreduce_server_numel(numel)}
    for key, size in sizes.items():
        assert key not in st or (st[key].numel() == size and not st[key].any()), f"rank {rank}: {key} kept"
    # Five more steps: 1-bit Adam's communicate; 0/1 Adam's fifth (step 22) is a synchronisation, after
    # which the replicas are the same (its local steps leave each rank's parameters its own).
    losses = _train(model, opt, rank, 5, first=17)
    assert all(np.isfinite(losses))
    assert kind == "onebit" or opt.param_groups[0]["local_step_interval"] == 4 and opt.param_groups[0]["step"] == 22
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    everyone = [torch.empty_like(flat) for _ in range(world_size)]
    dist.all_gather(everyone, flat)
    assert all(torch.equal(other, flat) for other in everyone), f"rank {rank}: replicas differ after the resume"
    dist.destroy_process_group()


@pytest.mark.parametrize("how", ["rank0", "dcp", "dcp_partial"])
@pytest.mark.parametrize("kind", ["onebit", "zeroone"])
def test_a_state_saved_at_another_world_size_resets_the_errors(kind, how, tmp_path):
    # Saved by 3 ranks at a 1-bit step (a 0/1 Adam synchronisation), loaded by 2: the errors belong to other
    # ranks' compression and restart at zero at the new sizes (a warning says so where the state dict
    # says whose they were); through DCP files, dcp.load names the entry it lacks unless told to load
    # partially. The moments and schedules load, and the replicas stay identical.
    harness.run(_save_at_3, 3, kind, str(tmp_path))
    harness.run(_load_at_2, 2, kind, str(tmp_path), how)


def test_another_optimizers_state_dict_is_refused_by_name():
    import pride

    model = _model()
    adamw = torch.optim.AdamW(model.parameters())
    model(torch.randn(4, 8)).sum().backward()
    adamw.step()
    for make, lacks in ((lambda ps: pride.optim.OneBitAdam(ps), "freeze_step"),
                        (lambda ps: pride.optim.ZeroOneAdam(ps), "frozen")):
        with pytest.raises(ValueError, match=f"lacks .*{lacks}.*not saved by a"):
            make(model.parameters()).load_state_dict(adamw.state_dict())
    with pytest.raises(ValueError, match="lacks .*frozen"):
        pride.optim.ZeroOneAdam(model.parameters()).load_state_dict(pride.optim.OneBitAdam(model.parameters())
                                                                    .state_dict())


def _fused_vs_torch_worker(rank, world_size, store_path, kind, dtype, bias_correction):
    """Two optimizers on the same parameters and gradients, one through pride's fused CPU kernels and one
    through its torch operations (the oracle: torch's own kernels, and numpy's square root, which unlike
    torch's CPU one is correctly rounded as the fused kernels' is): the same bits after every step."""
    import pride
    from pride.optim import _onebit

    _onebit._sqrt = lambda v: torch.from_numpy(np.sqrt(v.detach().numpy()))
    harness.init_group(rank, world_size, store_path)
    shapes = [(37, 5), (64,), (3, 3, 3), (1,)]
    gen = torch.Generator().manual_seed(5)
    start = [torch.randn(s, generator=gen).to(dtype) for s in shapes]
    kw = dict(eps=1e-3, weight_decay=0.01, bias_correction=bias_correction)  # lr 1e-2 (_make)
    if kind == "zeroone":
        kw.update(var_freeze_step=4, var_update_scaler=1, local_step_scaler=2, local_step_clipper=4)
    else:
        kw.update(freeze_step=4)
    runs = []
    for fused in (True, False):
        params = [torch.nn.Parameter(t.clone()) for t in start]
        opt = _make(kind, params, **kw)
        opt._use_fused_kernels = fused
        runs.append((params, opt))
    took_fused = []
    fused_opt = runs[0][1]
    name = "_fused_local_step" if kind == "zeroone" else "_fused_compressed_step"
    fused_step = getattr(fused_opt, name)
    setattr(fused_opt, name, lambda *a: took_fused.append(fused_step(*a)) or took_fused[-1])
    kinds = []
    for step in range(30):
        g = torch.Generator().manual_seed(100 * step + rank)
        grads = [torch.randn(s, generator=g).to(dtype) for s in shapes]
        grads[0][:, 0] = 0  # never a gradient: variance 0, masked out of every synchronisation
        if step % 5 == 3:
            grads[2] = None  # no gradient this step
        if step == 17:
            for _, opt in runs:
                opt.param_groups[0]["lr"] = 3e-3  # 0/1 Adam's lr-weighted mean momentum sees two rates
        if kind == "zeroone":
            kinds.append(fused_opt.next_step_communicates())
        else:
            kinds.append("1bit" if fused_opt.compressing() else "full")
        for params, opt in runs:
            for p, grad in zip(params, grads):
                p.grad = None if grad is None else grad.clone()
            opt.step()
        where = f"rank {rank} {dtype} step {step + 1} ({kinds[-1]})"
        (fp, fo), (tp, to) = runs
        for i, (a, b) in enumerate(zip(fp, tp)):
            assert _same_bits(a, b), f"{where}: parameter {i}"
            for key in ("exp_avg", "momentum_accumulator", "sync_anchor"):
                if key in to.state[b]:
                    assert _same_bits(fo.state[a][key], to.state[b][key]), f"{where}: {key} of parameter {i}"
    assert ({"1bit", "none"} if kind == "zeroone" else {"1bit"}) <= set(kinds[4:]), kinds
    assert took_fused and all(took_fused), "the fused kernels did not take the local steps"
    dist.destroy_process_group()


def _missing_gradients_worker(rank, world_size, store_path, kind, fused):
    """Through the compressed phases: a parameter with no gradient anywhere never moves (weight decay
    included), one whose gradients stop stays where it was, one without a gradient on some ranks or at
    a synchronisation keeps the replicas identical."""
    import pride

    harness.init_group(rank, world_size, store_path)
    shapes = [(40, 3), (17,), (5, 5), (33,)]
    start = [torch.randn(s, generator=torch.Generator().manual_seed(i)) for i, s in enumerate(shapes)]
    params = [torch.nn.Parameter(t.clone()) for t in start]
    if kind == "onebit":
        opt = _make(kind, params, weight_decay=0.1, freeze_step=3)
    else:
        opt = _make(kind, params, weight_decay=0.1, var_freeze_step=3, var_update_scaler=1, local_step_scaler=2,
                    local_step_clipper=4)
    opt._use_fused_kernels = fused
    took_fused = []
    name = "_fused_local_step" if kind == "zeroone" else "_fused_compressed_step"
    fused_step = getattr(opt, name)
    setattr(opt, name, lambda *a: took_fused.append(fused_step(*a)) or took_fused[-1])
    stopped_at = None
    absent_at_a_sync = 0
    for step in range(40):
        t = step + 1
        communicates = opt.next_step_communicates() if kind == "zeroone" else "1bit"
        g = torch.Generator().manual_seed(100 * step + rank)
        grads = [torch.randn(s, generator=g) for s in shapes]
        grads[1] = None  # frozen
        if t > 2:
            grads[2] = None  # its gradients stop in the warm-up
        if (t % 3 == 1 and rank == 0) or t % 4 == 0:
            grads[3] = None  # missing on one rank, or on every rank (every 4th step: some synchronisations)
        absent_at_a_sync += t % 4 == 0 and communicates == "1bit" and t > 3
        for p, grad in zip(params, grads):
            p.grad = grad
        before = pride.stats()["collectives"]
        opt.step()
        if communicates == "none":  # 0/1 Adam's local steps wait for no other rank
            assert pride.stats()["collectives"] == before, f"step {t}: a local step communicated"
        if t == 2:
            stopped_at = params[2].detach().clone()
        where = f"rank {rank} step {t} ({communicates})"
        assert torch.equal(params[1], start[1]), f"{where}: the frozen parameter moved"
        if t > 2:
            assert torch.equal(params[2], stopped_at), f"{where}: a parameter without gradients moved"
        if communicates != "none":
            everyone = [None] * world_size
            dist.all_gather_object(everyone, b"".join(p.detach().numpy().tobytes() for p in params))
            assert all(b == everyone[0] for b in everyone), f"{where}: replicas differ"
    assert not torch.equal(params[0], start[0]) and not torch.equal(params[3], start[3])
    assert absent_at_a_sync >= 2, absent_at_a_sync
    assert not opt.state[params[1]]["exp_avg"].any(), "the frozen parameter's momentum moved"
    assert took_fused and all(took_fused) == fused and any(took_fused) == fused
    dist.destroy_process_group()


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "torch-ops"])
@pytest.mark.parametrize("kind", ["onebit", "zeroone"])
def test_parameters_without_gradients(kind, fused):
    harness.run(_missing_gradients_worker, 2, kind, fused)


def _settings_differ_worker(rank, world_size, store_path, what):
    harness.init_group(rank, world_size, store_path)
    shapes = [(4,), (3, 2)] if what != "shape" or rank == 0 else [(4,), (2, 3)]
    params = [torch.nn.Parameter(torch.ones(s)) for s in shapes]
    lr = 0.02 if what == "lr" and rank == 1 else 0.01
    opt = _make("onebit", params, freeze_step=2)
    opt.param_groups[0]["lr"] = lr
    for p in params:
        p.grad = torch.ones_like(p)
    if what == "step count" and rank == 0:
        opt.param_groups[0]["step"] = 1  # as after a step the other rank skipped
    with pytest.raises(ValueError) as raised:
        opt.step()
    message = str(raised.value)
    assert f"rank {rank} of 2" in message, message
    expected = {"lr": "lr: rank 0 has 0.01, rank 1 has 0.02", "shape": "parameter 1: rank 0 has ((3, 2), 'float32'), "
                "rank 1 has ((2, 3), 'float32')", "step count": "step: rank 0 has 1, rank 1 has 0"}[what]
    assert expected in message, message
    assert torch.equal(params[0], torch.ones(4)), "a step was taken"
    dist.destroy_process_group()


@pytest.mark.parametrize("what", ["lr", "shape", "step count"])
def test_ranks_whose_settings_differ_get_an_error_naming_the_difference(what):
    harness.run(_settings_differ_worker, 2, what)


def test_param_groups_are_checked_when_added_and_may_be_empty():
    import pride

    for make in (pride.optim.OneBitAdam, pride.optim.ZeroOneAdam):
        a = torch.nn.Parameter(torch.ones(3))
        opt = make([a], lr=0.1)
        with pytest.raises(TypeError, match="float32, bfloat16 or float16"):
            opt.add_param_group({"params": [torch.nn.Parameter(torch.ones(3, dtype=torch.float64))]})
        assert len(opt.param_groups) == 1, "the refused group was added"
        opt.add_param_group({"params": []})
        a.grad = torch.ones(3)
        opt.step()
        assert (a < 1).all()


def _same_bits(a, b):
    a, b = a.detach(), b.detach()
    view = torch.int32 if a.element_size() == 4 else torch.int16
    return a.dtype == b.dtype and torch.equal(a.view(view), b.view(view))


@pytest.mark.parametrize("dtype,bias_correction", [(torch.float32, False), (torch.float32, True),
                                                   (torch.bfloat16, False), (torch.float16, True)])
@pytest.mark.parametrize("kind", ["onebit", "zeroone"])
def test_fused_steps_are_the_optimizers_torch_operations_bit_for_bit(kind, dtype, bias_correction):
    harness.run(_fused_vs_torch_worker, 2, kind, dtype, bias_correction)


def _fused_on_cuda_worker(rank, world_size, store_path, kind):
    """The fused steps of CUDA parameters run the CPU kernels' arithmetic on the GPU: the run on the GPU
    follows the run on the CPU (the compressed allreduce's scales may differ in their last bit: sums of
    squares in another order), and the replicas are identical."""
    harness.init_group(rank, world_size, store_path)
    torch.cuda.set_device(0)
    shapes = [(37, 5), (64,), (3, 3, 3)]
    gen = torch.Generator().manual_seed(5)
    start = [torch.randn(s, generator=gen) for s in shapes]
    kw = dict(eps=1e-3, weight_decay=0.01)
    kw.update(dict(var_freeze_step=4, var_update_scaler=1, local_step_scaler=2, local_step_clipper=4)
              if kind == "zeroone" else dict(freeze_step=4))
    runs = {}
    for device in ("cuda", "cpu"):
        params = [torch.nn.Parameter(t.clone().to(device)) for t in start]
        runs[device] = (params, _make(kind, params, **kw))
    gpu_opt = runs["cuda"][1]
    name = "_fused_local_step" if kind == "zeroone" else "_fused_compressed_step"
    took_fused = []
    fused_step = getattr(gpu_opt, name)
    setattr(gpu_opt, name, lambda *a: took_fused.append(fused_step(*a)) or took_fused[-1])
    for step in range(14):
        g = torch.Generator().manual_seed(100 * step + rank)
        grads = [torch.randn(s, generator=g) for s in shapes]
        grads[0][:, 0] = 0  # never a gradient: variance 0, masked out of every compressed step
        if step % 5 == 3:
            grads[2] = None  # no gradient this step
        if step == 9:
            for _, opt in runs.values():
                opt.param_groups[0]["lr"] = 3e-3
        # 0/1 Adam's local steps leave each rank its own parameters, by design: replicas agree after a sync.
        synced = kind == "onebit" or gpu_opt.next_step_communicates() != "none"
        for device, (params, opt) in runs.items():
            for p, grad in zip(params, grads):
                p.grad = None if grad is None else grad.to(device)
            opt.step()
        gpu = torch.cat([p.detach().cpu().reshape(-1) for p in runs["cuda"][0]])
        cpu = torch.cat([p.detach().reshape(-1) for p in runs["cpu"][0]])
        # An element whose compressed value sits within the scale's last bit of 0 may take the other sign
        # on the GPU: a couple of such elements are allowed, nothing more.
        close = torch.isclose(gpu, cpu, rtol=1e-4, atol=1e-6)
        assert int((~close).sum()) <= 2, f"rank {rank} step {step + 1}: {int((~close).sum())} elements differ"
        if synced:
            everyone = [None] * world_size
            dist.all_gather_object(everyone, gpu.numpy().tobytes())
            assert all(b == everyone[0] for b in everyone), f"step {step + 1}: the GPU replicas differ"
    assert took_fused and all(took_fused), "the fused kernels did not take the CUDA steps"
    dist.destroy_process_group()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("kind", ["onebit", "zeroone"])
def test_fused_steps_on_cuda_follow_the_cpu_and_replicas_agree(kind):
    harness.run(_fused_on_cuda_worker, 2, kind, deadline_s=300)


def test_optimizers_refuse_bad_settings():
    import pride

    p = [torch.nn.Parameter(torch.zeros(3))]
    with pytest.raises(ValueError, match="freeze_step"):
        pride.optim.OneBitAdam(p, freeze_step=0)
    with pytest.raises(ValueError, match="local_step_clipper"):
        pride.optim.ZeroOneAdam(p, local_step_clipper=0)
    with pytest.raises(TypeError, match="float32"):
        pride.optim.OneBitAdam([torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))])


def test_one_process_runs_both_phases():
    import pride

    for make in (lambda ps: pride.optim.OneBitAdam(ps, lr=1e-2, freeze_step=5),
                 lambda ps: pride.optim.ZeroOneAdam(ps, lr=1e-2, var_freeze_step=5, local_step_scaler=3)):
        model = _model()
        opt = make(model.parameters())
        losses = _train(model, opt, 0, 60)
        assert np.mean(losses[-10:]) < 0.7 * np.mean(losses[:10])


# ---- The DDP communication hook ------------------------------------------------------------------

def _ddp_hook_worker(rank, world_size, store_path):
    import pride
    from torch.nn.parallel import DistributedDataParallel

    harness.init_group(rank, world_size, store_path)
    torch.manual_seed(0)
    layer = torch.nn.Linear(300, 7, bias=False)  # one parameter: the bucket is its gradient
    model = DistributedDataParallel(layer)
    state = pride.ddp_hooks.OneBitHookState(start_iter=2)
    model.register_comm_hook(state, pride.ddp_hooks.onebit_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    numel = layer.weight.numel()
    sizes = [None] * world_size
    dist.all_gather_object(sizes, pride.compressed_allreduce_server_numel(numel))
    owned = [(sum(sizes[:j]), sizes[j]) for j in range(world_size)]
    worker, server = [np.zeros(numel)] * world_size, [np.zeros(s) for s in sizes]
    for it in range(6):
        x = torch.randn(16, 300, generator=torch.Generator().manual_seed(10 * it + rank))
        # Every rank's local gradient, for the oracle: the same model on every rank's batch.
        local = []
        for r in range(world_size):
            xr = torch.randn(16, 300, generator=torch.Generator().manual_seed(10 * it + r))
            w = layer.weight.detach().clone().requires_grad_()
            (xr @ w.t()).square().mean().backward()
            local.append(w.grad.reshape(-1).numpy())
        opt.zero_grad()
        model(x).square().mean().backward()
        got = layer.weight.grad.reshape(-1).numpy().astype(np.float64)
        if it < 2:  # warm-up: DDP's own float32 mean
            np.testing.assert_allclose(got, np.mean(local, axis=0), rtol=1e-5, atol=1e-7)
        else:
            want, worker, server = _reference_round(local, worker, server, owned)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * np.abs(want).max(), err_msg=f"iter {it}")
            # The oracle keeps its own float64 errors; the hook's are float32. Close is what is defined.
            np.testing.assert_allclose(state.errors[0][0].numpy(), worker[rank], rtol=1e-4, atol=1e-5)
        opt.step()
        everyone = [None] * world_size
        dist.all_gather_object(everyone, layer.weight.detach().numpy().tobytes())
        assert all(b == everyone[0] for b in everyone), f"iter {it}: replicas differ"
    assert pride.stats()["per_algorithm"]["onebit_direct"]["calls"] == 4
    saved = state.state_dict()
    restored = pride.ddp_hooks.OneBitHookState()
    restored.load_state_dict(saved)
    assert restored.iter == 6 and torch.equal(restored.errors[0][1], state.errors[0][1])
    dist.destroy_process_group()


def test_ddp_onebit_hook_gives_the_compressed_mean():
    harness.run(_ddp_hook_worker, 3)


def test_elements_without_variance_take_no_compressed_step():
    # Inputs whose first four features are always 0: those weights never get a gradient, their variance
    # stays 0, and the compressed momentum (±scale everywhere) would move them by scale/eps.
    import pride

    for make in (lambda ps: pride.optim.OneBitAdam(ps, lr=1e-2, freeze_step=3),
                 lambda ps: pride.optim.ZeroOneAdam(ps, lr=1e-2, var_freeze_step=3, local_step_scaler=2)):
        torch.manual_seed(0)
        layer = torch.nn.Linear(8, 1)
        start = layer.weight.detach().clone()
        opt = make(layer.parameters())
        for step in range(20):
            x, y = _batch(0, step)
            x[:, :4] = 0
            opt.zero_grad()
            torch.nn.functional.mse_loss(layer(x), y).backward()
            opt.step()
        assert torch.isfinite(layer.weight).all()
        assert torch.equal(layer.weight[:, :4], start[:, :4])
        assert not torch.equal(layer.weight[:, 4:], start[:, 4:])


def test_zero_variance_mask_follows_the_variance():
    # The mask is cached while the variance is unchanged; every in-place change (0/1 Adam's variance
    # steps before the freeze) must be seen, and a variance without zeros needs no mask at all.
    import pride

    opt = pride.optim.ZeroOneAdam([torch.nn.Parameter(torch.zeros(8))], var_freeze_step=3)
    v = torch.zeros(8)
    assert torch.equal(opt._nonzero_variance(v), torch.zeros(8, dtype=torch.bool))
    v[2] = 0.5
    assert torch.equal(opt._nonzero_variance(v), torch.arange(8) == 2)
    v.add_(1.0)
    assert opt._nonzero_variance(v) is None
    v.mul_(0.0)
    assert not opt._nonzero_variance(v).any()
    other = torch.ones(8)
    assert opt._nonzero_variance(other) is None and not opt._nonzero_variance(v).any()


def _load_hooks(rank, world, store_path):
    import copy

    import pride

    harness.init_group(rank, world, store_path)
    for kind, kw in ((pride.optim.OneBitAdam, dict(freeze_step=2)), (pride.optim.ZeroOneAdam, {})):
        torch.manual_seed(0)
        p = torch.nn.Parameter(torch.randn(64))
        opt = kind([p], lr=1e-2, **kw)
        for _ in range(4):
            p.grad = torch.randn(64)
            opt.step()
        saved = opt.state_dict()
        assert torch.is_tensor(opt.state[p]["worker_error"]) and opt.state[p]["exp_avg"].abs().max() > 0

        def zero_momentum(optimizer, state_dict):  # torch's documented way to adapt a state dict
            state_dict = copy.deepcopy(state_dict)
            for entry in state_dict["state"].values():
                entry["exp_avg"].zero_()
            return state_dict

        def drop_errors(optimizer, state_dict):
            state_dict = copy.deepcopy(state_dict)
            for entry in state_dict["state"].values():
                entry.pop("worker_error", None)
                entry.pop("server_error", None)
            return state_dict

        seen = []
        fresh = kind([p], lr=1e-2, **kw)
        fresh.register_load_state_dict_pre_hook(zero_momentum)
        fresh.register_load_state_dict_post_hook(lambda o: seen.append(o.state[p]["worker_error"]))
        fresh.load_state_dict(saved)
        # the pre-hook's dict is the one loaded (pride had put the saved float32 moments back over it) ...
        assert torch.count_nonzero(fresh.state[p]["exp_avg"]) == 0, kind.__name__
        # ... and the post-hook sees the state as it ends: this rank's errors, not the dict keyed by rank
        assert len(seen) == 1 and torch.equal(seen[0], opt.state[p]["worker_error"]), kind.__name__
        trimmed = kind([p], lr=1e-2, **kw)
        trimmed.register_load_state_dict_pre_hook(drop_errors)
        trimmed.load_state_dict(saved)  # was a KeyError: 'worker_error'
        assert "worker_error" not in trimmed.state[p] and "exp_avg" in trimmed.state[p], kind.__name__
    dist.destroy_process_group()


def test_load_state_dict_hooks_act_as_on_torchs_optimizers():
    harness.run(_load_hooks, 1)
