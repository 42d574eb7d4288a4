"""The Distributed Lion demo (examples/distributed_lion_demo.py) runs end to end with --quick."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, "examples", "distributed_lion_demo.py")
CONFIGS = ["D-Lion MaVo", "D-Lion Avg", "G-Lion", "G-AdamW"]


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


def test_demo_help():
    proc = subprocess.run([sys.executable, DEMO, "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    for flag in ("--workers", "--epochs", "--seeds", "--width", "--out", "--quick"):
        assert flag in proc.stdout
