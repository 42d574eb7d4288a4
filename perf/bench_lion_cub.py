"""Communication volume, rounds and step time of Lion Cub's options against Lion and Distributed Lion.

Every rank runs the same number of optimizer steps on the same parameters with its own random
gradients (perf/bench_common.py's run_optimizer_configs, as bench_onebit_adam.py does):

  G-Lion           lion-pytorch's Lion, its gradients averaged by a float32 allreduce each step (the
                   data-parallel Lion that Lion Cub compares against);
  D-Lion MaVo      pride.optim.DistributedLion(mode="vote"): the 1-bit majority vote;
  Cub int8 sign    aggregation="int8", quantization="sign": the paper's p-bit allreduce of the signs,
                   an int8 sum (the same parameters as the vote, bit for bit);
  Cub L1 every K   quantization="l1", momenta averaged every --sync-every steps;
  Cub L1 doubling  quantization="l1", momenta averaged on the authors' doubling schedule
                   (--sync-doubling-k);
  Cub levels sign  aggregation="levels", quantization="sign": the same Δ as "Cub int8 sign" through
                   pride.level_vote (levels ±1 as two bit planes, only the sign comes back);
  Cub L1 levels every K
                   "Cub L1 every K" through pride.level_vote: the same parameters, ⌈log2(2s+1)⌉ planes
                   out and two back instead of the int8 ring.

The bytes each rank sends come from pride.stats(); a "round" is a step on which the optimizer
communicated. Rank 0 prints the table and the paper's claim next to the measured ratio: Lion Cub up to
5x faster end to end than Lion (arXiv 2411.16462v1's abstract; v2 drops the figure).

    python perf/bench_lion_cub.py --ranks 4 --steps 100
    scripts/netns_run.sh -n 4 -r 1gbit -- .venv/bin/python perf/bench_lion_cub.py --env
"""

import argparse
import json
import sys

from bench_common import ENV_HELP, launch, parse_args, optimizer_worker, print_optimizer_table

CONFIGS = ("G-Lion", "D-Lion MaVo", "Cub int8 sign", "Cub L1 every K", "Cub L1 doubling", "Cub levels sign",
           "Cub L1 levels every K")
# A step's kind: full = float32 gradients averaged, 1bit = the majority vote, int8 = the int8 sum,
# levels = the level vote; +sync = and the momenta averaged in float32.
KINDS = ("full", "1bit", "int8", "int8+sync", "levels", "levels+sync")
LR, BETAS = 1e-4, (0.9, 0.99)


def make_optimizer(config, params, args):
    import lion_pytorch
    import pride

    if config == "G-Lion":
        return lion_pytorch.Lion(params, lr=LR, betas=BETAS)
    if config == "D-Lion MaVo":
        return pride.optim.DistributedLion(params, lr=LR, betas=BETAS, mode="vote")
    if config in ("Cub int8 sign", "Cub levels sign"):
        return pride.optim.DistributedLion(params, lr=LR, betas=BETAS, aggregation=config.split()[1],
                                           quantization="sign")
    sync = (pride.optim.MomentumSync(doubling_k=args.sync_doubling_k) if config == "Cub L1 doubling"
            else pride.optim.MomentumSync(every=args.sync_every))
    aggregation = "levels" if "levels" in config else "int8"
    return pride.optim.DistributedLion(params, lr=LR, betas=BETAS, aggregation=aggregation, quantization="l1",
                                       momentum_sync=sync)


def step_kind(config, opt, step):
    """What step `step` (0-based) of `config` sends."""
    if config == "G-Lion":
        return "full"
    if config == "D-Lion MaVo":
        return "1bit"
    if opt.momentum_sync is not None and opt.momentum_sync.due(opt.steps + 1):
        return opt.aggregation + "+sync"
    return opt.aggregation


def selected(args):
    """The configs to run: --configs, G-Lion (the baseline) always first."""
    return ("G-Lion",) + tuple(c for c in CONFIGS[1:] if args.configs is None or c in args.configs)


def worker(rank, args, store_path, out_path):
    optimizer_worker(rank, args, store_path, out_path, selected(args), make_optimizer, step_kind, {"G-Lion"})


def report(args, result):
    c = result["configs"]
    print(f"# {result['world']} ranks, {args.numel} float32 parameters, {args.steps} steps, Cub L1 momenta "
          f"averaged every {args.sync_every} steps or on doubling_k={args.sync_doubling_k}; bytes sent per rank")
    print_optimizer_table(c, KINDS, args.numel, args.steps)
    lion = c["G-Lion"]
    for name in selected(args)[1:]:
        r = c[name]
        print(f"{name} vs G-Lion: {lion['bytes_sent'] / r['bytes_sent']:.2f}x less volume, "
              f"{lion['ms_per_step'] / r['ms_per_step']:.2f}x faster per step (Lion Cub's claim: up to 5x "
              f"end to end)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, default=4, help="processes on this host (default 4)")
    p.add_argument("--steps", type=int, default=200, help="optimizer steps per configuration (default 200)")
    p.add_argument("--numel", type=int, default=1 << 22, help="parameters in all (default 2^22)")
    p.add_argument("--sync-every", type=int, default=100,
                   help="Cub L1 every K: steps between momentum averages (default 100, the authors' earlier "
                        "momentum_sync_freq)")
    p.add_argument("--sync-doubling-k", type=int, default=16,
                   help="Cub L1 doubling: k of the doubling schedule, T_{j+1} = floor(T_j + 2^(j/k)) (default 16)")
    p.add_argument("--configs", type=lambda text: [c.strip() for c in text.split(",")],
                   help="comma-separated configs to run besides G-Lion, the baseline (default: all of "
                        + ", ".join(CONFIGS[1:]) + ")")
    p.add_argument("--json", help="also write the result here")
    p.add_argument("--env", action="store_true", help=ENV_HELP)
    args = parse_args(p)
    if args.steps < 2 or args.numel < 4 or args.sync_every < 1 or args.sync_doubling_k < 1:
        p.error("--steps >= 2, --numel >= 4, --sync-every >= 1 and --sync-doubling-k >= 1")
    unknown = [c for c in args.configs or [] if c not in CONFIGS]
    if unknown:
        p.error(f"--configs: unknown {', '.join(unknown)}; known: {', '.join(CONFIGS)}")
    return launch(worker, args, report)


if __name__ == "__main__":
    sys.exit(main())
