"""pride.optim.DistributedLion: exact against plain Lion on one rank, identical replicas and an
all-ranks oracle on several, checkpoints that resume exactly."""

import pytest
import torch
import torch.distributed as dist

from distributed_harness import init_group, run


def plain_lion_step(params, grads, momenta, lr, betas, wd):
    """Lion written the obvious way, one rounding per tensor op."""
    b1, b2 = betas
    for p, g, m in zip(params, grads, momenta):
        c = m.mul(b1) + g.mul(1 - b1)
        p.mul_(1 - lr * wd)
        p.add_(torch.sign(c), alpha=-lr)
        m.copy_(m.mul(b2) + g.mul(1 - b2))


def make_model(dtype, seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(33, 17), torch.nn.Linear(17, 5), torch.nn.Linear(5, 5))
    return model.to(dtype)


def grads_for(model, rank, step):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return [torch.randn(p.shape, generator=g).to(p.dtype) for p in model.parameters()]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("mode", ["vote", "mean"])
def test_one_process_equals_plain_lion(dtype, mode):
    from pride.optim import DistributedLion

    model, ref = make_model(dtype), make_model(dtype)
    params = list(model.parameters())
    # two param groups with their own hyper-parameters; the last parameter never gets a gradient
    opt = DistributedLion([{"params": params[:2], "lr": 0.01}, {"params": params[2:], "weight_decay": 0.1}],
                          lr=0.003, betas=(0.9, 0.99), mode=mode, bucket_mb=1e-4)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    ref_params = list(ref.parameters())
    ref_m = [torch.zeros_like(p) for p in ref_params]
    for step in range(5):
        gs = grads_for(model, 0, step)
        for p, g in zip(params, gs):
            p.grad = g.clone()
        params[-1].grad = None
        opt.step()
        lrs = [opt.param_groups[0]["lr"], opt.param_groups[1]["lr"]]  # what this step used
        with torch.no_grad():
            plain_lion_step(ref_params[:2], gs[:2], ref_m[:2], lrs[0], (0.9, 0.99), 0.0)
            plain_lion_step(ref_params[2:-1], gs[2:-1], ref_m[2:-1], lrs[1], (0.9, 0.99), 0.1)
        sched.step()
        for i, (a, b) in enumerate(zip(params, ref_params)):
            assert torch.equal(a.detach(), b.detach()), f"step {step} param {i}"
    assert "exp_avg" not in opt.state[params[-1]]  # skipped, not stepped


@pytest.mark.parametrize("mode", ["vote", "mean", "global"])
def test_a_non_contiguous_parameter_steps_like_plain_lion(mode):
    # A transposed view registered as a parameter: torch's optimizers step it in place; so does
    # DistributedLion, through a contiguous copy written back (the kernels step flat memory). Oracles:
    # lion-pytorch on a twin of the same strides, and Lion written out here.
    from lion_pytorch import Lion
    from pride.optim import DistributedLion

    torch.manual_seed(5)
    base = torch.randn(7, 9)
    p = torch.nn.Parameter(base.t())  # 9 x 7, strides (1, 9)
    q = torch.nn.Parameter(torch.randn(6))
    assert not p.is_contiguous()
    ref_p, ref_q = p.detach().clone(), q.detach().clone()
    ref_m = [torch.zeros_like(ref_p), torch.zeros_like(ref_q)]
    twin = torch.nn.Parameter(base.clone().t())
    opt = DistributedLion([p, q], lr=0.01, betas=(0.9, 0.99), weight_decay=0.1, mode=mode)
    lion = Lion([twin], lr=0.01, betas=(0.9, 0.99), weight_decay=0.1)
    for step in range(4):
        gs = [torch.randn(9, 7).t().contiguous().t(), torch.randn(6)]  # p's gradient non-contiguous too
        p.grad, q.grad, twin.grad = gs[0].clone(), gs[1].clone(), gs[0].clone()
        opt.step()
        lion.step()
        with torch.no_grad():
            plain_lion_step([ref_p, ref_q], gs, ref_m, 0.01, (0.9, 0.99), 0.1)
        assert torch.equal(p.detach(), twin.detach()), f"step {step}: differs from lion-pytorch"
        assert torch.equal(p.detach(), ref_p), f"step {step}"
        assert torch.equal(q.detach(), ref_q), f"step {step}"
        assert p.stride() == (1, 9), "the parameter must be stepped in place, not replaced"


def test_ternary_votes_give_torch_sign_semantics():
    from pride.optim import DistributedLion

    p = torch.nn.Parameter(torch.ones(100))
    opt = DistributedLion([p], lr=0.1, votes="ternary")
    p.grad = torch.zeros(100)
    p.grad[::2] = 1.0
    opt.step()
    assert torch.equal(p.detach()[::2], torch.full((50,), 0.9)) and torch.equal(p.detach()[1::2], torch.ones(50))
    with pytest.raises(ValueError, match="mode"):
        DistributedLion([p], mode="majority")


@pytest.mark.parametrize("name", ["DistributedLion", "OneBitAdam", "ZeroOneAdam"])
def test_a_parameter_listed_twice_is_refused(name):
    # torch only warns; pride steps a group's tensors in one fused launch, where a tensor listed twice
    # would be written by two slices at once. A generator of distinct tensors is still accepted.
    import pride.optim

    cls = getattr(pride.optim, name)
    model = make_model(torch.float32)
    w, b = model[0].weight, model[0].bias
    with pytest.raises(ValueError, match=rf"{name}: a parameter group lists the same tensor twice \(positions 0 and 2"):
        cls([w, b, w])
    # named parameters, (name, tensor) pairs: tied weights listed under two names
    with pytest.raises(ValueError, match=r"same tensor twice \(positions 0 and 2"):
        cls([("embed.weight", w), ("bias", b), ("head.weight", w)])
    opt = cls(p for p in model.parameters())
    with pytest.raises(ValueError, match="same tensor twice"):
        extra = torch.nn.Parameter(torch.zeros(3))
        opt.add_param_group({"params": [extra, extra]})
    assert [len(g["params"]) for g in opt.param_groups] == [6]


