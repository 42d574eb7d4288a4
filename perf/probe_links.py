"""Measures the links between a job's hosts through pride itself, and prints the settings that tell
pride's cost model about them (PRIDE_LINK_BANDWIDTH_GBPS, PRIDE_LINK_LATENCY_US).

pride does not measure its links: between hosts its cost model assumes 10 Gbit/s and 40 us unless
told otherwise, and on slower links that keeps `auto` from the choices that pay there (results as
trits or packed counts, hier's packed node counts; docs/performance.md). Run this once on the
machines a job will use, with the launcher the job will use, and export what it prints on every rank.

  bandwidth  each host's first rank sends --bytes to the next host's first rank and receives as much
             from the previous host's, all at once (pride's isend/irecv): every host link carries one
             stream each way. A host's rate in a round is its bytes over its time; reported, per host,
             its best round and the median round, and for the links the slowest host's best round:
             the link's capacity, which is what the cost model wants. --json also keeps every
             round's rate per host. (On one host, every rank sends to the next local rank instead.)
  latency    the first rank of host 0 and of host 1 send one byte back and forth (--pings round trips);
             reported: half the median round trip, pride's software included (what a message costs
             the cost model: its latency).

On one host there is no link to measure (the defaults for shared memory apply); the probe says so
and measures between local ranks for reference only. Launch as the benchmarks are:

    torchrun --nnodes 2 --nproc-per-node 4 ... perf/probe_links.py --env
    bash scripts/netns_run.sh -n 4 -r 1gbit -- .venv/bin/python perf/probe_links.py --env
    python perf/probe_links.py --ranks 4            # one host, for reference
"""

import argparse
import json
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist

import pride  # noqa: F401  (registers the "pride" backend)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import ENV_HELP, init_pride_group, launch, parse_args  # noqa: E402


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    scale = units.get(text[-1:].upper(), 1)
    number = text[:-1] if text[-1:].upper() in units else text
    try:
        value = int(float(number) * scale)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (bytes, or with a K/M/G suffix)")
    if value < 1:
        raise argparse.ArgumentTypeError(f"--bytes must be at least 1, got {text!r}")
    return value


def hosts_of_ranks():
    """Every rank's host name as pride sees it (PRIDE_HOSTNAME, else the machine's), gathered."""
    mine = os.environ.get("PRIDE_HOSTNAME") or socket.gethostname()
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, mine)
    return every


def partners(hosts, rank):
    """(to, from) for the bandwidth round. Between hosts, one stream per link: each host's first rank
    sends to the next host's first rank and receives from the previous host's (several streams per
    link measured less than the link in the netns testbed: 2 hosts × 2 ranks at 1 Gbit/s, 0.5–0.73
    in all, against 0.96 for one). With one host: every rank to the next local rank."""
    order = list(dict.fromkeys(hosts))  # hosts in order of their first rank
    members = {h: [r for r, x in enumerate(hosts) if x == h] for h in order}
    mine = members[hosts[rank]]
    index = mine.index(rank)
    if len(order) == 1:
        n = len(mine)
        return (mine[(index + 1) % n], mine[(index - 1) % n]) if n > 1 else (None, None)
    if index != 0:
        return (None, None)
    k = order.index(hosts[rank])
    return (members[order[(k + 1) % len(order)]][0], members[order[(k - 1) % len(order)]][0])


def bandwidth_round(buf_out, buf_in, to, frm):
    """One simultaneous exchange; returns this rank's own time (s) from the barrier's return."""
    dist.barrier()
    start = time.perf_counter()
    works = []
    if frm is not None:
        works.append(dist.irecv(buf_in, src=frm))
    if to is not None:
        works.append(dist.isend(buf_out, dst=to))
    for w in works:
        w.wait()
    return time.perf_counter() - start


def ping_pong(rank, a, b, pings):
    """Round-trip times (s) of one byte between ranks a and b; empty on every other rank."""
    one = torch.zeros(1, dtype=torch.uint8)
    times = []
    if rank not in (a, b):
        return times
    for _ in range(pings):
        start = time.perf_counter()
        if rank == a:
            dist.send(one, dst=b)
            dist.recv(one, src=b)
        else:
            dist.recv(one, src=a)
            dist.send(one, dst=a)
        times.append(time.perf_counter() - start)
    return times


