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
    return torch.nn.functional.mse_loss(model(x), y)


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
    return b"".join(p.detach().numpy().tobytes() for p in model.parameters())


def _worker(rank, world_size, store_path, kind, unscale_first):
    harness.init_group(rank, world_size, store_path, timeout_s=20)
    scaled_model, plain_model = _model(), _model()
    scaled_opt, plain_opt = _make(kind, scaled_model.parameters()), _make(kind, plain_model.parameters())
    # growth_interval 2: the scale moves up and back down during the run (powers of two, exact).
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10, growth_interval=2)
    overflowing = rank == 0
    for step in range(STEPS):
        scaled_opt.zero_grad()
        scaler.scale(_loss(scaled_model, rank, step)).backward()
        if step == OVERFLOW_STEP and overflowing:
            next(scaled_model.parameters()).grad[0, 0] = float("inf")
        if unscale_first:
            scaler.unscale_(scaled_opt)  # what gradient clipping needs first
        scaler.step(scaled_opt)
        scaler.update()

        # The oracle's step.
        plain_opt.zero_grad()
        _loss(plain_model, rank, step).backward()
        if step == OVERFLOW_STEP:
            if kind.startswith("lion"):
                if overflowing:
                    plain_opt.zero_grad(set_to_none=True)  # abstains
                plain_opt.step()
            # the Adams: no step on any rank
        else:
            plain_opt.step()

        where = f"rank {rank} step {step}"
        assert _bits(scaled_model) == _bits(plain_model), f"{where}: the GradScaler run differs from its oracle"
        everyone = [None] * world_size
        dist.all_gather_object(everyone, _bits(scaled_model))
        if kind != "zeroone":  # 0/1 Adam's local steps leave replicas apart between synchronisations
            assert all(b == everyone[0] for b in everyone), f"{where}: replicas differ"
    assert _bits(scaled_model) != _bits(_model()), "nothing trained"
    if kind in ("onebit", "zeroone"):
        assert scaled_opt.param_groups[0]["step"] == STEPS - 1  # the overflowed step counted nowhere
    dist.destroy_process_group()


@pytest.mark.parametrize("unscale_first", [False, True], ids=["scaled", "unscaled-first"])
@pytest.mark.parametrize("kind", ["lion-vote", "lion-global", "onebit", "zeroone"])
def test_an_overflow_on_one_rank_keeps_the_ranks_steps_paired(kind, unscale_first):
    harness.run(_worker, 2, kind, unscale_first)


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
