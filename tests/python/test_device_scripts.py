"""scripts/device_test.sh, the GPU machine's one command, as far as it runs without a GPU: its options,
and the phase budget (scripts/phase_budget.sh) that keeps a short device session's summary and logs."""

import os
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def bash(script, env=None, timeout=60):
    return subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def test_phases_run_under_what_is_left_of_the_budget(tmp_path):
    summary = tmp_path / "summary.md"
    started = time.monotonic()
    proc = bash(
        ". scripts/phase_budget.sh\n"
        "within fast sh -c 'exit 3'; echo fast=$?\n"
        "within slow sleep 60; echo slow=$?\n"
        "within late true; echo late=$?\n",
        env={"BUDGET_SECONDS": "3", "BUDGET_RESERVE": "0", "BUDGET_MIN_START": "1",
             "BUDGET_SUMMARY": str(summary)})
    took = time.monotonic() - started
    out = proc.stdout.split()
    # A phase's own status passes through; the budget stops the slow one, and the next cannot start.
    assert out == ["fast=3", "slow=124", "late=125"], proc.stdout + proc.stderr
    assert took < 20, took
    lines = summary.read_text().splitlines()
    assert len(lines) == 2 and lines[0].startswith("- slow: CUT SHORT") and lines[1].startswith("- late: SKIPPED"), lines


def test_without_a_budget_phases_run_to_their_end(tmp_path):
    summary = tmp_path / "summary.md"
    proc = bash(". scripts/phase_budget.sh\nwithin one sh -c 'sleep 1; exit 4'; echo one=$?\n",
                env={"BUDGET_SUMMARY": str(summary)})
    assert proc.stdout.split() == ["one=4"], proc.stdout + proc.stderr
    assert not summary.exists() or summary.read_text() == ""


def test_device_test_refuses_bad_options_and_missing_wheels(tmp_path):
    out = str(tmp_path / "out")
    for args, message in ((["--budget", "ten"], "--budget takes whole seconds"),
                          (["--workers", "0"], "--workers takes a positive count"),
                          (["--suite", "gpus"], "--suite must be"),
                          (["--frobnicate"], "unknown option --frobnicate"),
                          (["--files", str(tmp_path / "nowheels"), "--budget", "60"], "no wheels in")):
        proc = subprocess.run(["bash", "scripts/device_test.sh", "--out", out, *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and message in proc.stdout + proc.stderr, (args, proc.stdout, proc.stderr)
    proc = subprocess.run(["bash", "scripts/device_test.sh", "--help"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0 and "--budget S" in proc.stdout and "--pytest-k EXPR" in proc.stdout