@pytest.mark.parametrize("name", ["DistributedLion", "OneBitAdam", "ZeroOneAdam"])
def test_parameters_that_share_memory_are_refused(name):
    # W and W.t() registered as two parameters, or overlapping slices of one buffer: the fused steps would
    # write the shared elements twice at once (and a transposed view, stepped in a copy written back,
    # would undo W's step). torch's per-tensor loop steps them one after the other; pride refuses them.
    import pride.optim

    cls = getattr(pride.optim, name)
    w = torch.randn(4, 6)
    buf = torch.zeros(100)
    for shared, positions in (([torch.nn.Parameter(w), torch.nn.Parameter(w.t())], "0 and 1"),
                              ([buf[:50], torch.zeros(3), buf[40:]], "0 and 2"),
                              ([buf[::2], buf[1::2], buf[10:12]], "0 and 2")):
        with pytest.raises(ValueError, match=rf"{name}: the tensors at positions {positions} of a parameter group "
                                             "share memory"):
            cls([torch.nn.Parameter(t) if not isinstance(t, torch.nn.Parameter) else t for t in shared], lr=0.01)
    # Disjoint views of one buffer (a flat buffer carved into parameters), interleaved ones included.
    cls([torch.nn.Parameter(buf[:50]), torch.nn.Parameter(buf[50:])], lr=0.01)
    cls([torch.nn.Parameter(buf[::2]), torch.nn.Parameter(buf[1::2])], lr=0.01)
    # Fake tensors (tracing, memory estimates) have no memory to share: built as torch's optimizers are.
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        cls([torch.nn.Parameter(torch.randn(4, 6)), torch.nn.Parameter(torch.randn(6))], lr=0.01)


def _stepped_outside_its_group(rank, world, store_path):
    # Built on every rank (as torch's new_group runs), stepped on rank 2, outside the group [0, 1]: a
    # clear error, not a bare AttributeError (vote), plain local Lion (global) or a step uphill (the Adams).
    import pride.optim

    init_group(rank, world, store_path)
    group = dist.new_group([0, 1])
    p = torch.nn.Parameter(torch.zeros(4))
    for make in (lambda: pride.optim.DistributedLion([p], lr=0.01, group=group),
                 lambda: pride.optim.DistributedLion([p], lr=0.01, group=group, mode="global"),
                 lambda: pride.optim.OneBitAdam([p], lr=0.01, group=group),
                 lambda: pride.optim.ZeroOneAdam([p], lr=0.01, group=group)):
        opt = make()
        p.grad = torch.ones(4)
        if rank == 2:
            with pytest.raises(RuntimeError, match=r"\(rank 2\): this rank is not a member of the optimizer's group"):
                opt.step()
            assert torch.equal(p.detach(), torch.zeros(4))
        else:
            opt.step()
    dist.destroy_process_group()


def test_stepping_outside_the_optimizers_group_is_refused():
    run(_stepped_outside_its_group, 3)


def _replicas(rank, world, store_path, mode, dtype):
    from pride.optim import DistributedLion

    init_group(rank, world, store_path)
    model = make_model(dtype)
    opt = DistributedLion(model.parameters(), lr=0.01, weight_decay=0.05, mode=mode, bucket_mb=2e-4)
    for step in range(3):
        for p, g in zip(model.parameters(), grads_for(model, rank, step)):
            p.grad = g
        opt.step()
    mine = torch.cat([p.detach().float().flatten() for p in model.parameters()])
    everyone = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(everyone, mine)
    assert all(torch.equal(everyone[0], e) for e in everyone), "replicas diverged"
    want = oracle_steps(dtype, world, 3, 0.01, (0.9, 0.99), 0.05, mode)
    for i, (p, w) in enumerate(zip(model.parameters(), want)):
        assert torch.equal(p.detach(), w), f"param {i} differs from the all-ranks oracle"
    dist.destroy_process_group()


@pytest.mark.parametrize("mode,dtype", [("vote", torch.float32), ("mean", torch.float32), ("vote", torch.bfloat16),
                                        ("mean", torch.float16)])
def test_replicas_stay_identical_and_match_the_oracle(mode, dtype):
    run(_replicas, 4, mode, dtype, deadline_s=200)


def _checkpoint(rank, world, store_path):
    from pride.optim import DistributedLion

    init_group(rank, world, store_path)

    def train(model, opt, steps):
        for step in steps:
            for p, g in zip(model.parameters(), grads_for(model, rank, step)):
                p.grad = g
            opt.step()

    model = make_model(torch.float32)
    opt = DistributedLion(model.parameters(), lr=0.01, mode="mean")
    train(model, opt, range(3))
    saved_model = {k: v.clone() for k, v in model.state_dict().items()}
    saved_opt = {"state": {k: {n: t.clone() for n, t in v.items()} for k, v in opt.state_dict()["state"].items()},
                 "param_groups": opt.state_dict()["param_groups"]}
    train(model, opt, range(3, 6))
    resumed = make_model(torch.float32)
    resumed.load_state_dict(saved_model)
    opt2 = DistributedLion(resumed.parameters(), lr=0.01, mode="mean")
    opt2.load_state_dict(saved_opt)
    train(resumed, opt2, range(3, 6))
    for a, b in zip(model.parameters(), resumed.parameters()):
        assert torch.equal(a, b)
    dist.destroy_process_group()


def test_checkpoint_resumes_exactly():
    run(_checkpoint, 2)


def _global(rank, world, store_path):
    from pride.optim import DistributedLion

    init_group(rank, world, store_path)
    model, ref = make_model(torch.float32), make_model(torch.float32)
    opt = DistributedLion(model.parameters(), lr=0.01, mode="global")
    ref_m = [torch.zeros_like(p) for p in ref.parameters()]
    for step in range(3):
        # dyadic gradients: the fp32 average is exact whatever the summation order
        gs = [torch.round(g * 8) / 8 for g in grads_for(model, rank, step)]
        for p, g in zip(model.parameters(), gs):
            p.grad = g
        opt.step()
        avg = [sum(torch.round(g * 8) / 8 for g in col) / world
               for col in zip(*[grads_for(model, r, step) for r in range(world)])]
        with torch.no_grad():
            plain_lion_step(list(ref.parameters()), avg, ref_m, 0.01, (0.9, 0.99), 0.0)
    for a, b in zip(model.parameters(), ref.parameters()):
        assert torch.equal(a, b)
    # The averaged gradients of these odd sizes (561, 17, 85, 5, 25, 5 elements) each start on 16 bytes:
    # the CUDA step reads aligned tensors with vector loads.
    params = list(model.parameters())
    averaged = opt._averaged([p.grad for p in params], params)
    assert [a.data_ptr() % 16 for a in averaged] == [0] * len(params)
    dist.destroy_process_group()


def test_global_mode_is_lion_on_the_averaged_gradient():
    run(_global, 2)


# ---- Exact sign semantics by default (sign(0) = 0), against lion-pytorch as the independent Lion ----

