"""The Python benchmarks (perf/bench_vs_gloo.py, bench_dlion_step.py, bench_startup.py) run end to end.

Tiny sizes, 2 ranks: these check that the tools work and that their built-in checks hold (pride's
fp32 sum equals Gloo's; D-Lion replicas stay identical on every rank), not speed.
"""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(script, *args, timeout=120):
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "perf", script), *args],
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc.stdout


def test_bench_vs_gloo_reports_all_cases(tmp_path):
    out = run("bench_vs_gloo.py", "--ranks", "2", "--log2-numel", "12", "--iters", "2",
              "--json", str(tmp_path / "r.json"))
    for case in ("gloo all_reduce fp32", "pride all_reduce fp32", "pride sign_allreduce"):
        assert case in out, out
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["numel"] == 1 << 12
    assert all(t > 0 for t in result["median_s"].values())


def test_bench_dlion_step_keeps_replicas_identical(tmp_path):
    out = run("bench_dlion_step.py", "--ranks", "2", "--log2-numel", "14", "--iters", "2",
              "--json", str(tmp_path / "r.json"))
    for case in ("D-Lion MaVo (pride)", "G-Lion (gloo fp32)", "G-AdamW (gloo fp32)"):
        assert case in out, out
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["numel"] == 1 << 14
    # 2 ranks: 1 bit of votes per parameter plus the result's bit(s), far below the fp32 ring's 32.
    assert 0 < result["dlion_bytes_per_step"] * 8 / result["numel"] < 4


def test_bench_startup_runs_its_jobs():
    # 3 ranks: a group size with a fold in the fingerprint check; the worker itself checks that the
    # first all_reduce summed every rank.
    out = run("bench_startup.py", "--ranks", "3", "--iters", "5", "--warmup", "1", "--repeat", "1")
    rows = [line.split() for line in out.splitlines() if line.strip() and not line.startswith("#")]
    assert len(rows) == 1 and rows[0][0] == "3", out
    startup, on, off, ratio = map(float, rows[0][1:])
    assert startup > 0 and on > 0 and off > 0 and abs(ratio - on / off) < 0.01 + 0.01 * ratio, out


def test_bench_vs_nccl_imports_and_refuses_a_machine_without_cuda():
    """Its GPU run is on the GPU machine (scripts/device_bench.sh); here it must load and say why it stops."""
    import torch

    if torch.cuda.is_available():
        import pytest

        pytest.skip("a GPU is here: scripts/device_bench.sh runs this benchmark")
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "perf", "bench_vs_nccl.py"), "--ranks", "2"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "needs a CUDA device" in proc.stderr, proc.stderr
    help_text = subprocess.run([sys.executable, os.path.join(ROOT, "perf", "bench_vs_nccl.py"), "--help"],
                               capture_output=True, text=True, timeout=60)
    assert help_text.returncode == 0 and "NCCL" in help_text.stdout, help_text.stdout


def test_bench_onebit_adam_counts_volume_and_rounds(tmp_path):
    out = run("bench_onebit_adam.py", "--ranks", "2", "--steps", "20", "--numel", "65536",
              "--local-step-scaler", "5", "--json", str(tmp_path / "r.json"))
    assert "1-bit Adam volume vs Adam" in out, out
    configs = json.loads((tmp_path / "r.json").read_text())["configs"]
    adam, onebit, zeroone = configs["Adam"], configs["1-bit Adam"], configs["0/1 Adam"]
    # Adam: every step an fp32 ring allreduce, 2(N-1)/N x 4 = 4 bytes per parameter at 2 ranks.
    assert abs(adam["bytes_sent"] / (20 * 65536) - 4.0) < 0.05, adam
    assert adam["rounds"] == onebit["rounds"] == 20
    # 1-bit Adam: 3 float32 warm-up steps (15% of 20), then 1/8 byte per parameter and step.
    assert abs(onebit["bytes_sent"] - (3 * 4 + 17 / 8) * 65536) < 0.02 * onebit["bytes_sent"], onebit
    assert zeroone["rounds"] < 20 and zeroone["bytes_sent"] < onebit["bytes_sent"], zeroone
