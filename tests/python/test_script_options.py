"""The helper scripts refuse bad options at once, with exit status 2 and a message naming the option,
before they make anything (a venv, network namespaces)."""

import os
import signal
import subprocess
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def script(name, *args):
    return subprocess.run(["bash", os.path.join(ROOT, "scripts", name), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("rate", ["bogus", "1gb", "fast", "-5mbit"])
def test_netns_run_refuses_a_rate_tc_would_not_take(rate):
    proc = script("netns_run.sh", "-n", "2", "-r", rate, "--", "true")
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert f"-r takes a tc rate such as 1gbit, 200mbit or 500kbit, not '{rate}'" in proc.stdout


def test_check_torch_compat_refuses_a_version_that_is_not_one():
    proc = script("check_torch_compat.sh", "latest")
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "'latest' is not a torch release such as 2.11.0" in proc.stdout
    assert not os.path.exists(os.path.join(ROOT, "build", "compat-latest"))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_netns_run_stops_its_ranks_and_removes_its_namespaces_when_interrupted(tmp_path, sig):
    # Each rank writes its pid and then waits (exec: the pid is the rank's own process).
    rank = f"echo $$ > {tmp_path}/rank$RANK.pid; exec sleep 300"
    proc = subprocess.Popen(["bash", os.path.join(ROOT, "scripts", "netns_run.sh"), "-n", "2", "--", "sh", "-c", rank],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        while len(list(tmp_path.glob("rank*.pid"))) < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        if proc.poll() == 77:
            pytest.skip("network namespaces cannot be made here")
        pids = [int(p.read_text()) for p in tmp_path.glob("rank*.pid")]
        assert len(pids) == 2, proc.communicate()[0] if proc.poll() is not None else "ranks did not start"
        proc.send_signal(sig)  # as Ctrl-C sends SIGINT to the script (its foreground process group)
        out, _ = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + sig, (proc.returncode, out)
    assert "stopping the ranks" in out, out
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"pride{proc.pid}x" not in namespaces, namespaces