def _embedding_steps(opt_factory, steps, world=1, rank=0, seed=7):
    """An embedding whose rows 10.. never appear in a batch (their gradient is exactly zero), trained
    with the same batches on every rank. Returns (weights before, weights after, the optimizer)."""
    torch.manual_seed(seed)
    emb = torch.nn.Embedding(40, 16)
    before = emb.weight.detach().clone()
    opt = opt_factory(emb.parameters())
    g = torch.Generator().manual_seed(seed)  # the same on every rank: unanimous votes
    for _ in range(steps):
        idx = torch.randint(0, 10, (32,), generator=g)
        target = torch.randn(32, 16, generator=g)
        opt.zero_grad()
        torch.nn.functional.mse_loss(emb(idx), target).backward()
        opt.step()
    return before, emb.weight.detach().clone(), opt


def _compare_with_lion_pytorch(ours, before):
    """ours must equal lion-pytorch's Lion (its plain PyTorch path) trained on the same batches: the
    unused rows bitwise, the rest except where the two implementations' last-bit roundings of c (torch's
    add with alpha fuses into one rounding) flip the sign of a c within a few ulps of zero: a handful of
    elements at most, never a whole row."""
    from lion_pytorch import Lion

    _, ref, _ = _embedding_steps(lambda p: Lion(p, lr=0.01, betas=(0.9, 0.99), weight_decay=0.0), 30)
    assert torch.equal(ours[10:], before[10:]), "rows with zero gradient moved"
    assert torch.equal(ref[10:], before[10:]), "lion-pytorch moved the zero-gradient rows (test premise)"
    differ = (ours[:10] != ref[:10]).sum().item()
    assert differ <= 3, f"{differ} of {ours[:10].numel()} used elements differ from lion-pytorch"


def test_default_votes_are_exact_one_process():
    from pride.optim import DistributedLion

    before, ours, _ = _embedding_steps(lambda p: DistributedLion(p, lr=0.01), 30)
    _compare_with_lion_pytorch(ours, before)
    # The test can fail: binary votes make every zero-gradient element drift by lr per step.
    _, drifted, _ = _embedding_steps(lambda p: DistributedLion(p, lr=0.01, votes="binary"), 30)
    assert torch.allclose(drifted[10:] - before[10:], torch.full_like(before[10:], 0.3), atol=1e-5)


def _exact_votes(rank, world, store_path):
    import pride
    from pride.optim import DistributedLion

    init_group(rank, world, store_path)
    before, ours, _ = _embedding_steps(lambda p: DistributedLion(p, lr=0.01, bucket_mb=1e-3), 30, world, rank)
    _compare_with_lion_pytorch(ours, before)

    # Cost: with no exact zero anywhere, the default moves at most 1.1x the bytes of binary votes.
    def one_step_bytes(votes):
        torch.manual_seed(3)
        lin = torch.nn.Linear(512, 512)
        opt = DistributedLion(lin.parameters(), lr=0.01, votes=votes, bucket_mb=0.25)
        g = torch.Generator().manual_seed(11 + rank)
        for p in lin.parameters():
            p.grad = torch.randn(p.shape, generator=g)
        pride.reset_stats()
        opt.step()
        return pride.stats()["bytes_sent"]

    binary, exact, ternary = one_step_bytes("binary"), one_step_bytes("exact"), one_step_bytes("ternary")
    assert binary > 0 and exact <= 1.1 * binary, (binary, exact)
    assert ternary > 1.5 * binary, (binary, ternary)  # the fallback it avoids really costs more
    dist.destroy_process_group()


def test_default_votes_are_exact_4ranks():
    run(_exact_votes, 4, deadline_s=200)


# ---- Missing gradients and layouts: every rank builds the same layout from the parameter list ----

def _missing(step, rank, index, world):
    """Whether `rank` lacks parameter `index`'s gradient at `step`: a pattern that differs per rank and
    step, and every fifth step parameter 0 has no gradient on any rank."""
    if index == 0 and step % 5 == 0:
        return True
    return (index * 7 + rank * 3 + step) % 4 == 0


def oracle_steps(dtype, world, steps, lr, betas, wd, mode, votes="binary", missing=lambda step, rank, index, world: False,
                 model_fn=make_model, grads_fn=grads_for):
    """Simulates every rank: its own momentum, its vote, the int32 count, the shared update. Present
    gradients vote sign(c) (exact votes: 0 for c == 0; binary votes: −1 for c == 0); a gradient for
    which missing(step, rank, index, world) holds abstains and leaves that rank's momentum alone, and a
    parameter without a gradient on any rank takes no step (not even weight decay). lr: a number, or a
    function of the step (a schedule)."""
    model = model_fn(dtype)
    params = [p.detach().clone() for p in model.parameters()]
    momenta = [[torch.zeros_like(p) for p in params] for _ in range(world)]
    b1, b2 = betas
    lr_at = lr if callable(lr) else (lambda step: lr)
    for step in range(steps):
        lr = lr_at(step)
        counts = [torch.zeros(p.shape, dtype=torch.int32) for p in params]
        anyone = [False] * len(params)
        for r in range(world):
            for i, g in enumerate(grads_fn(model, r, step)):
                if missing(step, r, i, world):
                    continue
                anyone[i] = True
                m = momenta[r][i]
                c = m.mul(b1) + g.mul(1 - b1)
                vote = torch.sign(c) if votes == "exact" else torch.where(c > 0, 1, -1)
                counts[i] += vote.to(torch.int32)
                momenta[r][i] = m.mul(b2) + g.mul(1 - b2)
        for i, p in enumerate(params):
            if not anyone[i]:
                continue
            s = counts[i]
            delta = torch.sign(s).float() if mode == "vote" else (s.float() / float(world)).to(dtype).float()
            x1 = p.mul(1 - lr * wd)
            lr_d = torch.tensor(lr, dtype=torch.float32).to(dtype).float()  # as torch's add_(alpha=-lr)
            params[i] = (x1.float() - lr_d * delta).to(dtype)
    return params


def _big_model(dtype, seed=0):
    """One weight of 1031 x 1021 elements: enough words that the local work splits across threads
    (bits::kMinWordsPerThread = 4096 words a thread), and a tail that ends mid-word."""
    torch.manual_seed(seed)
    return torch.nn.Linear(1031, 1021).to(dtype)


