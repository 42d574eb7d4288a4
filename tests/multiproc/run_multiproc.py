#!/usr/bin/env python3
"""Multi-process tests of pride with real processes (standard library only; ctest runs it).

  run_multiproc.py perf  --torchrun T --nproc N -- BINARY ARGS...
      torchrun --standalone --no-python BINARY ARGS with N ranks; passes when torchrun exits 0 and
      rank 0 reports "# Out of bounds values : 0 OK". With --expect-route REGEX, every route the
      ranks print ("#  Rank r ... via p:ROUTE ...") must also match REGEX (e.g. shared memory).
      Every block of rank 0's table must list each size once, in increasing order, and where the
      header gives nccl-tests' bus factor ("# busbw: algbw x F"), every row's busbw must be algbw x F.
      With --unchecked (a run with -c 0) the #wrong column and the summary must say N/A instead.

  run_multiproc.py output --expect REGEX [--expect REGEX ...] -- BINARY ARGS...
      one process: passes when it exits 0 and its stdout matches every REGEX (multi-line).

  run_multiproc.py refuse --message REGEX -- BINARY ARGS...
      one process, without a launcher's environment: passes when it exits 2 within 60 s and its
      stderr matches REGEX (bad flags are refused before any rank connects).

  run_multiproc.py netns --netns-run S --hosts H --per-host P -- BINARY ARGS...
      scripts/netns_run.sh -n H -p P: H simulated hosts (network namespaces) of P ranks each. Passes when
      every rank exits 0 and rank 0 reports "# Out of bounds values : 0 OK", and every route matches
      where its peer is: shared memory (posix/sysv) to a rank of the same host, TCP to another host,
      and no rank warned of a failed peer (a group's normal end is not a failure).
      Exit 77 (skip) when namespaces cannot be created.

  run_multiproc.py netns-fault --netns-run S --hosts H --per-host P --probe P --victim V [--timeout SECONDS]
      the same simulated hosts running fault_probe ranks, the victim killing itself (SIGKILL) between
      two collectives. Every survivor, on the victim's host and on the others (whose endpoints to it
      are UCX's TCP ones, with UCX's peer-failure reports), must raise well before PRIDE_TIMEOUT,
      naming the collective and the victim (directly, or through the peer that gave up first).

  run_multiproc.py fault --probe P --nproc N --scenario S [--victim V] [--timeout SECONDS]
      starts N fault_probe ranks itself (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, PRIDE_TIMEOUT)
      rather than through torchrun, because torchrun kills the survivors as soon as one rank dies,
      which would hide exactly the hangs these tests look for. Checks SPEC §6: every survivor exits
      non-zero, in bounded time, with a message that says what happened: for a killed victim (die,
      loop), its rank, and not a timeout; for a silent one, the peer waited for and, from the progress
      board, the silent rank.

Every wait here has a deadline; on expiry all processes of the test are killed and the test fails.
"""
import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

# Seconds allowed on top of PRIDE_TIMEOUT: bootstrap (UCX, TCPStore) of up to 8 processes on 2 cores.
SLACK = 25.0


def fail(message):
    print(f"FAIL: {message}", flush=True)
    sys.exit(1)


def kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_within(cmd, deadline, hang_message):
    """Runs a launcher of ranks within `deadline` seconds; returns (exit status, output). A hang fails
    with `hang_message`; exit 77 (the launcher could not set up, e.g. no network namespaces) passes
    through as a skip."""
    print("+", " ".join(cmd), flush=True)
    # TMPDIR of its own, removed after: torchrun leaves its log directory (torchelastic_*) in it.
    with tempfile.TemporaryDirectory(prefix="pride-launch-") as tmp:
        # A session of its own, so a hang can be killed with everything the launcher started.
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True, env=dict(os.environ, TMPDIR=tmp))
        try:
            out, _ = proc.communicate(timeout=deadline)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            out, _ = proc.communicate()
            print(out)
            fail(hang_message)
    print(out, flush=True)
    if proc.returncode == 77:
        sys.exit(77)
    return proc.returncode, out


