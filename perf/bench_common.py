"""What the Python benchmarks in perf/ share: how they start their ranks, and a model-like set of
parameter sizes with the plain PyTorch Lion step they are compared against. Imported by the
scripts next to it (a script's own directory is on sys.path)."""

import json
import os
import sys
import tempfile
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

ENV_HELP = ("be one rank of a job started by a launcher (env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), "
            "e.g. one per network namespace; rank 0 prints the table")


def init_pride_group(rank, ranks, store_path):
    """Joins the default group with the pride backend: through the launcher's environment when
    store_path is None, else through a FileStore that launch() made.

    Each rank computes with one thread unless OMP_NUM_THREADS says otherwise, as under torchrun (which
    sets it to 1 for several ranks per host) and in the demo. The ranks of these benchmarks share one
    host's cores; with torch's default of a thread per core each, the threads of 4 ranks on 2 cores
    wait on each other (a 2^16-parameter Adam step measured 55 ms instead of 1.8)."""
    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)
    if store_path is None:
        dist.init_process_group("pride", timeout=timedelta(minutes=10))
    else:
        store = dist.FileStore(store_path, ranks)
        dist.init_process_group("pride", store=store, rank=rank, world_size=ranks, timeout=timedelta(minutes=10))


def slowest_own_medians(own, warmup, group):
    """Per case: the median over the timed iterations of the largest own time among the ranks: a
    step or a call is done when the slowest rank has its result, timed on each rank without the
    trailing barrier (which costs milliseconds on rate-limited links)."""
    import statistics

    out = {}
    for name, times in own.items():
        mine = torch.tensor(times[warmup:], dtype=torch.float64)
        every = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
        dist.all_gather(every, mine, group=group)
        out[name] = statistics.median(torch.stack(every).max(dim=0).values.tolist())
    return out


def parse_args(parser):
    """parser.parse_args(), then the checks every benchmark's common options need, as usage errors:
    --ranks, --iters >= 1, --warmup >= 0, --log2-numel in [0, 34], and with --env the launcher's
    variables (init_process_group's env:// needs all four)."""
    args = parser.parse_args()
    for name, low in (("ranks", 1), ("iters", 1), ("steps", 1), ("warmup", 0)):
        value = getattr(args, name, None)
        if value is not None and value < low:
            parser.error(f"--{name} must be at least {low}, got {value}")
    log2 = getattr(args, "log2_numel", None)
    if log2 is not None and not 0 <= log2 <= 34:
        parser.error(f"--log2-numel must be in [0, 34], got {log2}")
    if getattr(args, "env", False):
        missing = [v for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if v not in os.environ]
        if missing:
            parser.error(f"--env: {', '.join(missing)} not set; start each rank with a launcher (torchrun, "
                         "scripts/netns_run.sh), or drop --env to spawn --ranks processes here")
    return args