def _threaded_local_work(rank, world, store_path, mode, dtype):
    from pride.optim import DistributedLion

    if world > 1:
        init_group(rank, world, store_path)
    model = _big_model(dtype)
    opt = DistributedLion(model.parameters(), lr=0.01, weight_decay=0.05, mode=mode)
    for step in range(2):
        for p, g in zip(model.parameters(), grads_for(model, rank, step)):
            p.grad = g
        opt.step()
    want = oracle_steps(dtype, world, 2, 0.01, (0.9, 0.99), 0.05, mode, votes="exact", model_fn=_big_model)
    for i, (p, w) in enumerate(zip(model.parameters(), want)):
        assert torch.equal(p.detach(), w), f"param {i} differs from the all-ranks oracle"
    if world > 1:
        dist.destroy_process_group()


@pytest.mark.parametrize("world,mode,dtype", [(1, "vote", torch.float32), (2, "vote", torch.float32),
                                              (2, "mean", torch.float32), (2, "vote", torch.bfloat16)])
def test_local_work_on_several_threads_gives_the_oracles_bits(world, mode, dtype):
    # PRIDE_THREADS=3 splits each tensor's update, pack and apply into word ranges on three threads.
    run(_threaded_local_work, world, mode, dtype, env={"PRIDE_THREADS": "3"}, deadline_s=200)


def _wide_model(dtype, seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 8)).to(dtype)


def _grads_with_dead_elements(model, rank, step):
    """grads_for, with a few elements per rank whose gradient is always exactly 0 (a different few on
    each rank, and flat element 5 on all): their momentum stays 0, so c == 0 and they abstain."""
    grads, flat = [], 0
    for g in grads_for(model, rank, step):
        idx = torch.arange(flat, flat + g.numel()).reshape(g.shape)
        g = torch.where(((idx * 31 + rank * 17) % 401 == 0) | (idx == 5), torch.zeros_like(g), g)
        grads.append(g)
        flat += g.numel()
    return grads


def _exact_votes_beside_binary_and_ternary(rank, world, grads_fn, steps, restart_at=None, layer_groups=False):
    """Trains _wide_model with DistributedLion under each vote kind, in each mode and dtype of interest;
    checks that exact votes keep the replicas identical and equal to the int32 oracle, and yields
    (mode, dtype, bytes sent per vote kind, the exact run's optimizer). The learning rate decays every
    step, as under a scheduler (it is part of the layout digest). restart_at: at that step rank 0
    resumes the exact run in a new optimizer loaded from the old one's state dict. layer_groups: one
    param group per layer (each group's step has its own buckets)."""

    def lr_at(step):
        return 0.01 * (1 - step / (2 * steps))

    import pride
    from pride.optim import DistributedLion

    for mode, dtype in [("vote", torch.float32), ("mean", torch.float32), ("vote", torch.bfloat16)]:
        sent, exact_opt = {}, None
        for votes in ["exact", "binary", "ternary"]:
            model = _wide_model(dtype)

            def params():
                return [{"params": layer.parameters()} for layer in model] if layer_groups else model.parameters()

            opt = DistributedLion(params(), lr=0.01, weight_decay=0.05, mode=mode, votes=votes)
            pride.reset_stats()
            for step in range(steps):
                if votes == "exact" and step == restart_at and rank == 0:
                    resumed = DistributedLion(params(), lr=0.01, weight_decay=0.05, mode=mode, votes=votes)
                    resumed.load_state_dict(opt.state_dict())
                    opt = resumed
                for p, g in zip(model.parameters(), grads_fn(model, rank, step)):
                    p.grad = g
                for group in opt.param_groups:
                    group["lr"] = lr_at(step)
                opt.step()
            sent[votes] = pride.stats()["bytes_sent"]
            if votes != "exact":
                continue
            exact_opt = opt
            mine = _params_sha256(model)
            everyone = [torch.empty_like(mine) for _ in range(world)]
            dist.all_gather(everyone, mine)
            assert all(torch.equal(everyone[0], e) for e in everyone), f"replicas diverged ({mode}, {dtype})"
            want = oracle_steps(dtype, world, steps, lr_at, (0.9, 0.99), 0.05, mode, "exact",
                                model_fn=_wide_model, grads_fn=grads_fn)
            for i, (p, w) in enumerate(zip(model.parameters(), want)):
                assert torch.equal(p.detach(), w), f"param {i} differs from the int32 oracle ({mode}, {dtype})"
        yield mode, dtype, sent, exact_opt


def _few_abstentions(rank, world, store_path):
    init_group(rank, world, store_path)
    for mode, dtype, sent, _ in _exact_votes_beside_binary_and_ternary(rank, world, _grads_with_dead_elements, 6):
        # The abstentions were re-voted, not sent as a ternary bucket: the lists and the re-vote cost
        # less than a quarter of what ternary votes add to binary ones, even on this small model.
        assert sent["ternary"] > 1.3 * sent["binary"], (mode, dtype, sent)
        assert sent["exact"] - sent["binary"] < 0.25 * (sent["ternary"] - sent["binary"]), (mode, dtype, sent)
    dist.destroy_process_group()


@pytest.mark.parametrize("world", [3, 4])
def test_few_abstentions_are_revoted_exactly_at_binary_cost(world):
    run(_few_abstentions, world, deadline_s=200)


def _grads_with_many_dead_elements(model, rank, step):
    """grads_for, with more elements per rank whose gradient is exactly 0 than a bucket may list every step
    (about 1 in 97, a different set on each rank, and flat element 5 on all: ~50 a rank against
    max_revote_list's 29 at N = 4). From step 6 on, half of each rank's set gets gradients: the
    abstentions shrink, as a network's dead units come alive."""
    grads, flat = [], 0
    for g in grads_for(model, rank, step):
        idx = torch.arange(flat, flat + g.numel()).reshape(g.shape)
        dead = ((idx * 31 + rank * 17) % 97 == 0) & ((step < 6) | (idx % 2 == 1))
        grads.append(torch.where(dead | (idx == 5), torch.zeros_like(g), g))
        flat += g.numel()
    return grads


def _many_abstentions(rank, world, store_path, layer_groups):
    init_group(rank, world, store_path)
    # Rank 0 resumes at step 9 in a new optimizer (its memory empty) while the others keep theirs: the
    # remembered unions' digests differ, and the ranks must agree on a new one.
    runs = _exact_votes_beside_binary_and_ternary(rank, world, _grads_with_many_dead_elements, 14, restart_at=9,
                                                  layer_groups=layer_groups)
    for mode, dtype, sent, opt in runs:
        remembered = [m.remembered for m in opt._abstention_memories.values()]
        assert len(remembered) == (2 if layer_groups else 1), remembered
        assert all(r and r[0] > 0 for r in remembered), remembered
        # Too many abstentions to list every step, so without the remembered union every step would be
        # ternary; with it, the lists travel at the first step, the shrink and the restart, and in bf16
        # the few exact cancellations of a step outside the union (11-15% of what ternary votes add, here).
        assert sent["ternary"] > 1.3 * sent["binary"], (mode, dtype, sent)
        assert sent["exact"] - sent["binary"] < 0.3 * (sent["ternary"] - sent["binary"]), (mode, dtype, sent)
    dist.destroy_process_group()