def run_launcher(cmd, deadline, what, checked=True):
    """Runs a launcher of ranks; returns its output once it exits 0 and rank 0 reported no wrong value
    (checked) or that it did not check (not checked)."""
    returncode, out = run_within(cmd, deadline, f"still running after {deadline} s (hang?); killed")
    if returncode != 0:
        fail(f"{what} exited with {returncode}")
    summary = "# Out of bounds values : 0 OK" if checked else "# Out of bounds values : N/A"
    if summary not in out:
        fail(f"rank 0 did not report '{summary}'")
    return out


TABLE_HEADER = re.compile(r"#\s+size\s+count\s+type\s+algo\s+time\(us\)\s+algbw\(GB/s\)\s+busbw\(GB/s\)")


def check_table(out, checked, nproc):
    """rank 0's table: each block's sizes once and increasing; where the tool prints a bus factor (the
    fp32 allreduce), it is nccl-tests' 2(N-1)/N and every row's busbw is algbw times it; the #wrong
    column a count where checked, N/A where not; the average bus bandwidth in the summary."""
    printed = re.search(r"^# busbw: algbw x ([0-9.]+),", out, re.M)
    factor = None
    if printed:
        factor = 2 * (nproc - 1) / nproc
        if abs(float(printed.group(1)) - factor) > 1e-5:
            fail(f"the bus factor printed, {printed.group(1)}, is not 2(N-1)/N = {factor:.6g} for N = {nproc}")
    if not re.search(r"^# Avg bus bandwidth    : [0-9.]+$", out, re.M):
        fail("rank 0 did not print '# Avg bus bandwidth'")
    blocks = []
    for line in out.splitlines():
        if TABLE_HEADER.match(line):
            blocks.append([])
        elif blocks and re.match(r"\s+\d+\s+\d+\s", line):
            blocks[-1].append(line.split())
    if not blocks or not all(blocks):
        fail("rank 0 printed no table")
    for rows in blocks:
        sizes = [int(r[0]) for r in rows]
        if sizes != sorted(set(sizes)):
            fail(f"a block lists sizes {sizes}: each once, increasing")
        for r in rows:
            algbw, busbw, wrong = float(r[5]), float(r[6]), r[9]
            # both printed to 3 decimals: allow their rounding, scaled by the factor
            if factor is not None and abs(busbw - algbw * factor) > 0.0005 + 0.0005 * factor:
                fail(f"row {' '.join(r)}: busbw is not algbw x {factor:.6g}")
            if (wrong == "N/A") == checked:
                fail(f"row {' '.join(r)}: #wrong should be {'a count' if checked else 'N/A'}")


def peer_routes(out):
    """(rank, peer, route) of every route in the ranks' header lines ("#  Rank r ... via p:ROUTE ...")."""
    routes = []
    for line in out.splitlines():
        m = re.match(r"#\s+Rank\s+(\d+) .* via (.*)$", line)
        if m:
            routes += [(int(m.group(1)), int(entry.split(":", 1)[0]), entry.split(":", 1)[1])
                       for entry in m.group(2).split() if ":" in entry]
    return routes


def check_route_count(routes, nproc):
    want = nproc * min(nproc - 1, 8)  # the perf tools print at most 8 peers per rank
    if len(routes) != want:
        fail(f"expected {want} peer routes in the ranks' header lines, found {len(routes)}")


def run_perf(args):
    cmd = [args.torchrun, "--standalone", "--nproc-per-node", str(args.nproc), "--no-python"] + args.command
    out = run_launcher(cmd, args.deadline, "torchrun", checked=not args.unchecked)
    check_table(out, checked=not args.unchecked, nproc=args.nproc)
    if args.expect_route:
        routes = peer_routes(out)
        check_route_count(routes, args.nproc)
        wrong = sorted({route for _, _, route in routes if not re.fullmatch(args.expect_route, route)})
        if wrong:
            fail(f"routes {wrong} do not match {args.expect_route!r}")
    print("PASS")


