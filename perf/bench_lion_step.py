"""The fused DistributedLion step against a plain PyTorch Lion step, and against memory bandwidth.

All measured in one process, interleaved, single-threaded (torch.set_num_threads(1)) so the
comparison is kernel against kernel:
  memcpy       torch copy_ of a 64 MiB buffer: the machine's copy bandwidth right now
  plain Lion   torch._foreach_* ops (the fastest pure-PyTorch Lion: no per-parameter Python loop)
  fused        pride.optim.DistributedLion.step() in a world of one: one C++ pass packs the
               update's signs and updates the momentum, one applies the update from the bits
The fused step must read g, m, x and write m, x: 5 tensors' worth of traffic; at memcpy speed
(which reads and writes each byte once) that takes 2.5x the time of copying one tensor.

    python perf/bench_lion_step.py --log2-numel 24
"""

import argparse
import statistics
import time

import torch

import pride
from bench_common import foreach_lion, model_like_sizes, parse_args
from pride.optim import DistributedLion


def median_time(fn, iters):
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--log2-numel", type=int, default=24, help="parameters in total, log2 (default 24)")
    parser.add_argument("--iters", type=int, default=9, help="timed repetitions, median reported (default 9)")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    args = parse_args(parser)
    torch.set_num_threads(1)
    dtype = getattr(torch, args.dtype)
    n = 1 << args.log2_numel

    params = [torch.nn.Parameter(torch.randn(s).to(dtype)) for s in model_like_sizes(n)]
    grads = [torch.randn_like(p) for p in params]
    for p, g in zip(params, grads):
        p.grad = g
    fused = DistributedLion(params, lr=1e-4, weight_decay=0.01)
    plain_params = [p.detach().clone() for p in params]
    plain_m = [torch.zeros_like(p) for p in params]
    src = torch.empty(n * params[0].element_size(), dtype=torch.uint8)
    dst = torch.empty_like(src)

    cases = {
        "memcpy (1 tensor)": lambda: dst.copy_(src),
        "plain Lion (foreach)": lambda: foreach_lion(plain_params, grads, plain_m, 1e-4, (0.9, 0.99), 0.01),
        "fused DistributedLion": lambda: fused.step(),
    }
    for fn in cases.values():
        fn()  # warm up (allocates the momentum)
    t = {name: [] for name in cases}
    for _ in range(args.iters):  # interleaved so that noise hits every case alike
        for name, fn in cases.items():
            t[name].append(median_time(fn, 1))
    med = {k: statistics.median(v) for k, v in t.items()}
    ideal = 2.5 * med["memcpy (1 tensor)"]
    bytes_per_tensor = n * params[0].element_size()
    print(f"# {n} {args.dtype} parameters in {len(params)} tensors, 1 thread, kernel ISA "
          f"{pride._C.kernel_isa()}, median of {args.iters}")
    print(f"{'case':<24} {'time (ms)':>10} {'GB/s':>7}  notes")
    print(f"{'memcpy (1 tensor)':<24} {med['memcpy (1 tensor)'] * 1e3:>10.2f} "
          f"{bytes_per_tensor / med['memcpy (1 tensor)'] / 1e9:>7.2f}  bytes copied per second")
    for name in ("plain Lion (foreach)", "fused DistributedLion"):
        print(f"{name:<24} {med[name] * 1e3:>10.2f} {5 * bytes_per_tensor / med[name] / 1e9:>7.2f}  "
              f"{ideal / med[name] * 100:5.1f}% of memcpy speed for its 5 tensors of traffic")
    print(f"# fused step is {med['plain Lion (foreach)'] / med['fused DistributedLion']:.2f}x faster than the "
          f"plain PyTorch Lion step (target >= 2x)")


if __name__ == "__main__":
    main()
