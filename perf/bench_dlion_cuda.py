"""DistributedLion.step() on CUDA parameters, side by side with lion-pytorch's Triton Lion (SPEC §5, GPU).

Model-like sizes: --params parameters split into --tensors tensors of varied shapes. Every timed step
is bracketed by torch.cuda.synchronize(); the median over --steps steps after --warmup is reported.

  python perf/bench_dlion_cuda.py                      # N = 1: pride vs lion-pytorch (Triton), fp32
  python perf/bench_dlion_cuda.py --dtype bfloat16
  python perf/bench_dlion_cuda.py --world 4            # 4 ranks sharing the GPU, against 4 x N = 1
  python perf/bench_dlion_cuda.py --device cpu --world 2 --params 1e6   # the same steps on CPU tensors

Reports, per configuration: step ms and host ms (until step() returned: at N = 1 on CUDA the step only
queues kernels, and the device waits for the host until the first is queued), the ratio to lion-pytorch's Triton step (N = 1), the HBM floor
(5 passes over the parameters at the copy bandwidth measured in the same run), and the extra device
memory pride holds per rank (its workspace) against 1/8 of the parameter bytes plus one bucket. With
--world N > 1 it first times pride's N = 1 step in a process of its own, with the same parameters and
options, and reports the N-rank step against N times that (the target: at most 1.3), unless
--no-baseline. Then it times N such N = 1 steps in N processes at once, started together and not
communicating: what sharing the one device costs by itself (on a GPU without MPS, processes take
turns). The N-rank step against that is what communication and staging add. The barrier lines up
their starts only: the last to finish takes its final steps with fewer processes beside it, so the
slowest one's median slightly understates sharing; the rows record each process's timed window and
their overlap.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import timedelta

import torch


def shapes_for(total, tensors, seed=0):
    """--tensors sizes that add up to about --params, varied like a model's (a few large, many small)."""
    g = torch.Generator().manual_seed(seed)
    weights = torch.rand(tensors, generator=g) ** 3 + 0.01
    sizes = (weights / weights.sum() * total).long().clamp(min=1)
    return [int(s) for s in sizes]


def make_params(sizes, dtype, device, seed):
    g = torch.Generator(device=device).manual_seed(seed)
    params = [torch.nn.Parameter(torch.randn(s, device=device, dtype=torch.float32, generator=g).to(dtype)) for s in sizes]
    for p in params:
        p.grad = torch.randn(p.shape, device=device, generator=g).to(dtype)
    return params


def synchronize(device):
    if device == "cuda":
        torch.cuda.synchronize()


def time_steps(step, steps, warmup, device="cuda", start=None):
    """(median ms of `steps` calls of step() after `warmup` ones, (wall-clock start, end) of the timed
    calls, median ms until step() returned); start(), when given, is called between the warm-up and
    the timed steps (the sharing baseline's processes wait there for each other). The last figure is
    host time. At N = 1 on CUDA a step only queues kernels and returns before they run, with the device
    idle until the first is queued: the host time bounds the part of the step that no kernel speed
    removes. With a group it includes the waits for the vote."""
    for _ in range(warmup):
        step()
    synchronize(device)
    if start is not None:
        start()
    times, host = [], []
    began = time.time()  # wall clock, comparable across processes: when the timed steps ran
    for _ in range(steps):
        synchronize(device)
        t0 = time.perf_counter()
        step()
        t1 = time.perf_counter()
        synchronize(device)
        times.append((time.perf_counter() - t0) * 1e3)
        host.append((t1 - t0) * 1e3)
    return statistics.median(times), (began, time.time()), statistics.median(host)


def copy_floor_ms(total_bytes, steps=10):
    """Five passes over the parameter bytes (read p, g, m; write p, m) at the device-to-device copy rate."""
    n = 1 << 28
    a = torch.empty(n, dtype=torch.uint8, device="cuda").random_()
    b = torch.empty_like(a)
    ms, _, _ = time_steps(lambda: b.copy_(a), steps, 2)
    bandwidth = 2 * n / (ms * 1e-3)  # bytes read + written per second
    return 5 * total_bytes / bandwidth * 1e3, bandwidth / 1e9


