"""The Python benchmarks (perf/bench_vs_gloo.py, bench_dlion_step.py, bench_startup.py, bench_onebit_adam.py,
bench_lion_cub.py) and the link probe (perf/probe_links.py) run end to end.

Tiny sizes, 2 ranks: these check that the tools work and that their built-in checks hold (pride's
fp32 sum equals Gloo's; D-Lion replicas stay identical on every rank), not speed.
"""

import json
import os
import subprocess
import sys

import pytest

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
    assert set(result["median_slowest_own_s"]) == set(result["median_s"])
    assert all(t > 0 for t in result["median_slowest_own_s"].values())
    assert "the slowest rank's own call" in out


def test_bench_dlion_step_keeps_replicas_identical(tmp_path):
    out = run("bench_dlion_step.py", "--ranks", "2", "--log2-numel", "14", "--iters", "2",
              "--json", str(tmp_path / "r.json"))
    for case in ("D-Lion MaVo (pride)", "G-Lion (gloo fp32)", "G-AdamW (gloo fp32)"):
        assert case in out, out
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["numel"] == 1 << 14
    # 2 ranks: 1 bit of votes per parameter plus the result's bit(s), far below the fp32 ring's 32.
    assert 0 < result["dlion_bytes_per_step"] * 8 / result["numel"] < 4
    assert set(result["median_slowest_own_s"]) == set(result["median_s"])
    assert all(0 < result["median_slowest_own_s"][k] <= result["median_s"][k] * 4 for k in result["median_s"])


def test_bench_dlion_step_times_only_the_cases_asked_for(tmp_path):
    out = run("bench_dlion_step.py", "--ranks", "2", "--log2-numel", "12", "--iters", "2", "--cases", "mavo",
              "--json", str(tmp_path / "r.json"))
    result = json.loads((tmp_path / "r.json").read_text())
    assert set(result["median_s"]) == {"D-Lion MaVo (pride)"}, out
    assert result["dlion_bytes_per_step"] > 0
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "perf", "bench_dlion_step.py"), "--cases", "mavo,sgd"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--cases takes some of" in proc.stderr


def test_bench_startup_runs_its_jobs():
    # 3 ranks: a group size with a fold in the fingerprint check; the worker itself checks that the
    # first all_reduce summed every rank.
    out = run("bench_startup.py", "--ranks", "3", "--iters", "5", "--warmup", "1", "--repeat", "1")
    rows = [line.split() for line in out.splitlines() if line.strip() and not line.startswith("#")]
    assert len(rows) == 1 and rows[0][0] == "3", out
    startup, on, off, ratio = map(float, rows[0][1:])
    assert startup > 0 and on > 0 and off > 0 and abs(ratio - on / off) < 0.01 + 0.01 * ratio, out


def test_bench_startup_stops_a_job_past_its_timeout_and_says_so():
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "perf", "bench_startup.py"), "--ranks", "2",
                           "--iters", "100000000", "--repeat", "1", "--timeout", "3"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "ran past --timeout 3 s" in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]


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


def test_bench_vs_nccl_refuses_a_half_given_sweep():
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "perf", "bench_vs_nccl.py"), "-b", "4K"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "needs both -b and -e" in proc.stderr, proc.stderr
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "perf", "bench_vs_nccl.py"), "-b", "4Q", "-e", "1M"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "such as 4, 64K" in proc.stderr, proc.stderr


