"""pride's sign-allreduce over NCCL against NCCL's own fp32 allreduce of the same CUDA tensor, side by side
in one job (the target: at least 12x at 4 ranks and 2^26 elements; docs/performance.md, "GPU").

Every rank joins one pride group (the default group, its CUDA tensors over NCCL) and one plain torch
"nccl" group over the same ranks, then times, alternating in one loop so that noise hits every case:
  nccl   all_reduce fp32 SUM          (torch's ProcessGroupNCCL)
  pride  all_reduce fp32 SUM          (pride's NCCL transport)
  pride  sign_allreduce vote binary   (the packed bits over NCCL: direct, or PRIDE_ALGO)
Each case is timed from a host barrier to the last rank's GPU being done (torch.cuda.synchronize, then a
barrier), and the medians and ratios are printed. When ranks outnumber GPUs they share them; NCCL then
needs each rank to be a host of its own (NCCL_HOSTID, set here) and moves the bytes over sockets.

    python perf/bench_vs_nccl.py --ranks 4 --log2-numel 26 --iters 7

With -b/-e/-f (nccl-tests' flags: smallest and largest size in bytes, K/M/G suffixes, and the factor
between sizes) it sweeps sizes instead and prints nccl-tests-style rows, one per size and case:
    python perf/bench_vs_nccl.py --ranks 4 -b 4K -e 256M -f 4
The sweep's inputs are small integers in fp32, so every summation order is exact, and #wrong counts the
elements, over all ranks, that differ from an oracle every rank computes on the host from every rank's
regenerated input (the int sum for the fp32 allreduces, the sign of the int sum of the binary votes for
sign_allreduce). time = median over --iters, slowest rank (barrier to barrier); algbw = size / time;
busbw = nccl-tests' allreduce formula (algbw · 2(N−1)/N) for the fp32 cases, and for sign_allreduce the
packed bytes rank 0 sent / time (so ~32/2.25 below its algbw by design); bits/elem = what rank 0 sent.
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist

from bench_common import init_pride_group, launch, parse_args, print_side_by_side, side_by_side_result, time_alternating


# pride.stats() keys under which sign-allreduce's algorithms count their bytes.
SIGN_ALGORITHMS = ("direct", "ring", "tree", "allgather", "hier", "nccl_direct", "nccl_allgather")


def side_by_side_cases(work, nccl):
    """The three cases, in place on `work`: NCCL's fp32 allreduce, pride's, and pride's sign-allreduce."""
    import pride

    return {
        "nccl all_reduce fp32": lambda: dist.all_reduce(work, group=nccl),
        "pride all_reduce fp32": lambda: dist.all_reduce(work),
        "pride sign_allreduce": lambda: pride.sign_allreduce(work, mode="vote"),
    }


def parse_bytes(text):
    """'4', '64K', '256M', '1G' -> bytes (powers of 1024, as nccl-tests reads them)."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper()
    scale = units.get(text[-1:], 1)
    digits = text[:-1] if text[-1:] in units else text
    if not digits.isdigit() or int(digits) == 0:
        raise argparse.ArgumentTypeError(f"expected a size in bytes such as 4, 64K, 256M or 1G, got {text!r}")
    return int(digits) * scale


def sweep_sizes(args):
    """Element counts of fp32 tensors from -b to -e bytes, each -f times the last."""
    sizes, b = [], args.minbytes
    while b <= args.maxbytes:
        sizes.append(max(1, b // 4))
        b *= args.stepfactor
    return sorted(set(sizes))


def sweep_input(rank, n, size_index):
    """Rank `rank`'s input for one size of the sweep: small integers, so sums are exact in any order."""
    g = torch.Generator().manual_seed(1000 * size_index + rank)
    return torch.randint(-8, 9, (n,), generator=g, dtype=torch.float32)


def sweep(rank, args, device, nccl, host, timed):
    """The nccl-tests-style rows (see the module's doc), on rank 0; None on the others."""
    import pride

    rows = []
    for index, n in enumerate(sweep_sizes(args)):
        source = sweep_input(rank, n, index).to(device)
        work = source.clone()
        cases = side_by_side_cases(work, nccl)
        times = time_alternating(cases, timed, lambda: work.copy_(source), args.warmup, args.iters)
        inputs = [sweep_input(r, n, index) for r in range(args.ranks)]
        exact = torch.stack(inputs).sum(0)
        votes = torch.stack([torch.where(x > 0, 1.0, -1.0) for x in inputs]).sum(0)
        wrong = {}
        for name, fn in cases.items():
            work.copy_(source)
            pride.reset_stats()
            fn()
            wanted = torch.sign(votes) if "sign" in name else exact
            wrong[name] = torch.tensor([int((work.cpu() != wanted).sum())])
            if "sign" in name:  # what the algorithm sent, not the call's fingerprint check
                sent = {k: v["bytes_sent"] for k, v in pride.stats()["per_algorithm"].items()
                        if k in SIGN_ALGORITHMS and v["bytes_sent"]}
        for count in wrong.values():
            dist.all_reduce(count, group=host)
        if rank == 0:
            import statistics

            for name, t in times.items():
                rows.append(dict(name=name, numel=n, time_s=statistics.median(t), wrong=int(wrong[name]),
                                 sign_bytes_sent=sum(sent.values()) if "sign" in name else None,
                                 algorithms=list(sent) if "sign" in name
                                 else ["nccl" if name.startswith("nccl") else "pride"]))
            print(f"# size {n * 4} bytes done", file=sys.stderr, flush=True)
    return rows if rank == 0 else None


