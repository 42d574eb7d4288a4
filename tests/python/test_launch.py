"""Launching: torchrun (env://) runs the example with no wrapper; file:// init works too."""

import os
import re
import subprocess
import sys
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from distributed_harness import run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_torchrun_runs_the_example(tmp_path):
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    out = subprocess.run(
        [torchrun, "--standalone", "--nproc-per-node", "2", os.path.join(ROOT, "examples", "quickstart.py")],
        capture_output=True, text=True, timeout=180,
        env=dict(os.environ, TMPDIR=str(tmp_path)))  # where torchrun leaves its log directory
    assert out.returncode == 0, out.stdout + out.stderr
    assert "sign_allreduce" in out.stdout and "bytes_sent" in out.stdout, out.stdout


_FAILING_JOB = """
import os, signal, sys, time
from datetime import timedelta
import torch, torch.distributed as dist
import pride
dist.init_process_group("pride", timeout=timedelta(seconds=120))  # start-up may be slow on a loaded host
group = dist.new_group(backend="pride", timeout=timedelta(seconds=3))  # the collectives' deadline
rank = dist.get_rank()
dist.all_reduce(torch.ones(1000), group=group)
if rank == 1:
    if sys.argv[1] == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(120)  # silent: alive, and never joins the next collective
pride.sign_allreduce(torch.randn(10000), group=group)
print("past the collective", flush=True)
"""


@pytest.mark.parametrize("victim", ["die", "silent"])
def test_under_torchrun_a_failed_peer_ends_the_job_non_zero(tmp_path, victim):
    # SPEC §6: a rank killed, or one that stays alive but never joins (the group's timeout, 3 s), ends
    # the job with a non-zero exit status, in bounded time and not past the collective; the silent case
    # is the survivors' own error (torchrun stops the job at the first rank that exits non-zero).
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    job = tmp_path / "job.py"
    job.write_text(_FAILING_JOB)
    started = time.monotonic()
    out = subprocess.run([torchrun, "--standalone", "--nproc-per-node", "3", "--max-restarts", "0", str(job), victim],
                         capture_output=True, text=True, timeout=100, env=dict(os.environ, TMPDIR=str(tmp_path)))
    took = time.monotonic() - started
    text = out.stdout + out.stderr
    assert out.returncode != 0 and "past the collective" not in text, (out.returncode, text[-3000:])
    assert took < 60, f"{took:.0f} s: the job was not ended by the failure"
    if victim == "silent":
        assert re.search(r"pride rank [02]/3: sign_allreduce #\d+ .*peer [12]", text), text[-3000:]
        # Each survivor waited for some peer, maybe the other survivor; the report names the silent one.
        assert "rank 1 was not waiting in this collective" in text, text[-3000:]


def test_the_example_without_a_launcher_says_how_to_start_it():
    example = os.path.join(ROOT, "examples", "quickstart.py")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    shown = subprocess.run([sys.executable, example, "--help"], capture_output=True, text=True, timeout=120, env=env)
    assert shown.returncode == 0 and "torchrun --standalone" in shown.stdout, shown.stdout + shown.stderr
    alone = subprocess.run([sys.executable, example], capture_output=True, text=True, timeout=120, env=env)
    assert alone.returncode == 1 and "needs a launcher" in alone.stderr and "torchrun" in alone.stderr, alone.stderr


def _file_init(rank, world, store_path):
    import pride  # noqa: F401

    dist.init_process_group("pride", init_method=f"file://{store_path}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=30))
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t)
    assert t.item() == world * (world + 1) / 2
    dist.destroy_process_group()


def test_file_init_method():
    run(_file_init, 2)


def _mixed_backend_string(rank, world, store_path):
    import pride

    store = dist.FileStore(store_path, world)
    # torch creates the NCCL backend eagerly and it needs a GPU; elsewhere gloo stands in for CUDA.
    cuda = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(f"cpu:pride,cuda:{cuda}", store=store, rank=rank, world_size=world)
    t = torch.tensor([1.0 if rank == 0 else -1.0, 1.0])
    pride.sign_allreduce(t, mode="mean")
    assert t.tolist() == [0.0, 1.0]
    dist.destroy_process_group()


def test_mixed_backend_string_puts_pride_on_cpu():
    run(_mixed_backend_string, 2)


_END_OF_JOB = """
import time, torch, torch.distributed as dist
import pride  # noqa: F401
dist.init_process_group("pride")
r = dist.get_rank()
x = torch.ones(1 << 16)
for _ in range(5):
    dist.all_reduce(x)
time.sleep(0.5 * r)  # the hosts end at different times
dist.destroy_process_group()
time.sleep(2)  # and stay up a while: a peer's close must not be reported as its failure
print("rank", r, "ended", flush=True)
"""


def test_a_4_host_job_ends_without_warnings(tmp_path):
    """One rank per network namespace (scripts/netns_run.sh), over TCP: destroy_process_group ends the
    job with no 'UCX reports peer N failed' warnings (issue 11)."""
    import pytest

    script = tmp_path / "end_of_job.py"
    script.write_text(_END_OF_JOB)
    out = subprocess.run(["bash", os.path.join(ROOT, "scripts", "netns_run.sh"), "-n", "4", "--", sys.executable,
                          str(script)], capture_output=True, text=True, timeout=180)
    if out.returncode == 77:
        pytest.skip("network namespaces are not available here (needs root)")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("ended") == 4, out.stdout + out.stderr
    assert "UCX reports" not in out.stderr and "[pride" not in out.stderr, out.stderr
