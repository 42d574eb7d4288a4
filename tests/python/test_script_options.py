"""The helper scripts refuse bad options at once, with exit status 2 and a message naming the option,
before they make anything (a venv, network namespaces)."""

import os
import subprocess

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