@pytest.mark.gpu
def test_bench_vs_nccl_sweep_rows_are_exact_and_cost_the_formula(tmp_path):
    """The nccl-tests-style sweep over NCCL (issue 14): every case of every size equals the host's int
    oracle on every rank (#wrong 0), and sign-allreduce's bits per element are SPEC §4's direct formula."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device (scripts/device_test.sh runs it on the GPU machine)")
    out = run("bench_vs_nccl.py", "--ranks", "2", "-b", "4K", "-e", "4M", "-f", "32", "--iters", "2", "--warmup", "1",
              "--json", str(tmp_path / "r.json"), timeout=300)
    assert "Out of bounds values : 0 OK" in out, out
    rows = json.loads((tmp_path / "r.json").read_text())["rows"]
    assert sorted({r["numel"] for r in rows}) == [1 << 10, 1 << 15, 1 << 20]
    assert len(rows) == 9 and all(r["wrong"] == 0 and r["time_s"] > 0 for r in rows), rows
    # N = 2, binary votes. Direct: (N-1)/N of the 1-bit votes out and of the 2 result planes (vote and
    # tie) back, 1.5 bits per element; allgather: (N-1) votes of 1 bit. The smallest size adds rounding.
    formula = {"nccl_direct": 1.5, "nccl_allgather": 1.0}
    for r in rows:
        if "sign" in r["name"] and r["numel"] >= 1 << 15:
            assert len(r["algorithms"]) == 1 and r["algorithms"][0] in formula, r
            assert abs(r["sign_bytes_sent"] * 8 / r["numel"] - formula[r["algorithms"][0]]) < 0.01, r


@pytest.mark.gpu
def test_bench_dlion_cuda_group_step_against_its_own_single_rank_step(tmp_path):
    """Issue 13's N-rank target is a ratio to pride's N = 1 step of the same run: the group's rows carry
    that step (timed first, alone) and the ratio, and the report prints it."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device (scripts/device_test.sh runs it on the GPU machine)")
    out = run("bench_dlion_cuda.py", "--params", "2e6", "--tensors", "5", "--world", "2", "--steps", "3",
              "--warmup", "1", "--json", str(tmp_path / "r.jsonl"), timeout=300)
    rows = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert sorted(r["rank"] for r in rows) == [0, 1] and all(r["world"] == 2 for r in rows), rows
    single = rows[0]["single_rank_ms"]
    assert single > 0 and all(r["single_rank_ms"] == single for r in rows), rows
    slowest = max(r["pride_ms"] for r in rows)
    assert abs(rows[0]["ratio_to_world_x_single"] - slowest / (2 * single)) < 1e-9, rows
    shared = rows[0]["shared_single_ms"]
    assert shared > 0 and abs(rows[0]["ratio_to_shared_single"] - slowest / shared) < 1e-9, rows
    assert "step / (2 x N = 1) =" in out and "not communicating" in out, out


def test_bench_dlion_cuda_separates_sharing_the_device_from_communicating(tmp_path):
    """The N-rank step is reported against the N = 1 step (issue 13's ratio) and against N N = 1 steps run
    at once without a group, which prices sharing one device by itself; on CPU tensors here (the same
    processes, barrier and report as on the GPU)."""
    out = run("bench_dlion_cuda.py", "--device", "cpu", "--params", "1e6", "--tensors", "4", "--world", "2",
              "--steps", "20", "--warmup", "1", "--json", str(tmp_path / "r.jsonl"), timeout=300)
    rows = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert sorted(r["rank"] for r in rows) == [0, 1] and all(r["device"] == "cpu" for r in rows), rows
    slowest = max(r["pride_ms"] for r in rows)
    single, shared = rows[0]["single_rank_ms"], rows[0]["shared_single_ms"]
    assert single > 0 and shared > 0 and all(r["shared_single_ms"] == shared for r in rows), rows
    assert abs(rows[0]["ratio_to_world_x_single"] - slowest / (2 * single)) < 1e-9, rows
    assert abs(rows[0]["ratio_to_shared_single"] - slowest / shared) < 1e-9, rows
    # The baseline's processes stepped at the same time (their timed windows overlap), and the group
    # communicated (each rank sent its vote).
    assert rows[0]["shared_overlap_s"] > 0, rows
    assert all(r["bytes_sent"] > 0 for r in rows), rows
    assert "step / (2 x N = 1) =" in out and "2 N = 1 steps at once, not communicating" in out, out
    assert "extra device memory" not in out, out
    assert "buckets of 16 MiB" in out, out  # DistributedLion's default on CPU (1024 MiB is CUDA's)


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


