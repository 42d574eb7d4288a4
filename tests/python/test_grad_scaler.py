"""pride's optimizers under torch.amp.GradScaler, with an overflow on one rank only.

GradScaler skips optimizer.step() on a rank whose gradients overflowed. With local gradients (pride's
optimizers communicate themselves) the other ranks would step, and the ranks' steps would pair up
wrongly from there on. The optimizers take the decision with the other ranks instead
(pride/optim/_grad_scaler.py). The oracles are runs without a scaler that do what the decision means:
DistributedLion's overflowed rank abstains (its gradients None, the documented Join semantics), the
compressed Adams skip the step everywhere (no step() call on any rank). The scales are powers of two, so
scaling and unscaling are exact and the runs must agree bit for bit."""

import pytest
import torch
import torch.distributed as dist

import distributed_harness as harness

STEPS = 9
OVERFLOW_STEP = 5


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def _loss(model, rank, step):
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(32, 8, generator=g)
    y = x @ torch.linspace(-1, 1, 8).unsqueeze(1)
    device = next(model.parameters()).device
    return torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))


def _make(kind, params):
    import pride

    if kind == "lion-vote":
        return pride.optim.DistributedLion(params, lr=1e-2, weight_decay=0.1)
    if kind == "lion-global":
        return pride.optim.DistributedLion(params, lr=1e-2, weight_decay=0.1, mode="global")
    if kind == "onebit":
        return pride.optim.OneBitAdam(params, lr=1e-2, weight_decay=0.1, freeze_step=3)
    return pride.optim.ZeroOneAdam(params, lr=1e-2, weight_decay=0.1, var_freeze_step=3, local_step_scaler=2)


def _bits(model):
    return b"".join(p.detach().cpu().numpy().tobytes() for p in model.parameters())


def _overflow_step(kind):
    # 0/1 Adam: step 6 (index 5) is a synchronisation (everyone skips), step 7 a local step (the overflowed
    # rank takes it without gradients).
    return OVERFLOW_STEP + 1 if kind == "zeroone-local" else OVERFLOW_STEP


def _worker(rank, world_size, store_path, kind, unscale_first, device="cpu"):
    harness.init_group(rank, world_size, store_path, timeout_s=20 if device == "cpu" else 60)
    if device == "cuda":  # both ranks on the one GPU: found_inf and the unscaling are on the device
        torch.cuda.set_device(0)
    scaled_model, plain_model = _model().to(device), _model().to(device)
    scaled_opt, plain_opt = _make(kind, scaled_model.parameters()), _make(kind, plain_model.parameters())
    # growth_interval 2: the scale moves up and back down during the run (powers of two, exact).
    scaler = torch.amp.GradScaler(device, init_scale=2.0 ** 10, growth_interval=2)
    overflowing = rank == 0
    overflow_step = _overflow_step(kind)
    kinds = []
    for step in range(STEPS):
        if kind.startswith("zeroone"):
            kinds.append(scaled_opt.next_step_communicates())
        scaled_opt.zero_grad()
        scaler.scale(_loss(scaled_model, rank, step)).backward()
        if step == overflow_step and overflowing:
            next(scaled_model.parameters()).grad[0, 0] = float("inf")
        if unscale_first:
            scaler.unscale_(scaled_opt)  # what gradient clipping needs first
        scaler.step(scaled_opt)
        scaler.update()

        # The oracle's step.
        plain_opt.zero_grad()
        _loss(plain_model, rank, step).backward()
        if step == overflow_step:
            if kind.startswith("lion") or kind == "zeroone-local":
                if overflowing:
                    plain_opt.zero_grad(set_to_none=True)  # abstains, or a local step without gradients
                plain_opt.step()
            # the Adams' communicating steps: no step on any rank
        else:
            plain_opt.step()

        where = f"rank {rank} step {step}"
        assert _bits(scaled_model) == _bits(plain_model), f"{where}: the GradScaler run differs from its oracle"
        everyone = [None] * world_size
        dist.all_gather_object(everyone, _bits(scaled_model))
        if not kind.startswith("zeroone") or kinds[-1] != "none":  # local steps leave replicas apart
            assert all(b == everyone[0] for b in everyone), f"{where}: replicas differ"
    assert _bits(scaled_model) != _bits(_model()), "nothing trained"
    if kind.startswith("zeroone"):
        assert kinds[overflow_step] == ("1bit" if kind == "zeroone" else "none"), kinds
    if kind in ("onebit", "zeroone"):
        assert scaled_opt.param_groups[0]["step"] == STEPS - 1  # the overflowed step counted nowhere
    elif kind == "zeroone-local":
        assert scaled_opt.param_groups[0]["step"] == STEPS  # taken without gradients: schedules stay paired
    dist.destroy_process_group()