@pytest.mark.parametrize("world,layer_groups", [(3, False), (4, False), (4, True)])
def test_persistent_abstentions_are_remembered_and_revoted_exactly(world, layer_groups):
    run(_many_abstentions, world, layer_groups, deadline_s=200)


def _params_sha256(model):
    import hashlib

    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return torch.tensor(list(h.digest()), dtype=torch.uint8)


def _missing_grads(rank, world, store_path):
    from pride.optim import DistributedLion

    init_group(rank, world, store_path)
    steps = 20
    for mode, votes, dtype in [("vote", "exact", torch.float32), ("mean", "exact", torch.float32),
                               ("vote", "binary", torch.float32), ("vote", "exact", torch.bfloat16)]:
        model = make_model(dtype)
        # small buckets: a bucket holds parts of several tensors, some present here and some not
        opt = DistributedLion(model.parameters(), lr=0.01, weight_decay=0.05, mode=mode, votes=votes, bucket_mb=2e-4)
        before0 = list(model.parameters())[0].detach().clone()
        for step in range(steps):
            opt.zero_grad(set_to_none=True)
            for i, (p, g) in enumerate(zip(model.parameters(), grads_for(model, rank, step))):
                if not _missing(step, rank, i, world):
                    p.grad = g
            opt.step()
            if step == 0:  # parameter 0 had no gradient anywhere: untouched despite weight decay
                assert torch.equal(list(model.parameters())[0].detach(), before0), (mode, votes)
        mine = _params_sha256(model)
        everyone = [torch.empty_like(mine) for _ in range(world)]
        dist.all_gather(everyone, mine)
        assert all(torch.equal(everyone[0], e) for e in everyone), f"replicas diverged ({mode}, {votes}, {dtype})"
        want = oracle_steps(dtype, world, steps, 0.01, (0.9, 0.99), 0.05, mode, votes, _missing)
        for i, (p, w) in enumerate(zip(model.parameters(), want)):
            assert torch.equal(p.detach(), w), f"param {i} differs from the int32 oracle ({mode}, {votes}, {dtype})"
    dist.destroy_process_group()


def test_missing_gradients_abstain_and_replicas_stay_identical_4ranks():
    run(_missing_grads, 4, deadline_s=300)


def _different_models(rank, world, store_path, mode, change):
    import pride
    from pride.optim import DistributedLion

    init_group(rank, world, store_path)
    model = make_model(torch.float32)
    if rank == world - 1 and change == "transposed":
        # the same number of elements, so the same bucket sizes: only the layout digest can tell
        model[1].weight = torch.nn.Parameter(torch.randn(17, 5))
    if rank == 1 and change == "extra":
        model.append(torch.nn.Linear(5, 5))
    opt = DistributedLion(model.parameters(), lr=0.01, mode=mode, bucket_mb=2e-4)
    for p, g in zip(model.parameters(), grads_for(model, rank, 0)):
        p.grad = g
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(ValueError, match=r"parameter lists differ: parameter (2|6) is") as err:
        opt.step()
    if change == "transposed":
        assert "float32 [5, 17] on cpu (param group 0) on rank 0" in str(err.value)
        assert f"float32 [17, 5] on cpu (param group 0) on rank {world - 1}" in str(err.value)
    else:
        assert "absent on rank 0" in str(err.value)
    assert all(torch.equal(p.detach(), b) for p, b in zip(model.parameters(), before)), "a parameter moved"
    # the group is still usable
    t = torch.ones(3)
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((3,), float(world)))
    del pride
    dist.destroy_process_group()


@pytest.mark.parametrize("mode,change", [("vote", "transposed"), ("mean", "extra"), ("global", "transposed")])
def test_different_models_fail_on_every_rank(mode, change):
    run(_different_models, 4, mode, change, deadline_s=150)  # run() raises if any rank did not raise


def _settings_changed_later(rank, world, store_path):
    """A layout that changes after steps that agreed (a learning-rate schedule stepped on one rank
    only): the step keeps the digest of an unchanged layout, so this checks that a change is seen."""
    from pride.optim import DistributedLion

    init_group(rank, world, store_path)
    model = make_model(torch.float32)
    opt = DistributedLion(model.parameters(), lr=0.01, mode="vote", bucket_mb=2e-4)
    for step in range(2):
        for p, g in zip(model.parameters(), grads_for(model, rank, step)):
            p.grad = g
        opt.step()
    if rank == 1:
        opt.param_groups[0]["lr"] = 0.005
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(ValueError, match=r"param group 0's \(lr, betas, weight_decay\) is") as err:
        opt.step()
    assert "(0.005, (0.9, 0.99), 0.0) on rank 1" in str(err.value)
    assert all(torch.equal(p.detach(), b) for p, b in zip(model.parameters(), before)), "a parameter moved"
    dist.destroy_process_group()


def test_a_setting_changed_after_agreed_steps_fails_on_every_rank():
    run(_settings_changed_later, 2, deadline_s=120)


def _global_any_group(rank, world, store_path, backend):
    from pride.optim import DistributedLion

    init_group(rank, world, store_path, backend=backend)
    # the default group's backend may be anything; a Gloo subgroup from a pride default group too
    group = dist.new_group(backend="gloo") if backend == "pride" else None
    model, ref = make_model(torch.float32), make_model(torch.float32)
    opt = DistributedLion(model.parameters(), lr=0.01, mode="global", group=group)
    ref_m = [torch.zeros_like(p) for p in ref.parameters()]
    for step in range(4):
        gs = [torch.round(g * 8) / 8 for g in grads_for(model, rank, step)]
        for i, (p, g) in enumerate(zip(model.parameters(), gs)):
            p.grad = None if _missing(step, rank, i, world) else g
        opt.step()
        # the oracle: a missing gradient counts as zeros in the mean; no gradient anywhere, no step
        cols = [[torch.round(g * 8) / 8 for g in grads_for(model, r, step)] for r in range(world)]
        with torch.no_grad():
            for i, (p, m) in enumerate(zip(ref.parameters(), ref_m)):
                present = [cols[r][i] for r in range(world) if not _missing(step, r, i, world)]
                if present:
                    avg = sum(present) / world
                    plain_lion_step([p], [avg], [m], 0.01, (0.9, 0.99), 0.0)
    for a, b in zip(model.parameters(), ref.parameters()):
        assert torch.equal(a, b)
    dist.destroy_process_group()