def run_one(args, rank=0, world=1, store_path=None, out=None, start=None):
    import pride
    from pride.optim import DistributedLion
    import torch.distributed as dist

    on_cuda = args.device == "cuda"
    if on_cuda:
        torch.cuda.set_device(0)
    dtype = getattr(torch, args.dtype)
    if world > 1:
        store = dist.FileStore(store_path, world)
        dist.init_process_group("pride", store=store, rank=rank, world_size=world, timeout=timedelta(seconds=600))
    sizes = shapes_for(int(args.params), args.tensors)
    params = make_params(sizes, dtype, args.device, seed=1 + rank)
    opt = DistributedLion(params, lr=1e-4, weight_decay=0.1, mode=args.mode, votes=args.votes, bucket_mb=args.bucket_mb)
    opt.step()  # the momentum buffers exist from here on: they are Lion's state, not pride's overhead
    synchronize(args.device)
    allocated = torch.cuda.memory_allocated if on_cuda else (lambda: 0)  # device memory: CUDA only
    before = allocated()
    if on_cuda:
        torch.cuda.reset_peak_memory_stats()
    if world > 1:
        pride.reset_stats()
    pride_ms, window, pride_host_ms = time_steps(opt.step, args.steps, args.warmup, args.device, start)
    peak_growth = torch.cuda.max_memory_allocated() - before if on_cuda else 0
    if args.profile:  # every rank steps (they are collectives); rank 0 records
        profile_steps(opt.step, args.profile if rank == 0 else None, world)
    param_bytes = sum(p.numel() for p in params) * params[0].element_size()
    workspace = sum(ws.device_bytes for ws in opt._cuda_workspaces.values())
    bucket_bytes = default_bucket_mb(args) * (1 << 20)
    row = dict(rank=rank, world=world, dtype=args.dtype, params=sum(sizes), tensors=len(sizes), mode=args.mode,
               pride_ms=pride_ms, pride_host_ms=pride_host_ms, workspace_bytes=workspace, param_bytes=param_bytes,
               memory_limit_bytes=param_bytes / 8 + bucket_bytes,
               allocated_growth_bytes=allocated() - before, device=args.device, window=window,
               peak_growth_bytes=peak_growth, votes=args.votes, bucket_mb=args.bucket_mb, cuda_path=os.environ.get("PRIDE_CUDA_PATH", "auto"))
    if world > 1:
        stats = pride.stats()
        row["bytes_sent"], row["device_bytes_sent"] = stats["bytes_sent"], stats["device_bytes_sent"]
    if world == 1 and not args.no_baseline and on_cuda:
        from lion_pytorch import Lion

        ref_params = make_params(sizes, dtype, "cuda", seed=1)
        ref = Lion(ref_params, lr=1e-4, weight_decay=0.1, use_triton=True)
        row["lion_pytorch_triton_ms"], _, row["lion_pytorch_triton_host_ms"] = time_steps(ref.step, args.steps,
                                                                                           args.warmup)
        row["ratio_to_triton"] = pride_ms / row["lion_pytorch_triton_ms"]
        floor, bandwidth = copy_floor_ms(param_bytes)
        row["hbm_floor_ms"] = floor
        row["copy_GBps"] = bandwidth
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    if out is not None:
        out.put(row)
    return row