@pytest.mark.parametrize("unscale_first", [False, True], ids=["scaled", "unscaled-first"])
@pytest.mark.parametrize("kind", ["lion-vote", "lion-global", "onebit", "zeroone", "zeroone-local"])
def test_an_overflow_on_one_rank_keeps_the_ranks_steps_paired(kind, unscale_first):
    harness.run(_worker, 2, kind, unscale_first)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("kind", ["lion-vote", "onebit", "zeroone-local"])
def test_an_overflow_on_one_rank_keeps_the_ranks_steps_paired_on_cuda(kind):
    """The same on CUDA parameters under GradScaler("cuda"): found_inf is a CUDA tensor, the unscaling
    runs GradScaler's CUDA kernel, and the fused CUDA steps take the result."""
    harness.run(_worker, 2, kind, False, "cuda", deadline_s=300)


def test_a_world_of_one_skips_an_overflowed_step_and_unscales_the_others():
    import pride

    model, plain = _model(), _model()
    opt = pride.optim.OneBitAdam(model.parameters(), lr=1e-2, freeze_step=2)
    plain_opt = pride.optim.OneBitAdam(plain.parameters(), lr=1e-2, freeze_step=2)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 8)
    for step in range(5):
        opt.zero_grad()
        scaler.scale(_loss(model, 0, step)).backward()
        if step == 2:
            next(model.parameters()).grad[0, 0] = float("nan")
        scaler.step(opt)
        scaler.update()
        if step != 2:
            plain_opt.zero_grad()
            _loss(plain, 0, step).backward()
            plain_opt.step()
        assert _bits(model) == _bits(plain), f"step {step}"
    assert scaler.get_scale() == 2.0 ** 7  # the overflow backed the scale off, as for any optimizer


def test_an_optimizer_without_gradients_under_a_grad_scaler():
    # Two optimizers under one GradScaler, one of whose parameters got no gradient: GradScaler hands it
    # found_inf as the int 0 (the sum of no per-device checks), as torch's fused AdamW accepts.
    import pride

    head = torch.nn.Linear(4, 1)
    unused = torch.nn.Linear(4, 1)
    start = [p.detach().clone() for p in unused.parameters()]
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 4)
    for make in (lambda ps: pride.optim.DistributedLion(ps, lr=0.1), lambda ps: pride.optim.OneBitAdam(ps, lr=0.1),
                 lambda ps: pride.optim.ZeroOneAdam(ps, lr=0.1)):
        opts = [torch.optim.SGD(head.parameters(), lr=0.1), make(unused.parameters())]
        for _ in range(2):
            for opt in opts:
                opt.zero_grad()
            scaler.scale(head(torch.ones(2, 4)).sum()).backward()
            for opt in opts:
                scaler.step(opt)
            scaler.update()
        assert all(torch.equal(p, s) for p, s in zip(unused.parameters(), start))


def test_float16_gradients_are_refused_where_they_would_be_unscaled():
    import pride

    for make in (lambda ps: pride.optim.DistributedLion(ps, lr=0.1), lambda ps: pride.optim.OneBitAdam(ps, lr=0.1)):
        p = torch.nn.Parameter(torch.ones(4, dtype=torch.float16))
        opt = make([p])
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 4)
        scaler.scale((p.float() * 1.0).sum()).backward()  # gradients of 16 (ones, scaled), in float16
        with pytest.raises(ValueError, match="FP16 gradients"):
            scaler.step(opt)
        assert torch.equal(p, torch.ones(4, dtype=torch.float16))