def launch(worker, args, report):
    """Runs worker(rank, args, store_path, out_path) on every rank, then report(args, result) on rank 0
    with the JSON that rank 0's worker wrote to out_path. With args.env this process is one rank of a
    launcher's job; otherwise it spawns args.ranks processes on this host."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        if args.env:
            args.ranks = int(os.environ["WORLD_SIZE"])
            rank = int(os.environ["RANK"])
            worker(rank, args, None, out)
            if rank != 0:
                return 0
        else:
            mp.start_processes(worker, args=(args, os.path.join(tmp, "store"), out), nprocs=args.ranks,
                               start_method="spawn")
        with open(out) as f:
            result = json.load(f)
    return report(args, result)


def placement(args):
    """Where the ranks ran, for a report's header: the launcher's ranks per host with --env."""
    if not args.env:
        return "on one host"
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    return f"{local} rank{'s' if local > 1 else ''} per launcher-made host"


def time_alternating(cases, timed, reset, warmup, iters, progress=False):
    """Times every case of `cases` (name -> fn) once per iteration, alternating in one loop so that
    machine noise hits them all alike: reset() before each, timed(fn) measures it (seconds). Returns
    name -> the times of the iterations after `warmup`. `progress` prints each iteration to stderr."""
    import sys

    times = {name: [] for name in cases}
    for it in range(warmup + iters):
        if progress:
            print(f"# iteration {it + 1}/{warmup + iters}{' (warm-up)' if it < warmup else ''}", file=sys.stderr,
                  flush=True)
        for name, fn in cases.items():
            reset()
            t = timed(fn)
            if it >= warmup:
                times[name].append(t)
    return times


def side_by_side_result(ranks, numel, times, sign_stats, **extra):
    """What a side-by-side benchmark's rank 0 writes: medians and minima of each case's times (seconds),
    and the sign-allreduce algorithms that sent bytes with rank 0's total."""
    import statistics

    return {
        "ranks": ranks, "numel": numel, **extra,
        "median_s": {k: statistics.median(v) for k, v in times.items()},
        "min_s": {k: min(v) for k, v in times.items()},
        "sign_algorithms": {k: v for k, v in sign_stats["per_algorithm"].items() if v["bytes_sent"]},
        "sign_bytes_sent_rank0": sign_stats["bytes_sent"],
    }


def print_side_by_side(result, baseline, label):
    """One row per case: median time [min], and the baseline's median divided by the case's."""
    med = result["median_s"]
    print(f"{'case':<24} {'time (ms)':>18} {label:>9}")
    for name, t in med.items():
        print(f"{name:<24} {t * 1e3:>9.2f} [{result['min_s'][name] * 1e3:>6.2f}] {med[baseline] / t:>8.2f}x")
    print(f"# sign_allreduce algorithm(s): {', '.join(result['sign_algorithms'])}; rank 0 sent "
          f"{result['sign_bytes_sent_rank0'] * 8 / result['numel']:.3f} bits/element")


def model_like_sizes(total):
    """Sizes of tensors adding up to `total` elements, like a transformer's weights and biases."""
    sizes, left, k = [], total, 0
    while left > 0:
        s = min(left, [1 << 20, 3 * 1 << 18, 4096, 1 << 16, 768][k % 5])
        sizes.append(s)
        left -= s
        k += 1
    return sizes


def foreach_lion(params, grads, exp_avgs, lr, betas, wd):
    """One Lion step in plain PyTorch, the fastest way: torch._foreach_* ops, no per-parameter loop."""
    b1, b2 = betas
    torch._foreach_mul_(params, 1 - lr * wd)
    updates = torch._foreach_mul(exp_avgs, b1)
    torch._foreach_add_(updates, grads, alpha=1 - b1)
    torch._foreach_sign_(updates)
    torch._foreach_add_(params, updates, alpha=-lr)
    torch._foreach_mul_(exp_avgs, b2)
    torch._foreach_add_(exp_avgs, grads, alpha=1 - b2)


