"""How pride scales with the number of ranks on one host:

1. start-up: the wall time from the moment every rank is released (torch and pride already
   imported) until every rank has finished init_process_group("pride") and a first all_reduce;
2. the cost of the per-collective fingerprint check: the median latency of a 4-byte all_reduce with
   PRIDE_CHECK_FINGERPRINT=1 (the default) against the same all_reduce with it off. Jobs with the
   check on and off alternate, --repeat times each, and each column is the median over its jobs:
   on a host with fewer cores than ranks one job's timing differs from the next by tens of percent.

Each rank is a process of its own, started with the environment torchrun would give it (RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT), so the bootstrap is the real one: torch's TCPStore and
env:// rendezvous. Example:

    python perf/bench_startup.py --ranks 4 32 --iters 200 --repeat 3
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(args):
    """One rank: import, say ready, wait for "go", then init + first allreduce + the latency loop."""
    import torch
    import torch.distributed as dist

    import pride  # noqa: F401  (registers the backend)

    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return 1
    dist.init_process_group("pride")
    x = torch.ones(1, dtype=torch.int32)  # 4 bytes
    dist.all_reduce(x)
    first_done = time.time()
    if x.item() != dist.get_world_size():
        raise SystemExit(f"rank {dist.get_rank()}: the first all_reduce gave {x.item()}, not "
                         f"{dist.get_world_size()}")
    for _ in range(args.warmup):
        dist.all_reduce(x)
    samples = []
    for _ in range(args.iters):
        dist.barrier()
        t = time.perf_counter()
        dist.all_reduce(x)
        samples.append(time.perf_counter() - t)
    dist.destroy_process_group()
    samples.sort()
    print(json.dumps({"first_done": first_done, "median_us": samples[len(samples) // 2] * 1e6}), flush=True)
    return 0


def run_job(ranks, fingerprint, args):
    """Starts `ranks` processes, releases them together, returns (start-up seconds, median µs of rank 0)."""
    port = free_port()
    procs = []
    # --timeout bounds the whole job, start-up included: a rank stuck before it says "ready" would
    # otherwise hold the readline below forever.
    timed_out = threading.Event()

    def stop_all():
        timed_out.set()
        for p in procs:
            p.kill()

    watchdog = threading.Timer(args.timeout, stop_all)
    watchdog.daemon = True
    watchdog.start()
    for r in range(ranks):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(ranks), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(ranks),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), PRIDE_CHECK_FINGERPRINT=str(int(fingerprint)))
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--iters", str(args.iters),
               "--warmup", str(args.warmup)]
        procs.append(subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
    try:
        for r, p in enumerate(procs):
            line = p.stdout.readline().strip()
            if line != "ready":
                if timed_out.is_set():
                    raise SystemExit(f"bench_startup: the job of {ranks} ranks ran past --timeout {args.timeout:g} s "
                                     f"before rank {r} started; its ranks were stopped")
                raise SystemExit(f"bench_startup: rank {r} did not start (said {line!r}); its exit code: {p.wait()}")
        released = time.time()
        for p in procs:
            try:
                p.stdin.write("go\n")
                p.stdin.flush()
            except BrokenPipeError:  # the watchdog stopped it: reported below
                pass
        results = []
        for r, p in enumerate(procs):
            out, _ = p.communicate()
            if timed_out.is_set():
                raise SystemExit(f"bench_startup: the job of {ranks} ranks ran past --timeout {args.timeout:g} s "
                                 f"(rank {r} had not finished); its ranks were stopped")
            if p.returncode != 0:
                raise SystemExit(f"bench_startup: rank {r} of {ranks} exited with {p.returncode}")
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        watchdog.cancel()
        for p in procs:
            if p.poll() is None:
                p.kill()
    startup = max(r["first_done"] for r in results) - released
    return startup, results[0]["median_us"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, nargs="+", default=[32],
                        help="group sizes to measure, each a job of that many processes (default: 32)")
    parser.add_argument("--iters", type=int, default=200, help="timed 4-byte all_reduce calls per job (default 200)")
    parser.add_argument("--warmup", type=int, default=20, help="untimed all_reduce calls first (default 20)")
    parser.add_argument("--repeat", type=int, default=3, help="jobs with the check on, and off, per group size (default 3)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds a job may take, start-up included (default 600)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    if any(n < 2 for n in args.ranks) or args.iters < 1 or args.warmup < 0 or args.repeat < 1:
        parser.error("--ranks must be at least 2, --iters and --repeat at least 1")
    if not args.timeout > 0:
        parser.error(f"--timeout must be positive, got {args.timeout:g}")

    print("# ranks: processes on this host; start-up: release of all ranks -> init_process_group('pride') + "
          "first all_reduce done on every rank")
    print(f"# 4-byte all_reduce: median over --iters calls, rank 0, each after a barrier; every column is the median "
          f"over {args.repeat} job(s)")
    print(f"# {'ranks':>5} {'start-up(s)':>12} {'fp on(us)':>10} {'fp off(us)':>11} {'on/off':>7}")
    rows = []
    for n in args.ranks:
        startups, ons, offs = [], [], []
        for k in range(args.repeat):
            for fingerprint in (True, False):
                print(f"bench_startup: {n} ranks, check {'on' if fingerprint else 'off'}, job {k + 1} of {args.repeat}",
                      file=sys.stderr, flush=True)
                startup, median = run_job(n, fingerprint, args)
                startups.append(startup)
                (ons if fingerprint else offs).append(median)
        startup, on, off = statistics.median(startups), statistics.median(ons), statistics.median(offs)
        rows.append((n, startup, on, off))
        print(f"  {n:>5} {startup:>12.2f} {on:>10.1f} {off:>11.1f} {on / off:>7.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