def worker(rank, args, store_path, out_path):
    init_pride_group(rank, args.ranks, store_path)
    hosts = hosts_of_ranks()
    to, frm = partners(hosts, rank)
    out = torch.full((args.bytes,), rank % 251, dtype=torch.uint8)
    got = torch.empty(args.bytes, dtype=torch.uint8)
    own = []
    for it in range(args.warmup + args.iters):
        if rank == 0:
            print(f"# round {it + 1}/{args.warmup + args.iters}{' (warm-up)' if it < args.warmup else ''}",
                  file=sys.stderr, flush=True)
        t = bandwidth_round(out, got, to, frm)
        if it >= args.warmup:
            own.append(t)
        if frm is not None and not bool((got == frm % 251).all()):
            raise RuntimeError(f"probe_links (rank {rank}): the bytes from rank {frm} arrived wrong")
    order = list(dict.fromkeys(hosts))
    a = hosts.index(order[0])
    b = hosts.index(order[1]) if len(order) > 1 else (1 if args.ranks > 1 else 0)
    dist.barrier()
    rtts = ping_pong(rank, a, b, args.pings) if a != b else []
    every = [None] * args.ranks
    dist.all_gather_object(every, {"host": hosts[rank], "sends": to is not None, "times": own, "rtts": rtts})
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump({"ranks": args.ranks, "bytes": args.bytes, "hosts": order, "per_rank": every}, f)
    dist.barrier()
    dist.destroy_process_group()


def summarize(result):
    """Per host and round: the bytes its ranks sent over its slowest sender's time. The link: the
    slowest host's best round; also each host's median round, and the median one-way latency."""
    per_rank, nbytes = result["per_rank"], result["bytes"]
    iters = len(per_rank[0]["times"])
    host_rates = {}
    for h in result["hosts"]:
        senders = [p for p in per_rank if p["host"] == h and p["sends"]]
        if not senders:
            continue
        host_rates[h] = [len(senders) * nbytes * 8 / max(p["times"][i] for p in senders) / 1e9 for i in range(iters)]
    slowest = min(host_rates, key=lambda h: max(host_rates[h])) if host_rates else None
    rtts = [t for p in per_rank for t in p["rtts"]]
    return {
        "hosts": len(result["hosts"]),
        "ranks": result["ranks"],
        "bytes": nbytes,
        "gbit_per_s": max(host_rates[slowest]) if slowest else None,
        "slowest_host": slowest,
        "per_host_gbit_per_s": {h: max(v) for h, v in host_rates.items()},
        "per_host_median_gbit_per_s": {h: statistics.median(v) for h, v in host_rates.items()},
        "per_host_rounds_gbit_per_s": host_rates,
        "latency_us": statistics.median(rtts) / 2 * 1e6 if rtts else None,
    }


def report(args, result):
    s = summarize(result)
    print(f"# probe_links: {s['ranks']} ranks on {s['hosts']} host{'s' if s['hosts'] > 1 else ''}, "
          f"{s['bytes'] / (1 << 20):.1f} MiB per rank each way per round, {args.iters} rounds")
    if s["gbit_per_s"] is None:
        print("# one rank: nothing to measure")
    else:
        print(f"{'host':<29} {'best round':>12} {'median round':>14}")
        for h, g in s["per_host_gbit_per_s"].items():
            print(f"{h:<29} {g:>7.3f} Gbit/s {s['per_host_median_gbit_per_s'][h]:>7.3f} Gbit/s")
        lat = f", one-way latency {s['latency_us']:.1f} us" if s["latency_us"] is not None else ""
        if s["hosts"] > 1:
            print(f"# between hosts: {s['gbit_per_s']:.3f} Gbit/s per host link (the slowest host's best round: "
                  f"{s['slowest_host']}){lat}")
            print("# for pride's cost model, on every rank of jobs on these hosts:")
            print(f"export PRIDE_LINK_BANDWIDTH_GBPS={s['gbit_per_s']:.3g}")
            if s["latency_us"] is not None:
                print(f"export PRIDE_LINK_LATENCY_US={s['latency_us']:.3g}")
        else:
            print(f"# one host: {s['gbit_per_s']:.3f} Gbit/s in all, its ranks sending to one another at once{lat}; "
                  "nothing to set (pride's defaults describe shared memory)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(s, f, indent=2)
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, default=2, help="processes on this host without --env (default 2)")
    p.add_argument("--bytes", type=parse_size, default=parse_size("32M"),
                   help="bytes each rank sends per round, K/M/G suffixes (default 32M)")
    p.add_argument("--iters", type=int, default=5, help="timed rounds (default 5)")
    p.add_argument("--warmup", type=int, default=1, help="untimed rounds first (default 1)")
    p.add_argument("--pings", type=int, default=50, help="round trips for the latency (default 50)")
    p.add_argument("--json", help="also write the summary here")
    p.add_argument("--env", action="store_true", help=ENV_HELP)
    args = parse_args(p)
    if args.pings < 1:
        p.error("--pings must be at least 1")
    return launch(worker, args, report)


if __name__ == "__main__":
    sys.exit(main())