def profile_steps(step, path, world, steps=3):
    """Where a step's time goes: torch.profiler over a few steps (CPU calls of every thread, CUDA
    runtime calls and kernels); with a path (rank 0), its tables printed and its Chrome trace written
    there. The other ranks take the same steps unrecorded."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    if path is None:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        return
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    averages = prof.key_averages()
    print(f"# torch.profiler, rank 0 of {world}, {steps} steps")
    for key in ("self_cpu_time_total", "self_device_time_total"):
        try:
            print(averages.table(sort_by=key, row_limit=25, max_name_column_width=60))
        except Exception as e:  # noqa: BLE001 - a key this torch lacks
            print(f"(no table by {key}: {e})")
    prof.export_chrome_trace(path)


# How long the sharing baseline's processes wait for each other after warm-up (they start CUDA at the
# same time, so seconds apart at most); a process that died without a Python exception (a signal, the
# OOM killer) cannot abort the barrier, and this bounds the others' wait for it.
BARRIER_TIMEOUT_S = 300
# How long the parent waits for all of a stage's rows before it stops the stage's processes.
STAGE_TIMEOUT_S = 900


def _worker(args, rank, world, store_path, out, barrier=None):
    try:
        start = (lambda: barrier.wait(timeout=BARRIER_TIMEOUT_S)) if barrier is not None else None
        run_one(args, rank, world, store_path, out, start=start)
    except BaseException as e:  # noqa: BLE001 - report to the parent
        if barrier is not None:
            barrier.abort()  # the others' wait raises instead of waiting for this process
        out.put(dict(rank=rank, error=repr(e)))
        raise


def run_processes(ctx, out, args, world, ranks, store_path=None, barrier=None):
    """Rows of `ranks` processes running run_one(args, rank, world), each with the shared barrier. A
    process that exits without its row (killed, crashed) or a stage past STAGE_TIMEOUT_S ends the stage:
    the others are stopped and an error row stands for each missing one, so nothing waits forever."""
    import queue

    procs = [ctx.Process(target=_worker, args=(args, r, world, store_path, out, barrier), daemon=True)
             for r in range(ranks)]
    for p in procs:
        p.start()
    rows, deadline = [], time.monotonic() + STAGE_TIMEOUT_S
    while len(rows) < ranks:
        try:
            rows.append(out.get(timeout=1.0))
            continue
        except queue.Empty:
            pass
        reported = {r.get("rank") for r in rows}
        lost = [r for r, p in enumerate(procs) if not p.is_alive() and r not in reported]
        if lost:  # a row put just before its process exited may still be on its way: read what came
            try:
                while True:
                    rows.append(out.get(timeout=2.0))
            except queue.Empty:
                pass
            reported = {r.get("rank") for r in rows}
            lost = [r for r in lost if r not in reported]
            if not lost:
                continue
        if lost or time.monotonic() > deadline:
            for p in procs:
                if p.is_alive():
                    p.terminate()
            what = f"exited with code {procs[lost[0]].exitcode} without a result" if lost else \
                f"not done after {STAGE_TIMEOUT_S} s"
            rows += [dict(rank=r, error=f"process {r} {what}") for r in range(ranks) if r not in reported]
            break
    for p in procs:
        p.join(timeout=30)
    return rows


def default_bucket_mb(args):
    """The bucket size DistributedLion uses: --bucket-mb, or its default for the device (16 MiB on CPU)."""
    return args.bucket_mb if args.bucket_mb is not None else (1024.0 if args.device == "cuda" else 16.0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--params", type=float, default=350e6, help="parameters in total (default 350e6)")
    parser.add_argument("--tensors", type=int, default=100, help="number of parameter tensors (default 100)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                        help="parameter dtype (default float32)")
    parser.add_argument("--mode", default="vote", choices=["vote", "mean"], help="DistributedLion mode (default vote)")
    parser.add_argument("--world", type=int, default=1, help="ranks sharing the GPU (default 1)")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                        help="where the parameters live (default cuda; cpu runs the same steps on CPU tensors, "
                             "without lion-pytorch's Triton step or device memory figures)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps (default 10)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (default 3)")
    parser.add_argument("--votes", default="exact", choices=["exact", "binary", "ternary"],
                        help="DistributedLion votes (default exact)")
    parser.add_argument("--profile", metavar="TRACE.json",
                        help="after the timed steps, profile 3 steps on rank 0: print the table, write the trace")
    parser.add_argument("--bucket-mb", type=float, default=None,
                        help="DistributedLion bucket size in MiB (default: pride's, 1024 on CUDA and 16 on CPU)")
    parser.add_argument("--no-baseline", action="store_true", help="skip the baselines: lion-pytorch at N = 1, pride's own N = 1 step at N > 1")
    parser.add_argument("--cuda-path", choices=["auto", "device", "host"], default=None,
                        help="PRIDE_CUDA_PATH for the ranks: how the packed bits travel (default: the environment's)")
    parser.add_argument("--json", help="append the result rows to this file")
    args = parser.parse_args()
    if args.cuda_path is not None:
        os.environ["PRIDE_CUDA_PATH"] = args.cuda_path  # read by each rank's pride at its first collective
    if args.world < 1:
        parser.error(f"--world must be at least 1, got {args.world}")
    if args.steps < 1 or args.warmup < 0:
        parser.error(f"--steps must be at least 1 and --warmup at least 0, got {args.steps} and {args.warmup}")
    if not args.params >= 1 or args.tensors < 1 or args.params < args.tensors:
        parser.error(f"--params and --tensors must be at least 1, with a parameter per tensor at least; got "
                     f"{args.params:g} and {args.tensors}")
    if args.bucket_mb is not None and not args.bucket_mb > 0:
        parser.error(f"--bucket-mb must be positive, got {args.bucket_mb:g}")
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("bench_dlion_cuda: no CUDA device (--device cpu runs the steps on CPU tensors)")
    if args.device == "cpu" and args.profile:
        parser.error("--profile records CUDA kernels: it needs --device cuda")
    single_ms = shared_ms = shared_overlap_s = None
    if args.world == 1:
        rows = [run_one(args)]
    else:
        ctx = torch.multiprocessing.get_context("spawn")
        out = ctx.Queue()
        if not args.no_baseline:
            # pride's N = 1 step, alone on the device, before the group starts; then N of them at once,
            # not communicating, timed from a common start (the others wait at the barrier after warm-up).
            alone = argparse.Namespace(**dict(vars(args), world=1, no_baseline=True, profile=None))
            for ranks in (1, args.world):
                barrier = ctx.Barrier(ranks) if ranks > 1 else None
                baseline = run_processes(ctx, out, alone, 1, ranks, barrier=barrier)
                failed = [r["error"] for r in baseline if "error" in r]
                if failed:
                    what = "the N = 1 baseline" if ranks == 1 else f"the {ranks} concurrent N = 1 steps"
                    sys.exit(f"bench_dlion_cuda: {what} failed: {failed}")
                if ranks == 1:
                    single_ms = baseline[0]["pride_ms"]
                else:
                    shared_ms = max(r["pride_ms"] for r in baseline)
                    # How long all of them were in their timed steps together (the barrier's point).
                    shared_overlap_s = min(r["window"][1] for r in baseline) - max(r["window"][0] for r in baseline)
        with tempfile.TemporaryDirectory() as tmp:
            rows = run_processes(ctx, out, args, args.world, args.world, store_path=os.path.join(tmp, "store"))
        errors = [r for r in rows if "error" in r]
        if errors:
            sys.exit(f"bench_dlion_cuda: ranks failed: {errors}")
    rows.sort(key=lambda r: r["rank"])
    slowest = max(r["pride_ms"] for r in rows)
    r0 = rows[0]
    where = torch.cuda.get_device_name() if args.device == "cuda" else "the CPU"
    print(f"# DistributedLion.step(), {r0['params'] / 1e6:.0f}M {r0['dtype']} parameters in {r0['tensors']} tensors, "
          f"mode {r0['mode']}, votes {r0['votes']}, buckets of {default_bucket_mb(args):g} MiB, {args.world} rank(s) on {where}")
    print(f"pride step: {slowest:.3f} ms (slowest rank; median of {args.steps} steps); until step() returned: "
          f"{max(r['pride_host_ms'] for r in rows):.3f} ms (host time)")
    if single_ms is not None:
        ratio = slowest / (args.world * single_ms)
        for r in rows:
            r["single_rank_ms"], r["ratio_to_world_x_single"] = single_ms, ratio
        print(f"pride N = 1 step in this run: {single_ms:.3f} ms -> step / ({args.world} x N = 1) = {ratio:.3f} "
              f"(target <= 1.3)")
    if shared_ms is not None:
        shared_ratio = slowest / shared_ms
        for r in rows:
            r["shared_single_ms"], r["ratio_to_shared_single"] = shared_ms, shared_ratio
            r["shared_overlap_s"] = shared_overlap_s
        print(f"{args.world} N = 1 steps at once, not communicating: {shared_ms:.3f} ms (slowest) = "
              f"{shared_ms / single_ms:.3f} x N = 1 -> step / that = {shared_ratio:.3f} "
              f"(what communication and staging add)")
    if "lion_pytorch_triton_ms" in r0:
        print(f"lion-pytorch Triton step: {r0['lion_pytorch_triton_ms']:.3f} ms -> pride/triton = {r0['ratio_to_triton']:.3f}; "
              f"until its step() returned: {r0['lion_pytorch_triton_host_ms']:.3f} ms")
        print(f"HBM floor (5 passes at {r0['copy_GBps']:.0f} GB/s copy): {r0['hbm_floor_ms']:.3f} ms")
    if args.device == "cuda":
        print(f"extra device memory per rank: {r0['workspace_bytes'] / 2**20:.1f} MiB held by the optimizer, "
              f"{max(r['peak_growth_bytes'] for r in rows) / 2**20:.1f} MiB peak growth during the steps "
              f"(limit 1/8 of parameters + one bucket: {r0['memory_limit_bytes'] / 2**20:.1f} MiB)")
    if "device_bytes_sent" in r0 and args.device == "cuda":
        print(f"data path {r0['cuda_path']}: {r0['device_bytes_sent']} of {r0['bytes_sent']} bytes sent from GPU memory (rank 0)")
    if args.json:
        with open(args.json, "a") as f:
            for r in rows:
                f.write(json.dumps(dict(r, command=" ".join(sys.argv))) + "\n")


if __name__ == "__main__":
    main()
