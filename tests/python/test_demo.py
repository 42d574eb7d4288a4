"""The Distributed Lion demo (examples/distributed_lion_demo.py) runs end to end with --quick."""

import json
import os
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, "examples", "distributed_lion_demo.py")
CONFIGS = ["D-Lion MaVo", "D-Lion Avg", "D-Lion Cub", "G-Lion", "1-bit Adam", "0/1 Adam", "G-AdamW"]


def test_demo_quick_writes_results(tmp_path):
    out = tmp_path / "results"
    proc = subprocess.run([sys.executable, DEMO, "--quick", "--out", str(out), "--timeout", "75"],
                          capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]

    for name in ("results.md", "results.json", "accuracy.png", "loss.png", "bytes.png"):
        assert (out / name).stat().st_size > 0, name

    table = (out / "results.md").read_text()
    for config in CONFIGS:
        assert f"| {config} |" in table, table

    summary = json.loads((out / "results.json").read_text())["summary"]
    assert set(summary) == set(CONFIGS)
    adamw_bytes = summary["G-AdamW"]["bytes_per_step"]
    assert adamw_bytes > 0
    for config in ("D-Lion MaVo", "D-Lion Avg"):
        assert 0 < summary[config]["bytes_per_step"] < adamw_bytes / 10, (config, summary[config])
        # D-Lion's premise: every rank applies the same update, so the replicas stay identical.
        assert summary[config]["replica_max_abs_diff"] == 0.0, summary[config]
    # The seed optimizers (issue 16): replicas identical wherever the algorithm synchronises every step.
    for config in ("D-Lion Cub", "1-bit Adam"):
        assert summary[config]["replica_max_abs_diff"] == 0.0, summary[config]
    assert 0 < summary["1-bit Adam"]["bytes_per_step"] < adamw_bytes, summary["1-bit Adam"]


def test_demo_configs_flag_picks_a_subset(tmp_path):
    summary = _run_quick(tmp_path / "subset", "--configs", "1-bit Adam")
    assert set(summary) == {"1-bit Adam", "G-Lion", "G-AdamW"}  # the references are always there


def _run_quick(out, *extra, task_timeout_s=75):
    proc = subprocess.run([sys.executable, DEMO, "--quick", "--out", str(out), "--timeout", str(task_timeout_s),
                           *extra], capture_output=True, text=True, timeout=task_timeout_s + 60)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return json.loads((out / "results.json").read_text())["summary"]


def test_demo_language_model_task_quick(tmp_path):
    """The GPU-sized task (a byte-level GPT on the standard library's source) in miniature, on the CPU."""
    summary = _run_quick(tmp_path / "lm", "--task", "lm")
    assert (tmp_path / "lm" / "val_loss.png").stat().st_size > 0
    for config in CONFIGS:
        # A byte model that learnt anything is below the uniform distribution's log(256) = 5.55 nats.
        assert 0 < summary[config]["metric_mean"] < 5.55, (config, summary[config])
    for config in ("D-Lion MaVo", "D-Lion Avg"):
        assert summary[config]["replica_max_abs_diff"] == 0.0, summary[config]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
def test_demo_on_cuda_quick(tmp_path):
    """--device cuda: the workers share the GPU; D-Lion replicas stay identical there too."""
    for task in ("digits", "lm"):
        # Every configuration, the compressed Adams' CUDA path included; workers importing torch's CUDA
        # build take ~14 s each, and other 4-rank GPU tests may share the GPU under xdist: more time.
        summary = _run_quick(tmp_path / task, "--task", task, "--device", "cuda", task_timeout_s=200)
        for config in ("D-Lion MaVo", "D-Lion Avg"):
            assert summary[config]["replica_max_abs_diff"] == 0.0, (task, summary[config])


def test_demo_help():
    proc = subprocess.run([sys.executable, DEMO, "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    for flag in ("--workers", "--epochs", "--seeds", "--width", "--out", "--quick", "--task", "--device"):
        assert flag in proc.stdout


@pytest.mark.skipif(not os.access(os.path.join(ROOT, ".venv", "bin", "python"), os.X_OK),
                    reason="demo.sh checks flags early only with the project's venv (else it would set one up)")
def test_demo_sh_refuses_bad_flags_before_building():
    # Exit status 2 and the demo's own message, within seconds: no set-up, no build first.
    proc = subprocess.run(["bash", os.path.join(ROOT, "scripts", "demo.sh"), "--workers", "0"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    assert "--workers, --epochs, --seeds, --width and --batch-size must be positive" in proc.stderr
    assert "setup:" not in proc.stdout + proc.stderr and "build" not in proc.stdout