@pytest.mark.parametrize("backend", ["gloo", "pride"])
def test_global_mode_works_with_any_group(backend):
    run(_global_any_group, 2, backend)


def test_a_launched_rank_without_a_process_group_refuses_at_construction(monkeypatch):
    # Under a launcher (WORLD_SIZE > 1) but with torch.distributed not initialized, each rank would
    # train a model of its own: the optimizer must refuse when it is created, not train silently.
    from pride.optim import DistributedLion

    assert not dist.is_initialized()
    params = list(make_model(torch.float32).parameters())
    monkeypatch.setenv("WORLD_SIZE", "4")
    with pytest.raises(RuntimeError, match="WORLD_SIZE=4.*not initialized"):
        DistributedLion(params, lr=0.01)
    monkeypatch.setenv("WORLD_SIZE", "1")
    DistributedLion(params, lr=0.01)  # one process: Lion, no group needed
    monkeypatch.delenv("WORLD_SIZE")
    DistributedLion(params, lr=0.01)


def _wrong_group_fails_at_construction(rank, world, store_path):
    from pride.optim import DistributedLion

    init_group(rank, world, store_path, backend="gloo")
    model = make_model(torch.float32)
    for mode in ("vote", "mean"):
        with pytest.raises(TypeError, match="not 'pride'"):
            DistributedLion(model.parameters(), lr=0.01, mode=mode)
    # G-Lion averages with torch.distributed: any group does.
    DistributedLion(model.parameters(), lr=0.01, mode="global")
    dist.destroy_process_group()


def test_voting_over_a_group_that_is_not_pride_fails_at_construction():
    run(_wrong_group_fails_at_construction, 2)


# ---- Per-rank optimizer state: torch.distributed.checkpoint, and one rank's state loaded everywhere ----

def _train_steps(model, opt, rank, steps):
    for step in steps:
        for p, g in zip(model.parameters(), grads_for(model, rank, step)):
            p.grad = g
        opt.step()


def _sharded_checkpoint(rank, world, store_path):
    import os

    import torch.distributed.checkpoint as dcp

    from pride.optim import DistributedLion

    init_group(rank, world, store_path)
    checkpoint = os.path.join(os.path.dirname(store_path), "dcp")
    model = make_model(torch.float32)
    opt = DistributedLion(model.parameters(), lr=0.01, weight_decay=0.01)
    _train_steps(model, opt, rank, range(3))
    saved_params = {k: v.clone() for k, v in model.state_dict().items()}
    my_momentum = [opt.state[p]["exp_avg"].clone() for p in model.parameters()]
    dcp.save(opt.sharded_state_dict(), checkpoint_id=checkpoint)
    _train_steps(model, opt, rank, range(3, 6))

    resumed = make_model(torch.float32, seed=1)  # other weights and no momentum, until loaded
    resumed.load_state_dict(saved_params)
    opt2 = DistributedLion(resumed.parameters(), lr=0.5)  # the checkpoint's lr and weight decay win
    state = opt2.sharded_state_dict()
    dcp.load(state, checkpoint_id=checkpoint)
    opt2.load_sharded_state_dict(state)
    for p, m in zip(resumed.parameters(), my_momentum):
        assert torch.equal(opt2.state[p]["exp_avg"], m), "each rank must get its own momentum back"
    assert opt2.param_groups[0]["lr"] == 0.01 and opt2.param_groups[0]["weight_decay"] == 0.01
    assert opt2.steps == 3
    _train_steps(resumed, opt2, rank, range(3, 6))
    for a, b in zip(model.parameters(), resumed.parameters()):
        assert torch.equal(a, b)
    # the momenta differ between ranks (else this test could not tell them apart)
    flat = torch.cat([m.flatten() for m in my_momentum])
    everyone = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(everyone, flat)
    assert not torch.equal(everyone[0], everyone[1])
    dist.destroy_process_group()


def test_sharded_state_through_distributed_checkpoint_resumes_exactly():
    run(_sharded_checkpoint, 2)


def _rank0_state_everywhere(rank, world, store_path):
    import logging
    import os

    from pride.optim import DistributedLion

    init_group(rank, world, store_path)
    path = os.path.join(os.path.dirname(store_path), "rank0_optimizer.pt")
    model = make_model(torch.float32)
    opt = DistributedLion(model.parameters(), lr=0.01)
    _train_steps(model, opt, rank, range(3))
    if rank == 0:  # what a framework does: one rank saves the optimizer
        torch.save(opt.state_dict(), path)
    dist.barrier()
    notes = []
    handler = logging.Handler()
    handler.emit = lambda record: notes.append(record.getMessage())
    logging.getLogger("pride").addHandler(handler)
    opt2 = DistributedLion(model.parameters(), lr=0.01)
    opt2.load_state_dict(torch.load(path))
    logging.getLogger("pride").removeHandler(handler)
    rank0 = torch.load(path)["state"]
    for i, p in enumerate(model.parameters()):
        assert torch.equal(opt2.state[p]["exp_avg"], rank0[i]["exp_avg"])
    if rank == 0:
        assert not notes, notes
    else:
        assert len(notes) == 1 and "rank 0 of 2 saved" in notes[0] and "sharded_state_dict" in notes[0], notes
    _train_steps(model, opt2, rank, range(3, 5))
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    everyone = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(everyone, flat)
    assert torch.equal(everyone[0], everyone[1])
    dist.destroy_process_group()


def test_one_ranks_state_loaded_everywhere_is_defined_and_noted():
    run(_rank0_state_everywhere, 2)


