"""A Distributed Lion training step against the same step with gradients all-reduced in fp32 (SPEC §5).

Every rank holds the same parameters (2^log2-numel fp32 elements in tensors of mixed sizes, as a
model's) and its own gradients, and times, alternating in one loop so that noise hits every case:

  D-Lion MaVo   pride.optim.DistributedLion(mode="vote").step(): local Lion update, sign-allreduce
                of the update's signs (1 bit per parameter), apply the majority vote
  G-Lion/gloo   gradients flattened, all-reduced in fp32 by torch's Gloo (what users run today),
                averaged, then torch's Lion-equivalent step (foreach ops, as perf/bench_lion_step.py)
  G-AdamW/gloo  the same fp32 all-reduce, then torch.optim.AdamW(foreach=True).step()
  local work    DistributedLion over a group of one rank each, all ranks at once: the update, pack
                and apply without the wire, the floor of the D-Lion step on this machine's cores

and reports medians and the ratio to each fp32 case, timed from a barrier to a barrier after the step;
also, per case, the median of the slowest rank's own step (from the first barrier's return to the
step's return on that rank: the trailing barrier costs milliseconds on rate-limited links). The
optimizer work runs in every case, so the difference is communication. Launches its own ranks, or
with --env is one rank of a launcher's job (one per network namespace with scripts/netns_run.sh, for
rate-limited links):

    python perf/bench_dlion_step.py --ranks 4 --log2-numel 22
    bash scripts/netns_run.sh -n 4 -r 1gbit -- .venv/bin/python perf/bench_dlion_step.py --env
"""

import argparse
import json
import statistics
import sys
import time

import torch
import torch.distributed as dist

from bench_common import (ENV_HELP, foreach_lion, init_pride_group, launch, model_like_sizes, parse_args, placement,
                          slowest_own_medians)


class Fp32AllreduceStep:
    """Gradients flattened into one buffer, all-reduced (SUM) in fp32 over `group`, averaged, then
    `update(params, grads)`: the data-parallel step of DDP-style training, one bucket."""

    def __init__(self, params, group, update):
        self.params, self.group, self.update = params, group, update
        self.flat = torch.empty(sum(p.numel() for p in params))
        self.world = dist.get_world_size(group)

    def step(self):
        views, at = [], 0
        for p in self.params:
            n = p.numel()
            self.flat[at:at + n].copy_(p.grad.view(-1))
            views.append(self.flat[at:at + n].view_as(p))
            at += n
        dist.all_reduce(self.flat, group=self.group)
        self.flat.div_(self.world)
        self.update(self.params, views)


def lion(lr, betas, wd):
    state = {}

    def update(params, grads):
        if "m" not in state:
            state["m"] = [torch.zeros_like(p) for p in params]
        with torch.no_grad():
            foreach_lion(params, grads, state["m"], lr, betas, wd)

    return update


def adamw(params, lr, wd):
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=wd, foreach=True)

    def update(params_, grads):
        for p, g in zip(params_, grads):
            p.grad = g
        opt.step()

    return update