def run_single(command, deadline, on_timeout, env=None):
    """Runs one command of the output/refuse modes, echoes its output and returns the finished process."""
    print("+", " ".join(command), flush=True)
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=deadline, env=env)
    except subprocess.TimeoutExpired:
        fail(on_timeout)
    print(proc.stdout + proc.stderr, flush=True)
    return proc


def run_output(args):
    proc = run_single(args.command, args.deadline, f"still running after {args.deadline} s")
    if proc.returncode != 0:
        fail(f"exited with {proc.returncode}")
    for regex in args.expect:
        if not re.search(regex, proc.stdout, re.M):
            fail(f"stdout does not match {regex!r}")
    print("PASS")


def run_refuse(args):
    # Without the launcher's variables the tool must refuse the flag before it looks for its peers.
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    proc = run_single(args.command, 60, "still running after 60 s: a bad flag must be refused at once", env)
    if proc.returncode != 2:
        fail(f"exited with {proc.returncode}, expected 2")
    if not re.search(args.message, proc.stderr):
        fail(f"stderr does not match {args.message!r}")
    print("PASS")


SHARED_MEMORY_ROUTE = r"(posix|sysv)(\+[a-z0-9_]+)*"
TCP_ROUTE = r"tcp(\+[a-z0-9_]+)*"


def run_netns(args):
    cmd = ["bash", args.netns_run, "-n", str(args.hosts), "-p", str(args.per_host), "--"] + args.command
    out = run_launcher(cmd, args.deadline, "netns_run")
    routes = peer_routes(out)
    check_route_count(routes, args.hosts * args.per_host)
    for rank, peer, route in routes:  # rank r runs on host r // per_host
        same_host = peer // args.per_host == rank // args.per_host
        want = SHARED_MEMORY_ROUTE if same_host else TCP_ROUTE
        if not re.fullmatch(want, route):
            fail(f"rank {rank} reaches rank {peer} ({'same' if same_host else 'another'} host) via {route}, "
                 f"expected {want!r}")
    if "reports peer" in out:
        fail("a rank warned of a failed peer although every rank ended normally")
    print("PASS")