def _dcp_api_resume(rank, world, store_path, through):
    # torch's DCP state-dict API keeps only "state" and "param_groups" of an optimizer's state dict: the
    # step count that a MomentumSync schedule reads must travel in them, or the momenta are averaged after
    # other steps than in the uninterrupted run.
    import copy
    import os

    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                         get_optimizer_state_dict, set_model_state_dict,
                                                         set_optimizer_state_dict)

    from pride.optim import DistributedLion, MomentumSync

    init_group(rank, world, store_path)
    options = StateDictOptions(flatten_optimizer_state_dict=through == "flattened")

    def make(seed):
        model = make_model(torch.float32, seed=seed)
        return model, DistributedLion(model.parameters(), lr=0.01, weight_decay=0.01,
                                      momentum_sync=MomentumSync(every=3))

    # In memory each rank keeps its own momentum: save between synchronisations. dcp.save keeps one copy of
    # tensors that every rank writes under the same key (plain tensors are taken as replicated), so through
    # files save right after a synchronisation, where the ranks' momenta are bitwise equal. A count that
    # restarts (at 0, or at 1 after the step DCP takes on a fresh optimizer) must shift the schedule: no
    # offset of a multiple of 3.
    saved_at = 6 if through == "files" else 5
    model, opt = make(0)
    _train_steps(model, opt, rank, range(saved_at))
    momenta = torch.cat([opt.state[p]["exp_avg"].flatten() for p in model.parameters()])
    everyone = [torch.empty_like(momenta) for _ in range(world)]
    dist.all_gather(everyone, momenta)
    assert torch.equal(everyone[0], everyone[1]) == (through == "files")
    model_state = copy.deepcopy(get_model_state_dict(model))
    optim_state = copy.deepcopy(get_optimizer_state_dict(model, opt, options=options))
    assert opt.steps == saved_at
    if through == "files":
        checkpoint = os.path.join(os.path.dirname(store_path), "dcp_api")
        dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=checkpoint)
    _train_steps(model, opt, rank, range(saved_at, 11))  # synchronisations after steps 6 (files: before) and 9

    resumed, opt2 = make(1)  # other weights and no momentum, until loaded
    if through == "files":
        state = {"model": get_model_state_dict(resumed), "optim": get_optimizer_state_dict(resumed, opt2)}
        dcp.load(state, checkpoint_id=checkpoint)
        model_state, optim_state = state["model"], state["optim"]
    set_model_state_dict(resumed, model_state)
    set_optimizer_state_dict(resumed, opt2, optim_state, options=options)
    assert opt2.steps == saved_at
    _train_steps(resumed, opt2, rank, range(saved_at, 11))
    assert opt2.steps == opt.steps == 11
    for i, (a, b) in enumerate(zip(model.parameters(), resumed.parameters())):
        assert torch.equal(a, b), f"parameter {i}"
        assert torch.equal(opt.state[a]["exp_avg"], opt2.state[b]["exp_avg"]), f"momentum {i}"
    dist.destroy_process_group()


@pytest.mark.parametrize("through", ["memory", "flattened", "files"])
def test_dcp_state_dict_api_keeps_the_step_count_of_momentum_sync(through):
    run(_dcp_api_resume, 2, through)


def test_an_old_state_dict_restores_the_step_count():
    # Before the count rode in param_groups it was saved only under "pride": such state dicts still load.
    from pride.optim import DistributedLion, MomentumSync

    model = make_model(torch.float32)
    opt = DistributedLion(model.parameters(), lr=0.01, momentum_sync=MomentumSync(every=3))
    _train_steps(model, opt, 0, range(2))
    old = opt.state_dict()
    for group in old["param_groups"]:
        del group["step"]
    old["pride"] = {"rank": 0, "world_size": 1, "steps": 7}
    fresh = DistributedLion(make_model(torch.float32).parameters(), lr=0.01, momentum_sync=MomentumSync(every=3))
    fresh.load_state_dict(old)
    assert fresh.steps == 7 and [g["step"] for g in fresh.param_groups] == [7]
    assert fresh.state_dict()["pride"]["steps"] == 7
    # a state dict with neither (torch's own keys only) leaves the count as it was
    fresh.load_state_dict({"state": old["state"], "param_groups": old["param_groups"]})
    assert fresh.steps == 7


def test_lion_pytorchs_state_loads_and_another_optimizers_is_refused_by_name():
    # lion-pytorch's state means what DistributedLion's does: resuming from it continues as lion-pytorch
    # itself continues (the oracle). AdamW's would load silently (torch's optimizers accept each other's)
    # with exp_avg taken for the momentum: refused, naming what a Lion does not keep.
    import copy

    from lion_pytorch import Lion
    from pride.optim import DistributedLion

    model, twin = make_model(torch.float32), make_model(torch.float32)
    lion = Lion(twin.parameters(), lr=0.01, betas=(0.9, 0.99), weight_decay=0.1)
    _train_steps(twin, lion, 0, range(3))
    model.load_state_dict(twin.state_dict())
    opt = DistributedLion(model.parameters(), lr=0.5)
    # a copy, as from a file: torch's load_state_dict keeps the very tensors it is given
    opt.load_state_dict(copy.deepcopy(lion.state_dict()))
    assert opt.param_groups[0]["lr"] == 0.01 and opt.param_groups[0]["betas"] == (0.9, 0.99)
    _train_steps(model, opt, 0, range(3, 6))
    _train_steps(twin, lion, 0, range(3, 6))
    for a, b in zip(model.parameters(), twin.parameters()):
        assert torch.equal(a.detach(), b.detach())

    adamw = torch.optim.AdamW(twin.parameters(), lr=0.01)
    _train_steps(twin, adamw, 0, range(1))
    fresh = DistributedLion(make_model(torch.float32).parameters(), lr=0.01)
    with pytest.raises(ValueError, match=r"the state of parameter 0 holds exp_avg_sq, which a Lion does not keep"):
        fresh.load_state_dict(adamw.state_dict())
    assert fresh.param_groups[0]["lr"] == 0.01 and not fresh.state, "nothing of the refused state may load"
    # torch's load_state_dict pre-hooks, the documented way to adapt a state dict, run first
    def keep_the_momentum_only(optimizer, state_dict):
        state_dict = copy.deepcopy(state_dict)
        for entry in state_dict["state"].values():
            entry.pop("exp_avg_sq")
        return state_dict

    fresh.register_load_state_dict_pre_hook(keep_the_momentum_only)
    fresh.load_state_dict(adamw.state_dict())
    first = next(iter(twin.parameters()))
    assert torch.equal(fresh.state[fresh.param_groups[0]["params"][0]]["exp_avg"], adamw.state[first]["exp_avg"])


def test_the_step_count_is_in_every_param_group_and_not_in_the_layout():
    from pride.optim import DistributedLion

    model = make_model(torch.float32)
    params = list(model.parameters())
    opt = DistributedLion([{"params": params[:2]}, {"params": params[2:4], "lr": 0.1}], lr=0.01)
    assert opt.steps == 0 and [g["step"] for g in opt.param_groups] == [0, 0]
    _train_steps(model, opt, 0, range(1))
    layout = opt._layout()
    _train_steps(model, opt, 0, range(1, 3))
    assert opt._layout() == layout, "the count must not enter the layout that the ranks compare"
    opt.add_param_group({"params": params[4:], "step": 0})  # a new group joins at the current count
    assert opt.steps == 3 and [g["step"] for g in opt.param_groups] == [3, 3, 3]
    opt.steps = 5  # still settable, as the attribute was
    assert [g["step"] for g in opt.state_dict()["param_groups"]] == [5, 5, 5]
    # a state dict saved by one rank while the groups disagree (edited by hand): the largest count wins
    state = opt.state_dict()
    state["param_groups"][1]["step"] = 9
    del state["pride"]
    opt.load_state_dict(state)
    assert opt.steps == 9 and [g["step"] for g in opt.param_groups] == [9, 9, 9]
    # the sharded checkpoint's groups keep their old keys (the count travels at its top level)
    sharded = opt.sharded_state_dict()
    assert sharded["steps"] == 9 and all("step" not in g for g in sharded["param_groups"])


