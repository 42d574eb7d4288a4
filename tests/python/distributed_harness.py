"""Runs a test function on N real processes that form a torch.distributed group.

Each worker gets (rank, world_size, store_path) and calls ``init_group``; exceptions in workers are
re-raised in the parent with the worker's traceback, and a job that exceeds its deadline is killed
and reported as a hang (tests must never hang CI).
"""

import multiprocessing as mp
import os
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


def _worker(fn, rank, world_size, store_path, env, results, args):
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
        procs = [
            ctx.Process(target=_worker, args=(fn, r, world_size, store_path, env, results, args))
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
    if not expect_failures:
        failed = {r: e for r, e in outcome.items() if e}
        if failed:
            raise AssertionError("\n".join(f"--- rank {r} ---\n{e}" for r, e in sorted(failed.items())))
    return outcome


def init_group(rank, world_size, store_path, backend="pride", timeout_s=60):
    """init_process_group over a FileStore (no ports to pick, nothing left behind)."""
    import torch.distributed as dist

    import pride  # noqa: F401  registers the backend

    store = dist.FileStore(store_path, world_size)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=timeout_s))
    return store