def print_sweep(args, result):
    ranks = result["ranks"]
    print(f"# {ranks} ranks on {result['gpus']} GPU(s) ({result['device']}, NCCL {result['nccl']}), fp32, "
          f"median of {args.iters} after {args.warmup}")
    print(f"#{'size':>12} {'count':>11} {'type':>6} {'case':>22} {'algo':>15} {'time(us)':>10} {'algbw(GB/s)':>11} "
          f"{'busbw(GB/s)':>11} {'vs nccl':>8} {'bits/elem':>9} {'#wrong':>7}")
    baseline = {r["numel"]: r["time_s"] for r in result["rows"] if r["name"].startswith("nccl")}
    for r in result["rows"]:
        size, t = r["numel"] * 4, r["time_s"]
        if r["sign_bytes_sent"] is not None:
            busbw, bits = r["sign_bytes_sent"] / t / 1e9, f"{r['sign_bytes_sent'] * 8 / r['numel']:.3f}"
        else:
            busbw, bits = size / t / 1e9 * 2 * (ranks - 1) / ranks, "-"
        print(f" {size:>12} {r['numel']:>11} {'float':>6} {r['name']:>22} {','.join(r['algorithms']):>15} "
              f"{t * 1e6:>10.1f} {size / t / 1e9:>11.3f} {busbw:>11.3f} {baseline[r['numel']] / t:>7.2f}x {bits:>9} "
              f"{r['wrong']:>7}")
    bad = sum(r["wrong"] for r in result["rows"])
    print(f"# Out of bounds values : {bad} {'OK' if bad == 0 else 'FAILED'}")
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(result) + "\n")
    return 0 if bad == 0 else 1


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

    def timed(fn):
        torch.cuda.synchronize()
        dist.barrier(group=host)
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        dist.barrier(group=host)  # the slowest rank decides
        return time.perf_counter() - start

    if args.minbytes is not None:
        rows = sweep(rank, args, device, nccl, host, timed)
        if rank == 0:
            with open(out_path, "w") as f:
                json.dump(dict(ranks=args.ranks, gpus=gpus, device=torch.cuda.get_device_name(device),
                               nccl=".".join(map(str, torch.cuda.nccl.version())), rows=rows), f)
        dist.barrier(group=host)
        dist.destroy_process_group()
        return
    n = 1 << args.log2_numel
    g = torch.Generator().manual_seed(rank)
    source = torch.randn(n, generator=g).to(device)
    work = source.clone()
    cases = side_by_side_cases(work, nccl)
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
                                     nccl=".".join(map(str, torch.cuda.nccl.version())),
                                     # PRIDE_ALGO, PRIDE_RESULT_CODING ...: which run a line is
                                     settings={k: v for k, v in os.environ.items() if k.startswith("PRIDE_")})
        with open(out_path, "w") as f:
            json.dump(result, f)
    dist.destroy_process_group()


def report(args, result):
    if "rows" in result:
        return print_sweep(args, result)
    print(f"# {args.ranks} ranks on {result['gpus']} GPU(s) ({result['device']}, NCCL {result['nccl']}), "
          f"{result['numel']} fp32 elements ({result['numel'] * 4 / 2**20:.0f} MiB), median of {args.iters} "
          f"(min in brackets)")
    if result.get("settings"):
        print("# settings: " + " ".join(f"{k}={v}" for k, v in sorted(result["settings"].items())))
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
    parser.add_argument("-b", "--minbytes", type=parse_bytes, help="sweep: smallest size in bytes (e.g. 4K)")
    parser.add_argument("-e", "--maxbytes", type=parse_bytes, help="sweep: largest size in bytes (e.g. 256M)")
    parser.add_argument("-f", "--stepfactor", type=int, default=4, help="sweep: factor between sizes (default 4)")
    parser.add_argument("--json", help="also append the result (one JSON line) to this file")
    args = parse_args(parser)
    if (args.minbytes is None) != (args.maxbytes is None):
        parser.error("a sweep needs both -b and -e")
    if args.minbytes is not None and (args.minbytes < 4 or args.maxbytes < args.minbytes or args.stepfactor < 2):
        parser.error("a sweep needs 4 <= -b <= -e (bytes of fp32 elements) and -f >= 2")
    if not torch.cuda.is_available():
        parser.error("needs a CUDA device")
    args.env = False
    return launch(worker, args, report)


if __name__ == "__main__":
    sys.exit(main())
