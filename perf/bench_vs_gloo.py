"""pride vs torch's Gloo in one job, side by side (SPEC §5, issue targets).

Every rank joins one pride group (the default group) and one Gloo group over the same ranks, then
times, on the same fp32 tensor and alternating in the same loop so that machine noise hits both:
  gloo   all_reduce (fp32 SUM)
  pride  all_reduce (fp32 SUM)
  pride  sign_allreduce (mode="vote", algorithm from the cost model or PRIDE_ALGO)
and reports medians and ratios. Each time runs from a barrier to a barrier after the call (the slowest
rank decides). The Gloo barrier itself costs milliseconds on rate-limited links (a median of 4.9 ms in
one run at 4 x 1 Gbit/s in the netns testbed), which a 50 ms call feels and an 850 ms one does not, so
the report also gives, per case, the median over the iterations of the slowest rank's own call time
(from its return from the first barrier to its call's return, as the C++ perf tools time it), and the
ratios of those.
Launches its own ranks (no launcher needed):

    python perf/bench_vs_gloo.py --ranks 4 --log2-numel 24 --iters 7
"""

import argparse
import json
import sys
import time

import torch
import torch.distributed as dist

from bench_common import (ENV_HELP, init_pride_group, launch, parse_args, placement, print_side_by_side,
                          side_by_side_result, slowest_own_medians, time_alternating)


def timed(fn, barrier, own=None):
    """Barrier to barrier around fn (seconds); fn's own time on this rank is appended to `own`."""
    barrier()
    start = time.perf_counter()
    fn()
    if own is not None:
        own.append(time.perf_counter() - start)
    barrier()  # the slowest rank decides: a collective is done when every rank has its result
    return time.perf_counter() - start


def worker(rank, args, store_path, out_path):
    import pride

    init_pride_group(rank, args.ranks, store_path)
    gloo = dist.new_group(backend="gloo")
    n = 1 << args.log2_numel
    g = torch.Generator().manual_seed(rank)
    source = torch.randn(n, generator=g)
    work = source.clone()

    def barrier():
        dist.barrier(group=gloo)

    cases = {
        "gloo all_reduce fp32": lambda: dist.all_reduce(work, group=gloo),
        "pride all_reduce fp32": lambda: dist.all_reduce(work),
        "pride sign_allreduce": lambda: pride.sign_allreduce(work, mode="vote"),
    }
    own = {name: [] for name in cases}
    own_of = {id(fn): own[name] for name, fn in cases.items()}
    times = time_alternating(cases, lambda fn: timed(fn, barrier, own_of[id(fn)]), lambda: work.copy_(source),
                             args.warmup, args.iters, progress=rank == 0)
    slowest_own = slowest_own_medians(own, args.warmup, gloo)
    # results must agree: pride's fp32 sum equals Gloo's up to summation order
    a, b = source.clone(), source.clone()
    dist.all_reduce(a, group=gloo)
    dist.all_reduce(b)
    assert torch.allclose(a, b, rtol=1e-4, atol=1e-4), "pride and Gloo fp32 sums differ"
    pride.reset_stats()
    pride.sign_allreduce(source.clone())
    dist.barrier(group=gloo)
    sign_stats = pride.stats()
    if rank == 0:
        result = side_by_side_result(args.ranks, n, times, sign_stats, median_slowest_own_s=slowest_own)
        with open(out_path, "w") as f:
            json.dump(result, f)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=4, help="processes on this host (default 4)")
    parser.add_argument("--log2-numel", type=int, default=24, help="tensor size as a power of two (default 24)")
    parser.add_argument("--iters", type=int, default=7, help="timed iterations per case (default 7)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed iterations first (default 1)")
    parser.add_argument("--json", help="also write the result here")
    parser.add_argument("--env", action="store_true", help=ENV_HELP)
    return launch(worker, parse_args(parser), report)


def report(args, result):
    where = placement(args)
    print(f"# {args.ranks} ranks ({where}), {result['numel']} fp32 elements "
          f"({result['numel'] * 4 / 2**20:.0f} MiB), median of {args.iters} (min in brackets)")
    print_side_by_side(result, "gloo all_reduce fp32", "vs gloo")
    own = result["median_slowest_own_s"]
    base = own["gloo all_reduce fp32"]
    print("# the slowest rank's own call, no trailing barrier (median): " +
          ", ".join(f"{name} {t * 1e3:.2f} ms ({base / t:.2f}x)" for name, t in own.items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