def run_optimizer_configs(rank, configs, make_optimizer, step_kind, averaged, numel, steps):
    """Every config of `configs` (names) runs `steps` optimizer steps on the same parameters (a few tensors
    of `numel` float32 elements in all), each rank with its own random gradients. Configs in `averaged`
    get their gradients averaged by a float32 allreduce first (the DDP baseline); the others communicate
    themselves. step_kind(config, opt, step) names what a step sends, before it runs. Bytes come from
    pride.stats(); a round is a step on which anything was communicated. The times per step leave the
    first step out (reported alone): it also pays one-time set-up, e.g. DistributedLion's search for a DDP
    model holding its parameters, ~0.1 s. Returns, on rank 0, the configs' results averaged over the
    ranks (None on the others)."""
    import pride

    world = dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    sizes = [numel // 4, numel // 4, numel - 2 * (numel // 4)]  # a few tensors, as in a model
    results = {}
    for config in configs:
        torch.manual_seed(0)
        params = [torch.nn.Parameter(torch.randn(n) * 0.02) for n in sizes]
        opt = make_optimizer(config, params)
        gen = torch.Generator().manual_seed(rank)
        rounds, step_s, by_kind = 0, [], {}
        dist.barrier()
        pride.reset_stats()
        for step in range(steps):
            for p in params:
                p.grad = torch.randn(p.shape, generator=gen)
            kind = step_kind(config, opt, step)
            # Every rank starts its step together: without this, a step's collective also waited for
            # slower ranks still drawing their random gradients (4 ranks on 2 cores drift apart). A Gloo
            # barrier, so that pride's counts of bytes and rounds are the optimizer's alone.
            dist.barrier(group=gloo)
            before = pride.stats()["collectives"]
            start = time.perf_counter()
            if config in averaged:
                flat = torch.cat([p.grad for p in params])
                dist.all_reduce(flat)
                flat.div_(world)
                for p, g in zip(params, flat.split(sizes)):
                    p.grad.copy_(g)
            opt.step()
            step_s.append(time.perf_counter() - start)
            if step > 0:
                by_kind.setdefault(kind, []).append(step_s[-1])
            rounds += pride.stats()["collectives"] > before
            if rank == 0 and (step + 1) % max(1, steps // 10) == 0:
                print(f"# {config}: step {step + 1}/{steps}", file=sys.stderr, flush=True)
        results[config] = {"bytes_sent": pride.stats()["bytes_sent"], "rounds": rounds,
                           "first_step_ms": 1e3 * step_s[0], "ms_per_step": 1e3 * sum(step_s[1:]) / len(step_s[1:]),
                           "ms_by_kind": {k: 1e3 * sum(v) / len(v) for k, v in by_kind.items()},
                           "steps_by_kind": {k: len(v) for k, v in by_kind.items()}}
    everyone = [None] * world
    dist.all_gather_object(everyone, results)
    if rank != 0:
        return None
    return {c: {"bytes_sent": sum(r[c]["bytes_sent"] for r in everyone) / world,
                "rounds": everyone[0][c]["rounds"],
                "first_step_ms": sum(r[c]["first_step_ms"] for r in everyone) / world,
                "ms_per_step": sum(r[c]["ms_per_step"] for r in everyone) / world,
                "ms_by_kind": {k: sum(r[c]["ms_by_kind"][k] for r in everyone) / world
                               for k in everyone[0][c]["ms_by_kind"]},
                "steps_by_kind": everyone[0][c]["steps_by_kind"]} for c in configs}


def print_optimizer_table(configs, kinds, numel, steps):
    """The table of run_optimizer_configs' result (`configs`: name -> result), one row per config, the
    kinds of step in the order of `kinds`."""
    print("| optimizer | MB sent | bytes/parameter/step | rounds | first step ms | ms/step after it | "
          "ms/step by kind (steps) |")
    print("|---|---|---|---|---|---|---|")
    for name, r in configs.items():
        by_kind = ", ".join(f"{k} {r['ms_by_kind'][k]:.2f} ({r['steps_by_kind'][k]})" for k in kinds
                            if k in r["ms_by_kind"])
        print(f"| {name} | {r['bytes_sent'] / 1e6:.1f} | {r['bytes_sent'] / numel / steps:.3f} | "
              f"{r['rounds']} | {r['first_step_ms']:.1f} | {r['ms_per_step']:.2f} | {by_kind} |")


def optimizer_worker(rank, args, store_path, out_path, configs, make_optimizer, step_kind, averaged):
    """One rank of an optimizer benchmark (bench_onebit_adam.py, bench_lion_cub.py): joins the group, runs
    run_optimizer_configs with make_optimizer(config, params, args), and on rank 0 writes what report()
    reads."""
    import pride  # noqa: F401 (registers the backend)

    init_pride_group(rank, args.ranks, store_path)
    world = dist.get_world_size()
    combined = run_optimizer_configs(rank, configs, lambda config, params: make_optimizer(config, params, args),
                                     step_kind, averaged, args.numel, args.steps)
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump({"world": world, "configs": combined}, f)
    dist.destroy_process_group()
