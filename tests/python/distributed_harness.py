"""Runs a test function on N real processes that form a torch.distributed group.

Each worker gets (rank, world_size, store_path) and calls ``init_group``; exceptions in workers are
re-raised in the parent with the worker's traceback, and a job that exceeds its deadline is killed
and reported as a hang (tests must never hang CI). A rank that returned but then exits non-zero, or
hangs on its way out (teardown, at-exit handlers), fails the run too. What a worker prints (its file
descriptors 1 and 2, so UCX's and the C++ code's output as well as Python's) comes back on the
parent's, each line prefixed with its rank, where pytest's capture (capfd) sees it.
"""

import multiprocessing as mp
import os
import sys
import tempfile
import time
import traceback
from datetime import timedelta

DEFAULT_DEADLINE_S = 120


# Workers fork from a server that has imported torch once, instead of each starting a fresh interpreter
# and importing it (about 3 s each on a 2-core CI host: half of a 4-rank test's time). Only torch is
# preloaded: pride, and the UCX it loads, start in each worker, so UCX reads the worker's environment.
# The server imports torch without touching CUDA, so each worker still initialises CUDA for itself.
_PRELOAD = ["torch", "torch.distributed"]


def _worker(fn, rank, world_size, store_path, env, results, args, output_path):
    # The server's standard output and error are the ones it started with (in pytest, the capture of
    # whichever test started it): the worker's go to a file of its own, which the parent passes on.
    out = os.open(output_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    # The server's environment is the one it started with; the worker takes the caller's as it is now.
    os.environ.clear()
    os.environ.update(env)
    try:
        fn(rank, world_size, store_path, *args)
        results.put((rank, None))
    except BaseException:  # noqa: BLE001 - report everything to the parent
        results.put((rank, traceback.format_exc()))
        raise SystemExit(1)


def run(fn, world_size, *args, env=None, deadline_s=DEFAULT_DEADLINE_S, expect_failures=False):
    """Runs fn(rank, world_size, store_path, *args) on ``world_size`` processes.

    Returns {rank: traceback or None}. Unless ``expect_failures``, raises if any rank failed.
    """
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(_PRELOAD)
    env = {**os.environ, **(env or {})}
    results = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        store_path = os.path.join(tmp, "store")
        outputs = [os.path.join(tmp, f"rank{r}.out") for r in range(world_size)]
        procs = [
            ctx.Process(target=_worker, args=(fn, r, world_size, store_path, env, results, args, outputs[r]))
            for r in range(world_size)
        ]
        for p in procs:
            p.start()
        outcome = {}
        end = time.monotonic() + deadline_s
        while len(outcome) < world_size and time.monotonic() < end:
            try:
                rank, err = results.get(timeout=0.5)
                outcome[rank] = err
            except Exception:  # queue.Empty
                if all(not p.is_alive() for p in procs) and results.empty():
                    break
        for p in procs:
            p.join(timeout=max(0.1, end - time.monotonic()))
        hung = [r for r, p in enumerate(procs) if p.is_alive()]
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
        for r, p in enumerate(procs):
            if r not in outcome:
                outcome[r] = "hung (killed after the deadline)" if r in hung else f"exited with {p.exitcode}"
            elif outcome[r] is None and r in hung:
                outcome[r] = "returned, then hung on its way out (killed after the deadline)"
            elif outcome[r] is None and p.exitcode != 0:
                outcome[r] = f"returned, then exited with {p.exitcode}"
        printed = [_pass_on(r, path) for r, path in enumerate(outputs)]
    if not expect_failures:
        failed = {r: e for r, e in outcome.items() if e}
        if failed:
            raise AssertionError("\n".join(f"--- rank {r} ---\n{e}" + _last_lines(printed[r])
                                           for r, e in sorted(failed.items())))
    return outcome


def _pass_on(rank, path):
    """Writes a worker's output to this process's standard error, each line prefixed with its rank, and
    returns it."""
    try:
        with open(path, "rb") as f:
            text = f.read().decode(errors="replace")
    except FileNotFoundError:  # the worker never started
        return ""
    if text:
        sys.stderr.flush()
        lines = text.splitlines()
        os.write(2, "".join(f"[rank {rank}] {line}\n" for line in lines).encode())
    return text


def _last_lines(text, count=30):
    lines = text.splitlines()
    if not lines:
        return ""
    return f"\n(its last {min(count, len(lines))} lines of output)\n" + "\n".join(lines[-count:])


def init_group(rank, world_size, store_path, backend="pride", timeout_s=60):
    """init_process_group over a FileStore (no ports to pick, nothing left behind)."""
    import torch.distributed as dist

    import pride  # noqa: F401  registers the backend

    store = dist.FileStore(store_path, world_size)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=timeout_s))
    return store