def test_bench_lion_cub_counts_each_configs_bytes(tmp_path):
    steps, numel, every, k = 20, 65536, 5, 4
    out = run("bench_lion_cub.py", "--ranks", "2", "--steps", str(steps), "--numel", str(numel), "--sync-every",
              str(every), "--sync-doubling-k", str(k), "--json", str(tmp_path / "r.json"))
    assert "Cub L1 doubling vs G-Lion" in out, out
    configs = json.loads((tmp_path / "r.json").read_text())["configs"]
    per_step = {name: c["bytes_sent"] / numel / steps for name, c in configs.items()}
    # At 2 ranks a ring allreduce sends 2(N-1)/N = 1 copy of the buffer: G-Lion 4 bytes per parameter,
    # the int8 sum 1; the vote's direct shards and results 1/16 byte each.
    assert abs(per_step["G-Lion"] - 4.0) < 0.01, per_step
    assert abs(per_step["D-Lion MaVo"] - 0.125) < 0.01, per_step
    assert abs(per_step["Cub int8 sign"] - 1.0) < 0.01, per_step
    # A momentum average adds a float32 allreduce of every momentum: 4 bytes per parameter on its steps.
    # The doubling schedule written out from its definition, T_{j+1} = floor(T_j + 2^(j/k)).
    schedule, t, j = set(), 0, 0
    while t <= steps:
        t = int(t + 2 ** (j / k))
        j += 1
        schedule.add(t)
    doubling_syncs = sum(1 for s in range(1, steps + 1) if s in schedule)
    assert 0 < doubling_syncs < steps
    assert abs(per_step["Cub L1 every K"] - (1 + 4 * (steps // every) / steps)) < 0.01, per_step
    assert abs(per_step["Cub L1 doubling"] - (1 + 4 * doubling_syncs / steps)) < 0.01, per_step
    assert all(c["rounds"] == steps for c in configs.values()), configs
    kinds = configs["Cub L1 every K"]["steps_by_kind"]
    assert kinds.get("int8+sync") == steps // every and sum(kinds.values()) == steps - 1, kinds
    # The level vote at 2 ranks: (N-1)/N = 1/2 of (planes + 2) bits, signs as levels ±1 (2 planes) and
    # L1 levels ±63 (7 planes); bits_per_element rounds the word-aligned chunks.
    assert abs(per_step["Cub levels sign"] - 0.5 * 4 / 8) < 0.01, per_step
    assert abs(per_step["Cub L1 levels every K"] - (0.5 * 9 / 8 + 4 * (steps // every) / steps)) < 0.01, per_step
    assert configs["Cub L1 levels every K"]["steps_by_kind"].get("levels+sync") == steps // every


def test_bench_lion_cub_runs_the_configs_asked_for_next_to_its_baseline(tmp_path):
    out = run("bench_lion_cub.py", "--ranks", "2", "--steps", "3", "--numel", "4096", "--configs",
              "Cub levels sign", "--json", str(tmp_path / "r.json"))
    configs = json.loads((tmp_path / "r.json").read_text())["configs"]
    assert list(configs) == ["G-Lion", "Cub levels sign"], configs
    assert "Cub levels sign vs G-Lion" in out and "D-Lion MaVo" not in out, out
    bad = subprocess.run([sys.executable, os.path.join(ROOT, "perf", "bench_lion_cub.py"), "--configs", "Cub huge"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "unknown Cub huge" in bad.stderr, bad.stderr


def load_probe_links():
    import importlib.util

    spec = importlib.util.spec_from_file_location("probe_links", os.path.join(ROOT, "perf", "probe_links.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_probe_links_pairs_one_stream_per_host_link():
    probe = load_probe_links()
    two_by_two = ["a", "a", "b", "b"]
    assert [probe.partners(two_by_two, r) for r in range(4)] == [(2, 2), (None, None), (0, 0), (None, None)]
    uneven = ["x", "y", "x", "z", "y"]  # hosts in order of their first rank: x, y, z
    assert [probe.partners(uneven, r) for r in range(5)] == [(1, 3), (3, 0), (None, None), (0, 1), (None, None)]
    one_host = ["h", "h", "h"]
    assert [probe.partners(one_host, r) for r in range(3)] == [(1, 2), (2, 0), (0, 1)]
    assert probe.partners(["h"], 0) == (None, None)


def test_probe_links_summary_takes_the_slowest_hosts_best_round_and_half_the_round_trip():
    probe = load_probe_links()
    gbit = 125_000_000  # bytes in one gigabit
    result = {"ranks": 3, "bytes": gbit, "hosts": ["a", "b"], "per_rank": [
        {"host": "a", "sends": True, "times": [1.0, 2.0, 1.0], "rtts": [100e-6, 300e-6, 200e-6]},
        {"host": "a", "sends": False, "times": [5.0, 5.0, 5.0], "rtts": []},
        {"host": "b", "sends": True, "times": [0.5, 0.5, 0.25], "rtts": [200e-6, 200e-6, 200e-6]},
    ]}
    s = probe.summarize(result)
    # Host a's rounds: 1, 0.5, 1 Gbit/s; host b's: 2, 2, 4.
    assert s["per_host_gbit_per_s"] == {"a": 1.0, "b": 4.0}  # best rounds
    assert s["per_host_median_gbit_per_s"] == {"a": 1.0, "b": 2.0}
    assert s["per_host_rounds_gbit_per_s"] == {"a": [1.0, 0.5, 1.0], "b": [2.0, 2.0, 4.0]}
    assert s["slowest_host"] == "a" and s["gbit_per_s"] == 1.0
    assert abs(s["latency_us"] - 100.0) < 1e-9  # median round trip 200 us


def test_probe_links_on_one_host_measures_and_sets_nothing(tmp_path):
    out = run("probe_links.py", "--ranks", "2", "--bytes", "1M", "--iters", "2", "--pings", "5",
              "--json", str(tmp_path / "s.json"))
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["hosts"] == 1 and s["ranks"] == 2 and s["bytes"] == 1 << 20
    assert s["gbit_per_s"] > 0 and s["latency_us"] > 0
    assert "nothing to set" in out and "export" not in out, out


def test_probe_links_between_two_named_hosts_prints_the_settings(tmp_path):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   PRIDE_HOSTNAME=f"probe-host{rank}")
        procs.append(subprocess.Popen(
            [sys.executable, os.path.join(ROOT, "perf", "probe_links.py"), "--env", "--bytes", "1M", "--iters", "2",
             "--pings", "5", "--json", str(tmp_path / "s.json")],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    out = outs[0][0]
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["hosts"] == 2 and set(s["per_host_gbit_per_s"]) == {"probe-host0", "probe-host1"}
    assert f"export PRIDE_LINK_BANDWIDTH_GBPS={s['gbit_per_s']:.3g}" in out, out
    assert f"export PRIDE_LINK_LATENCY_US={s['latency_us']:.3g}" in out, out


def test_probe_links_refuses_bad_sizes():
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "perf", "probe_links.py"), "--bytes", "12Q"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "not a size" in proc.stderr, proc.stderr


@pytest.mark.parametrize("script,args,message", [
    ("bench_vs_gloo.py", ["--ranks", "0"], "--ranks must be at least 1"),
    ("bench_dlion_step.py", ["--iters", "0"], "--iters must be at least 1"),
    ("bench_lion_step.py", ["--log2-numel", "-1"], "--log2-numel must be in [0, 34]"),
    ("bench_onebit_adam.py", ["--warmup-fraction", "0.5", "--steps", "0"], "--steps must be at least 1"),
    ("bench_lion_cub.py", ["--env"], "RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT not set"),
    ("probe_links.py", ["--warmup", "-1"], "--warmup must be at least 0"),
    ("bench_dlion_cuda.py", ["--device", "cpu", "--steps", "0"], "--steps must be at least 1"),
    ("bench_dlion_cuda.py", ["--device", "cpu", "--params", "0"], "--params and --tensors must be at least 1"),
    ("bench_dlion_cuda.py", ["--device", "cpu", "--bucket-mb", "0"], "--bucket-mb must be positive"),
])
def test_benchmarks_refuse_bad_input_before_starting_ranks(script, args, message):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "perf", script), *args],
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr[-2000:]