def worker(rank, args, store_path, out_path):
    import pride
    from pride.optim import DistributedLion

    init_pride_group(rank, args.ranks, store_path)
    gloo = dist.new_group(backend="gloo")
    sizes = model_like_sizes(1 << args.log2_numel)
    noise = torch.Generator().manual_seed(1000 + rank)  # each rank's own gradients

    def make_params():  # the same parameters on every rank
        return [torch.nn.Parameter(torch.randn(s, generator=torch.Generator().manual_seed(i)) * 0.02)
                for i, s in enumerate(sizes)]

    grads = [torch.randn(s, generator=noise) for s in sizes]
    cases = {}
    if "mavo" in args.cases:
        p_mavo = make_params()
        mavo = DistributedLion(p_mavo, lr=1e-4, weight_decay=0.1, mode="vote", votes=args.votes,
                               bucket_mb=args.bucket_mb)
        cases["D-Lion MaVo (pride)"] = (p_mavo, mavo.step)
    if "local" in args.cases:
        # The same optimizer over a group of this rank alone: its local work (update, pack, apply) with
        # no wire, run by all ranks at once as in the real step. The step's floor on this machine.
        alone = [dist.new_group([r]) for r in range(args.ranks)][rank]
        p_alone = make_params()
        local = DistributedLion(p_alone, lr=1e-4, weight_decay=0.1, mode="vote", votes=args.votes,
                                bucket_mb=args.bucket_mb, group=alone)
        cases["D-Lion local work only"] = (p_alone, local.step)
    if "glion" in args.cases:
        p_glion = make_params()
        cases["G-Lion (gloo fp32)"] = (p_glion, Fp32AllreduceStep(p_glion, gloo, lion(1e-4, (0.9, 0.99), 0.1)).step)
    if "adamw" in args.cases:
        p_adamw = make_params()
        cases["G-AdamW (gloo fp32)"] = (p_adamw, Fp32AllreduceStep(p_adamw, gloo, adamw(p_adamw, 1e-3, 0.01)).step)

    times = {name: [] for name in cases}
    own = {name: [] for name in cases}  # each rank's own step, without the trailing barrier
    pride.reset_stats()
    for it in range(args.warmup + args.iters):
        if rank == 0:
            print(f"# step {it + 1}/{args.warmup + args.iters}{' (warm-up)' if it < args.warmup else ''}",
                  file=sys.stderr, flush=True)
        for name, (params, step) in cases.items():
            for p, g in zip(params, grads):
                p.grad = g
            dist.barrier(group=gloo)
            start = time.perf_counter()
            step()
            own[name].append(time.perf_counter() - start)
            dist.barrier(group=gloo)  # a step is done when every rank has its parameters
            if it >= args.warmup:
                times[name].append(time.perf_counter() - start)
    # D-Lion keeps replicas identical: every rank applies the same vote.
    if "mavo" in args.cases:
        digest = torch.stack([p.detach().double().sum() for p in p_mavo]).sum().reshape(1)
        digests = [torch.zeros(1, dtype=torch.float64) for _ in range(args.ranks)]
        dist.all_gather(digests, digest, group=gloo)
        assert all(torch.equal(d, digests[0]) for d in digests), "D-Lion replicas diverged"
    slowest_own = slowest_own_medians(own, args.warmup, gloo)
    steps = args.warmup + args.iters
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump({"ranks": args.ranks, "numel": sum(sizes), "tensors": len(sizes),
                       "median_s": {k: statistics.median(v) for k, v in times.items()},
                       "min_s": {k: min(v) for k, v in times.items()},
                       "median_slowest_own_s": slowest_own,
                       "dlion_bytes_per_step": pride.stats()["bytes_sent"] / steps}, f)
    dist.destroy_process_group()


CASES = ("mavo", "local", "glion", "adamw")


def parse_cases(text):
    cases = tuple(c.strip() for c in text.split(",") if c.strip())
    unknown = [c for c in cases if c not in CASES]
    if not cases or unknown:
        raise argparse.ArgumentTypeError(f"--cases takes some of {','.join(CASES)}, not {text!r}")
    return cases


def report(args, result):
    med = result["median_s"]
    where = placement(args)
    print(f"# {result['ranks']} ranks ({where}), {result['numel']} fp32 parameters in {result['tensors']} "
          f"tensors, D-Lion votes={args.votes}, median of {args.iters} steps (min in brackets)")
    # Ratios against the D-Lion step when it ran, else against the first case.
    base_name = "D-Lion MaVo (pride)" if "D-Lion MaVo (pride)" in med else next(iter(med))
    mavo = med[base_name]
    print(f"{'step':<24} {'time (ms)':>18} {'D-Lion faster by' if base_name.startswith('D-Lion MaVo') else 'ratio':>17}")
    for name, t in med.items():
        print(f"{name:<24} {t * 1e3:>9.1f} [{result['min_s'][name] * 1e3:>6.1f}] {t / mavo:>16.2f}x")
    if "D-Lion MaVo (pride)" in med:
        print(f"# D-Lion sent {result['dlion_bytes_per_step'] * 8 / result['numel']:.3f} bits per parameter per "
              f"step (rank 0); an fp32 ring all-reduce sends {64 * (result['ranks'] - 1) / result['ranks']:.1f}")
        if "D-Lion local work only" in med:
            print(f"# the D-Lion step takes {mavo / med['D-Lion local work only']:.2f}x its ranks' local work alone")
    own = result["median_slowest_own_s"]
    base = own[base_name]
    print("# the slowest rank's own step, no trailing barrier (median): " +
          ", ".join(f"{name} {t * 1e3:.1f} ms ({t / base:.2f}x)" for name, t in own.items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=4, help="processes on this host (default 4)")
    parser.add_argument("--log2-numel", type=int, default=22, help="parameters as a power of two (default 22)")
    parser.add_argument("--iters", type=int, default=5, help="timed steps per case (default 5)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps first (default 1)")
    parser.add_argument("--votes", choices=("exact", "binary", "ternary"), default="exact",
                        help="DistributedLion's votes (default exact, the optimizer's default)")
    parser.add_argument("--bucket-mb", type=float, default=None,
                        help="DistributedLion's bucket_mb (default: its own, 16 MiB on CPU)")
    parser.add_argument("--cases", type=parse_cases, default=CASES,
                        help=f"which steps to time, comma-separated (default all: {','.join(CASES)}); "
                             "mavo alone is the step in a loop with nothing between its iterations, for profiling")
    parser.add_argument("--json", help="also write the result here")
    parser.add_argument("--env", action="store_true", help=ENV_HELP)
    return launch(worker, parse_args(parser), report)


if __name__ == "__main__":
    sys.exit(main())
