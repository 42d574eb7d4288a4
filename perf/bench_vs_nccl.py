"""pride's sign-allreduce over NCCL against NCCL's own fp32 allreduce of the same CUDA tensor, side by side
in one job (issue 14's benchmark; docs/performance.md, "GPU").

Every rank joins one pride group (the default group, its CUDA tensors over NCCL) and one plain torch
"nccl" group over the same ranks, then times, alternating in one loop so that noise hits every case:
  nccl   all_reduce fp32 SUM          (torch's ProcessGroupNCCL)
  pride  all_reduce fp32 SUM          (pride's NCCL transport)
  pride  sign_allreduce vote binary   (the packed bits over NCCL: direct, or PRIDE_ALGO)
Each case is timed from a host barrier to the last rank's GPU being done (torch.cuda.synchronize, then a
barrier), and the medians and ratios are printed. When ranks outnumber GPUs they share them; NCCL then
needs each rank to be a host of its own (NCCL_HOSTID, set here) and moves the bytes over sockets.

    python perf/bench_vs_nccl.py --ranks 4 --log2-numel 26 --iters 7
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist

from bench_common import init_pride_group, launch, print_side_by_side, side_by_side_result, time_alternating


def worker(rank, args, store_path, out_path):
    gpus = torch.cuda.device_count()
    if args.ranks > gpus:
        os.environ["NCCL_HOSTID"] = f"pride-bench-host-{rank}"  # several ranks per GPU (see above)
        os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
        os.environ.setdefault("PRIDE_CUDA_TRANSPORT", "nccl")
    import pride

    device = torch.device("cuda", rank % gpus)
    torch.cuda.set_device(device)
    init_pride_group(rank, args.ranks, store_path)
    nccl = dist.new_group(backend="nccl")
    host = dist.new_group(backend="gloo")
    n = 1 << args.log2_numel
    g = torch.Generator().manual_seed(rank)
    source = torch.randn(n, generator=g).to(device)
    work = source.clone()

    def timed(fn):
        torch.cuda.synchronize()
        dist.barrier(group=host)
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        dist.barrier(group=host)  # the slowest rank decides
        return time.perf_counter() - start

    cases = {
        "nccl all_reduce fp32": lambda: dist.all_reduce(work, group=nccl),
        "pride all_reduce fp32": lambda: dist.all_reduce(work),
        "pride sign_allreduce": lambda: pride.sign_allreduce(work, mode="vote"),
    }
    times = time_alternating(cases, timed, lambda: work.copy_(source), args.warmup, args.iters, progress=rank == 0)
    # The fp32 sums agree up to summation order; the sign result equals the sign of NCCL's sum of votes.
    a, b = source.clone(), source.clone()
    dist.all_reduce(a, group=nccl)
    dist.all_reduce(b)
    assert torch.allclose(a, b, rtol=1e-4, atol=1e-4), "pride's and NCCL's fp32 sums differ"
    votes = torch.where(source > 0, 1.0, -1.0)
    dist.all_reduce(votes, group=nccl)
    signed = source.clone()
    pride.reset_stats()
    pride.sign_allreduce(signed, mode="vote")
    assert torch.equal(signed, torch.sign(votes)), "sign_allreduce over NCCL differs from NCCL's sum of votes"
    sign_stats = pride.stats()
    dist.barrier(group=host)
    if rank == 0:
        result = side_by_side_result(args.ranks, n, times, sign_stats, gpus=gpus,
                                     device=torch.cuda.get_device_name(device),
                                     nccl=".".join(map(str, torch.cuda.nccl.version())))
        with open(out_path, "w") as f:
            json.dump(result, f)
    dist.destroy_process_group()


def report(args, result):
    print(f"# {args.ranks} ranks on {result['gpus']} GPU(s) ({result['device']}, NCCL {result['nccl']}), "
          f"{result['numel']} fp32 elements ({result['numel'] * 4 / 2**20:.0f} MiB), median of {args.iters} "
          f"(min in brackets)")
    print_side_by_side(result, "nccl all_reduce fp32", "vs nccl")
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(result) + "\n")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=4, help="processes on this host (default 4)")
    parser.add_argument("--log2-numel", type=int, default=26, help="tensor size as a power of two (default 26)")
    parser.add_argument("--iters", type=int, default=7, help="timed iterations per case (default 7)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed iterations first (default 2)")
    parser.add_argument("--json", help="also append the result (one JSON line) to this file")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        parser.error("needs a CUDA device")
    args.env = False
    return launch(worker, args, report)


if __name__ == "__main__":
    sys.exit(main())