def run_netns_fault(args):
    """fault_probe's "die" scenario across simulated hosts (netns_run.sh runs the ranks, so the driver
    reads their stderr from its output: one line per rank, "fault_probe rank r: ...")."""
    n = args.hosts * args.per_host
    cmd = ["bash", args.netns_run, "-n", str(args.hosts), "-p", str(args.per_host), "--", "env",
           f"PRIDE_TIMEOUT={args.timeout:g}", args.probe, "--scenario", "die", "--victim", str(args.victim),
           "--iters", "6"]
    started = time.monotonic()
    bound = args.timeout / 2 + SLACK  # well before the timeout: a failure report, not a timeout, ends it
    _, out = run_within(cmd, bound, f"survivors still running {bound:.0f} s after the start (PRIDE_TIMEOUT "
                                    f"{args.timeout:g} s): a hang, or the victim's death noticed only by the timeout")
    elapsed = time.monotonic() - started
    problems = []
    if f"fault_probe rank {args.victim}: SIGKILL before collective" not in out:
        problems.append(f"victim rank {args.victim} did not report its SIGKILL")
    for r in (r for r in range(n) if r != args.victim):
        lines = [line for line in out.splitlines() if line.startswith(f"fault_probe rank {r}: collective failed:")]
        if not lines:
            problems.append(f"rank {r} did not raise")
            continue
        text = lines[0]
        if "sign_allreduce" not in text:
            problems.append(f"rank {r}: its error does not name the collective")
        if f"peer {args.victim} failed" not in text:
            problems.append(f"rank {r}: its error does not say that peer {args.victim} failed")
        if "timed out" in text:
            problems.append(f"rank {r}: it learnt of the failure by a timeout")
    if problems:
        fail("; ".join(problems))
    print(f"PASS ({elapsed:.1f} s, PRIDE_TIMEOUT {args.timeout:g} s)")


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Job:
    """N probe ranks, their stderr in files so that nothing blocks on a full pipe."""

    def __init__(self, args, tmp):
        port = free_port()
        self.procs, self.logs, self.exit_time = [], [], {}
        for rank in range(args.nproc):
            env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC", "PRIDE_"))}
            env.update(RANK=str(rank), WORLD_SIZE=str(args.nproc), LOCAL_RANK=str(rank),
                       LOCAL_WORLD_SIZE=str(args.nproc), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                       PRIDE_TIMEOUT=str(args.timeout))
            log = open(os.path.join(tmp, f"rank{rank}.log"), "w+")
            cmd = [args.probe, "--scenario", args.scenario, "--victim", str(args.victim)]
            self.procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                               start_new_session=True))
            self.logs.append(log)
        self.start = time.monotonic()

    def poll(self):
        now = time.monotonic()
        for rank, p in enumerate(self.procs):
            if rank not in self.exit_time and p.poll() is not None:
                self.exit_time[rank] = now - self.start

    def wait(self, ranks, deadline):
        """Waits until every rank in `ranks` has exited or `deadline` (monotonic) passes."""
        while time.monotonic() < deadline:
            self.poll()
            if all(r in self.exit_time for r in ranks):
                return True
            time.sleep(0.05)
        self.poll()
        return all(r in self.exit_time for r in ranks)

    def text(self, rank):
        self.logs[rank].flush()
        with open(self.logs[rank].name) as f:
            return f.read()

    def kill_all(self):
        for p in self.procs:
            kill_group(p)
        for p in self.procs:
            p.wait()
        self.poll()

    def report(self):
        for rank, p in enumerate(self.procs):
            when = self.exit_time.get(rank)
            when = f"{when:.2f} s" if when is not None else "never"
            print(f"--- rank {rank}: exit {p.returncode} after {when}")
            print(self.text(rank).rstrip())


