"""Communication volume, rounds and step time of Adam, 1-bit Adam and 0/1 Adam over pride.

Every rank runs the same number of optimizer steps on the same parameters with its own random
gradients. Adam (torch.optim.AdamW) gets its gradients averaged by a float32 allreduce each step (the
DDP baseline); pride.optim.OneBitAdam and ZeroOneAdam communicate themselves. The bytes each rank
sends come from pride.stats(); a "round" is a step on which the optimizer communicated at all. Rank 0
prints the table (mean step time, and per kind of step: float32 averaging, 1-bit, local) and the papers'
claims next to the measured ratios:

  1-bit Adam: up to 5x less volume than Adam (Tang et al. 2021);
  0/1 Adam:  up to 87% less volume and 54% fewer rounds than 1-bit Adam (Lu et al. 2023).

The schedules default to fractions of --steps, since a benchmark cannot run the papers' 100k+ steps:
1-bit Adam warms up for 15% of the steps (the fraction behind DeepSpeed's 5x figure); 0/1 Adam freezes
its variance at the same step and doubles its local-step interval every --local-step-scaler steps.

    python perf/bench_onebit_adam.py --ranks 4 --steps 400
    scripts/netns_run.sh -n 4 -r 1gbit -- .venv/bin/python perf/bench_onebit_adam.py --env
"""

import argparse
import json
import sys

import torch

from bench_common import ENV_HELP, launch, parse_args, optimizer_worker, print_optimizer_table

CONFIGS = ("Adam", "1-bit Adam", "0/1 Adam")
# A step's kind: full = float32 gradients averaged (Adam; the compressed optimizers' warm-up and
# variance steps), 1bit = the compressed allreduce, none = a local step that sends nothing.
KINDS = ("full", "1bit", "none")


def make_optimizer(config, params, args):
    import pride

    freeze = max(1, round(args.warmup_fraction * args.steps))
    if config == "Adam":
        return torch.optim.AdamW(params, lr=1e-3, foreach=False)
    if config == "1-bit Adam":
        return pride.optim.OneBitAdam(params, lr=1e-3, freeze_step=freeze)
    return pride.optim.ZeroOneAdam(params, lr=1e-3, var_freeze_step=freeze, var_update_scaler=args.var_update_scaler,
                                   local_step_scaler=args.local_step_scaler, local_step_clipper=args.local_step_clipper)


def step_kind(config, opt, step):
    """What step `step` (0-based) of `config` sends: "full" (float32), "1bit" or "none" (a local step)."""
    if config == "Adam":
        return "full"
    if config == "1-bit Adam":
        return "full" if step + 1 <= opt.param_groups[0]["freeze_step"] else "1bit"
    return opt.next_step_communicates()


def worker(rank, args, store_path, out_path):
    optimizer_worker(rank, args, store_path, out_path, CONFIGS, make_optimizer, step_kind, {"Adam"})


def report(args, result):
    c = result["configs"]
    print(f"# {result['world']} ranks, {args.numel} float32 parameters, {args.steps} steps, warm-up / variance "
          f"freeze at {args.warmup_fraction:.0%}; bytes sent per rank")
    print_optimizer_table(c, KINDS, args.numel, args.steps)
    adam, onebit, zeroone = (c[n] for n in CONFIGS)
    print(f"1-bit Adam volume vs Adam: {adam['bytes_sent'] / onebit['bytes_sent']:.2f}x less (paper: up to 5x)")
    print(f"0/1 Adam volume vs 1-bit Adam: {1 - zeroone['bytes_sent'] / onebit['bytes_sent']:.0%} less "
          f"(paper: up to 87%)")
    print(f"0/1 Adam rounds vs 1-bit Adam: {1 - zeroone['rounds'] / onebit['rounds']:.0%} fewer (paper: up to 54%)")
    print(f"step time vs Adam: 1-bit Adam {adam['ms_per_step'] / onebit['ms_per_step']:.2f}x, "
          f"0/1 Adam {adam['ms_per_step'] / zeroone['ms_per_step']:.2f}x faster")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, default=4, help="processes on this host (default 4)")
    p.add_argument("--steps", type=int, default=400, help="optimizer steps per configuration (default 400)")
    p.add_argument("--numel", type=int, default=1 << 20, help="parameters in all (default 2^20)")
    p.add_argument("--warmup-fraction", type=float, default=0.15,
                   help="1-bit Adam's warm-up and 0/1 Adam's variance freeze, as a fraction of --steps (0.15)")
    p.add_argument("--var-update-scaler", type=int, default=16, help="0/1 Adam's kappa (default 16)")
    p.add_argument("--local-step-scaler", type=int, default=50,
                   help="0/1 Adam: steps between doublings of the local-step interval (default 50)")
    p.add_argument("--local-step-clipper", type=int, default=16, help="0/1 Adam: the largest interval (default 16)")
    p.add_argument("--json", help="also write the result here")
    p.add_argument("--env", action="store_true", help=ENV_HELP)
    args = parse_args(p)
    if args.steps < 2 or args.numel < 4 or not 0 < args.warmup_fraction < 1:
        p.error("--steps >= 2, --numel >= 4 and 0 < --warmup-fraction < 1")
    return launch(worker, args, report)


if __name__ == "__main__":
    sys.exit(main())