def _bucket_calls_agreed(rank, world_size, store_path, differ):
    import os

    if differ and rank == 1:  # a per-rank setting the bucket's layout digest knows nothing of: segments of
        os.environ["PRIDE_SEGMENT_BYTES"] = "64"  # 8 words where the others take the bucket's 40 in one
    init_group(rank, world_size, store_path)
    import pride
    from pride import _C
    from pride.collectives import _pride_backend

    backend = _pride_backend(None, "test")
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s)) for s in (5000, 3000, 7000)]
    opt = pride.optim.DistributedLion(params, lr=0.01, bucket_mb=0.01)  # 2560 elements a bucket: several
    sign_algorithms = ("direct", "ring", "tree", "allgather", "hier")

    def step(seed):
        g = torch.Generator().manual_seed(seed + 10 * rank)
        for p in params:
            p.grad = torch.randn(p.shape, generator=g)  # no exact zeros: no abstentions to re-vote
        opt.step()

    if differ:
        # The digests differ, so the sign-allreduce runs its own check, which names the difference.
        with pytest.raises(torch.distributed.DistBackendError, match="sign_allreduce.*segments of"):
            step(0)
        return
    step(0)  # the first step also checks the optimizer's layout
    for seed in (1, 2):
        checks, calls = _C.fingerprint_checks(backend), pride.stats()["per_algorithm"]
        step(seed)
        after = pride.stats()["per_algorithm"]
        sign_calls = sum(after.get(a, {}).get("calls", 0) - calls.get(a, {}).get("calls", 0) for a in sign_algorithms)
        # One check per bucket, the agreement's (its header rides in it); the bucket's sign-allreduce
        # skips its own. Without the call digest it would be two per bucket.
        assert sign_calls >= 4 and _C.fingerprint_checks(backend) - checks == sign_calls, (sign_calls, checks)
    flat = torch.cat([p.detach().reshape(-1) for p in params])
    everyone = [torch.empty_like(flat) for _ in range(world_size)]
    dist.all_gather(everyone, flat)
    assert all(torch.equal(everyone[0], x) for x in everyone), "replicas differ"
    dist.destroy_process_group()


@pytest.mark.parametrize("differ", [False, True])
def test_bucket_agreement_covers_the_sign_calls_own_check(differ):
    run(_bucket_calls_agreed, 3, differ)


def _momentum_of_another_model(rank, world, store_path, mode):
    from pride.optim import DistributedLion

    init_group(rank, world, store_path)
    model = make_model(torch.float32)
    opt = DistributedLion(model.parameters(), lr=0.01, mode=mode)
    # A checkpoint of another model: torch's load_state_dict checks no shapes, the step's own check does.
    state = opt.state_dict()
    state["state"] = {0: {"exp_avg": torch.zeros(3)}}
    opt.load_state_dict(state)
    for p, g in zip(model.parameters(), grads_for(model, rank, 0)):
        p.grad = g
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(ValueError, match=rf"pride DistributedLion \(rank {rank}\): parameter 0 has 561 elements, "
                                         r"its gradient or momentum 3"):
        opt.step()
    assert all(torch.equal(p.detach(), b) for p, b in zip(model.parameters(), before)), "a parameter moved"
    dist.destroy_process_group()


@pytest.mark.parametrize("mode", ["vote", "global"])  # G-Lion's step has no backend: the rank comes from Python
def test_a_bad_argument_is_named_with_the_rank(mode):
    run(_momentum_of_another_model, 2, mode, deadline_s=120)


def _copies_and_compiled_steps(rank, world, store_path):
    import copy
    import pickle

    import pride

    init_group(rank, world, store_path)
    kinds = {"DistributedLion": lambda ps, **kw: pride.optim.DistributedLion(ps, lr=1e-2, **kw),
             "OneBitAdam": lambda ps, **kw: pride.optim.OneBitAdam(ps, lr=1e-2, freeze_step=2, **kw),
             "ZeroOneAdam": lambda ps, **kw: pride.optim.ZeroOneAdam(ps, lr=1e-2, **kw)}
    for name, make in kinds.items():
        model = make_model(torch.float32)
        opt = make(model.parameters())
        for step in range(3):
            for p, g in zip(model.parameters(), grads_for(model, rank, step)):
                p.grad = g
            opt.step()
        # torch's own __getstate__ keeps defaults, state and param groups only: a copy lacked pride's
        # settings and failed at its first step (DistributedLion with a misleading Joinable assertion)
        copies = [opt, copy.deepcopy(opt), pickle.loads(pickle.dumps(opt))]
        for step in range(3, 6):
            for o in copies:
                for p, g in zip((p for grp in o.param_groups for p in grp["params"]), grads_for(model, rank, step)):
                    p.grad = g.clone()
                o.step()
        params = [[p.detach() for grp in o.param_groups for p in grp["params"]] for o in copies]
        for other in params[1:]:
            assert all(torch.equal(a, b) for a, b in zip(params[0], other)), name
    sub = dist.new_group(list(range(world)), backend="pride")
    opt = pride.optim.DistributedLion(make_model(torch.float32).parameters(), group=sub)
    assert copy.deepcopy(opt).group is sub  # a process group is shared, not copied

    # torch.compile of a training step: DistributedLion's step is left to run eagerly (it crashed dynamo)
    def train(compiled):
        model = make_model(torch.float32)
        opt = pride.optim.DistributedLion(model.parameters(), lr=1e-2)

        def train_step(x, y):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()

        step = torch.compile(train_step, backend="eager") if compiled else train_step
        g = torch.Generator().manual_seed(rank)
        for _ in range(3):
            step(torch.randn(8, 33, generator=g), torch.randn(8, 5, generator=g))
        return [p.detach().clone() for p in model.parameters()]

    assert all(torch.equal(a, b) for a, b in zip(train(False), train(True)))
    dist.destroy_process_group()


def test_copies_step_as_the_original_and_a_compiled_training_step_as_an_eager_one():
    run(_copies_and_compiled_steps, 2)