def run_fault(args):
    n, victim, scenario = args.nproc, args.victim, args.scenario
    survivors = [r for r in range(n) if r != victim]
    with tempfile.TemporaryDirectory(prefix="pride_fault_") as tmp:
        job = Job(args, tmp)
        problems = []
        try:
            bound = args.timeout + SLACK
            if scenario == "loop":
                # Wait until every rank is inside the loop of collectives, then kill the victim from outside.
                until = job.start + SLACK
                while time.monotonic() < until and not all("first collective done" in job.text(r) for r in range(n)):
                    time.sleep(0.05)
                time.sleep(0.5)
                killed_at = time.monotonic()
                kill_group(job.procs[victim])
                if not job.wait(survivors, killed_at + bound):
                    problems.append(f"survivors still running {bound:.0f} s after rank {victim} was killed (hang)")
            elif scenario == "ok":
                if not job.wait(range(n), job.start + bound):
                    problems.append(f"not done after {bound:.0f} s")
            else:
                waited = survivors if scenario == "silent" else list(range(n))
                if not job.wait(waited, job.start + bound):
                    missing = [r for r in waited if r not in job.exit_time]
                    problems.append(f"ranks {missing} still running after {bound:.0f} s (hang)")
        finally:
            job.kill_all()  # the silent victim, and anything that hung
            job.report()

        rc = [p.returncode for p in job.procs]
        text = [job.text(r) for r in range(n)]
        if scenario == "ok":
            problems += [f"rank {r} exited {rc[r]}" for r in range(n) if rc[r] != 0]
        elif scenario in ("numel", "mode"):
            for r in range(n):
                if rc[r] != 1:
                    problems.append(f"rank {r} exited {rc[r]}, expected 1 (a raised error)")
                if "ranks disagree" not in text[r]:
                    problems.append(f"rank {r}: no 'ranks disagree' in its output")
        else:
            if scenario == "die" and rc[victim] != -signal.SIGKILL:
                problems.append(f"victim rank {victim} exited {rc[victim]}, expected to die of SIGKILL")
            for r in survivors:
                if rc[r] != 1:
                    problems.append(f"rank {r} exited {rc[r]}, expected 1 (a raised error)")
                    continue
                if "sign_allreduce" not in text[r]:
                    problems.append(f"rank {r}: its error does not name the collective")
                if scenario == "silent":  # alive and mute: only a timeout can tell, and it must name whom it waited for
                    if f"peer {victim}" not in text[r] and "timed out" not in text[r] and "gave up" not in text[r]:
                        problems.append(f"rank {r}: its error names neither peer {victim} nor a timeout")
                    if "peer" not in text[r]:
                        problems.append(f"rank {r}: its error does not name the peer it waited for")
                    if f"rank {victim} was not waiting in this collective" not in text[r]:
                        problems.append(f"rank {r}: its error does not name the silent rank {victim} (progress board)")
                else:  # a killed rank is detected (SPEC 6), not waited out: every survivor's error names it
                    if f"peer {victim}" not in text[r]:
                        problems.append(f"rank {r}: its error does not name the killed peer {victim}")
                    if "timed out" in text[r]:
                        problems.append(f"rank {r}: it learnt of rank {victim}'s death by a timeout")
        if problems:
            fail("; ".join(problems))
        print("PASS")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    perf = sub.add_parser("perf")
    perf.add_argument("--torchrun", required=True)
    perf.add_argument("--nproc", type=int, required=True)
    perf.add_argument("--deadline", type=float, default=500)
    perf.add_argument("--expect-route", help="regex every printed peer route must match")
    perf.add_argument("--unchecked", action="store_true", help="the command runs with -c 0")
    perf.add_argument("command", nargs=argparse.REMAINDER)
    output = sub.add_parser("output")
    output.add_argument("--expect", action="append", default=[], help="regex stdout must match (repeatable)")
    output.add_argument("--deadline", type=float, default=240)
    output.add_argument("command", nargs=argparse.REMAINDER)
    refuse = sub.add_parser("refuse")
    refuse.add_argument("--message", required=True, help="regex the refusal on stderr must match")
    refuse.add_argument("command", nargs=argparse.REMAINDER)
    netns = sub.add_parser("netns")
    netns.add_argument("--netns-run", required=True, help="scripts/netns_run.sh")
    netns.add_argument("--hosts", type=int, required=True)
    netns.add_argument("--per-host", type=int, required=True)
    netns.add_argument("--deadline", type=float, default=500)
    netns.add_argument("command", nargs=argparse.REMAINDER)
    netns_fault = sub.add_parser("netns-fault")
    netns_fault.add_argument("--netns-run", required=True, help="scripts/netns_run.sh")
    netns_fault.add_argument("--hosts", type=int, required=True)
    netns_fault.add_argument("--per-host", type=int, required=True)
    netns_fault.add_argument("--probe", required=True)
    netns_fault.add_argument("--victim", type=int, required=True)
    netns_fault.add_argument("--timeout", type=float, default=60, help="PRIDE_TIMEOUT in seconds")
    fault = sub.add_parser("fault")
    fault.add_argument("--probe", required=True)
    fault.add_argument("--nproc", type=int, required=True)
    fault.add_argument("--scenario", required=True, choices=["ok", "silent", "die", "loop", "numel", "mode"])
    fault.add_argument("--victim", type=int, default=1)
    fault.add_argument("--timeout", type=float, default=5, help="PRIDE_TIMEOUT in seconds")
    args = parser.parse_args()
    if args.what in ("perf", "netns", "refuse", "output") and args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if args.what == "perf":
        run_perf(args)
    elif args.what == "refuse":
        run_refuse(args)
    elif args.what == "output":
        run_output(args)
    elif args.what == "netns":
        run_netns(args)
    elif args.what == "netns-fault":
        run_netns_fault(args)
    else:
        run_fault(args)


if __name__ == "__main__":
    main()
