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
                          (["--files", str(tmp_path / "nowheels"), "--budget", "60"], "no wheels in"),
                          (["--pytest-k"], "--pytest-k needs a value"),
                          (["--bench-quick", "--bench-cpu"], "--bench-quick and --bench-cpu exclude each other")):
        proc = subprocess.run(["bash", "scripts/device_test.sh", "--out", out, *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and message in proc.stdout + proc.stderr, (args, proc.stdout, proc.stderr)
    proc = subprocess.run(["bash", "scripts/device_test.sh", "--help"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0 and "--budget S" in proc.stdout and "--pytest-k EXPR" in proc.stdout


def test_device_bench_refuses_a_flag_without_its_value_and_flags_that_exclude_each_other(tmp_path):
    for args, message in ((["--out"], "--out needs a value"), (["--build-dir"], "--build-dir needs a value"),
                          (["--quick", "--cpu"], "--quick and --cpu exclude each other")):
        proc = subprocess.run(["bash", "scripts/device_bench.sh", *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=60, env=dict(os.environ, OUT=str(tmp_path / "out")))
        assert proc.returncode == 2 and message in proc.stdout + proc.stderr, (args, proc.stdout, proc.stderr)


def test_every_scripts_help_prints_its_whole_header():
    # Each script's --help prints its opening comment (where the options are written down). Fixed line
    # ranges drifted as the comments grew and cut off usage lines; the header must come out whole.
    scripts = sorted(f for f in os.listdir(os.path.join(ROOT, "scripts"))
                     if f.endswith(".sh") and f != "phase_budget.sh")  # phase_budget.sh is sourced, not run
    assert "device_test.sh" in scripts and "test.sh" in scripts
    for name in scripts:
        path = os.path.join(ROOT, "scripts", name)
        header = []
        with open(path) as f:
            for number, line in enumerate(f, 1):
                if number == 1:
                    continue
                if not line.startswith("#"):
                    break
                header.append(line.rstrip("\n"))
        assert header, name
        proc = subprocess.run(["bash", path, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, (name, proc.stdout, proc.stderr)
        printed = proc.stdout.splitlines()
        missing = [line for line in header if line not in printed]
        assert not missing, (name, missing)


def _stand_in_python(tmp_path, first_build_output):
    # A python3 for device_test.sh whose pip "builds" by logging its arguments: the first build fails
    # with the given output, a build without precompiled headers succeeds; pytest passes one test.
    calls = tmp_path / "builds.txt"
    output = tmp_path / "first-build-output.txt"
    output.write_text(first_build_output + "\n")
    script = tmp_path / "python3"
    script.write_text(f"""#!/usr/bin/env bash
case "$*" in
  *"pip install"*build-dir*)
    echo "$*" >>{calls}
    case "$*" in *CMAKE_DISABLE_PRECOMPILE_HEADERS=ON*) exit 0 ;; esac
    cat {output}; exit 1 ;;
  *"pip install"*) exit 0 ;;
  *"-m pytest"*) echo "1 passed in 0.01s"; exit 0 ;;
  *) exit 1 ;;
esac
""")
    script.chmod(0o755)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "stand_in-1.0-py3-none-any.whl").write_bytes(b"")
    return script, wheels, calls


def test_device_test_builds_again_without_precompiled_headers_only_when_they_failed(tmp_path):
    for output, retried in (
            ("[12/160] Building CXX object torch_plugin/CMakeFiles/pride_torch_plugin.dir/cmake_pch.hxx.gch\n"
             "FAILED: torch_plugin/CMakeFiles/pride_torch_plugin.dir/cmake_pch.hxx.gch", True),
            # cmake_pch in a progress line, the failure elsewhere: the build is not tried again
            ("[12/160] Building CXX object torch_plugin/CMakeFiles/pride_torch_plugin.dir/cmake_pch.hxx.gch\n"
             "FAILED: torch_plugin/CMakeFiles/pride_torch_plugin.dir/level_vote.cc.o\n"
             "level_vote.cc:10: error: expected ';'", False)):
        case = tmp_path / ("retried" if retried else "not_retried")
        case.mkdir()
        python, wheels, calls = _stand_in_python(case, output)
        out = case / "out"
        proc = subprocess.run(["bash", "scripts/device_test.sh", "--files", str(wheels), "--out", str(out),
                               "--suite", "pytest", "--pytest-k", "nothing"], cwd=ROOT, capture_output=True,
                              text=True, timeout=60,
                              env={**os.environ, "PRIDE_PY": str(python), "PRIDE_DEVICE_BUILD": str(case / "build"),
                                   "PRIDE_DEVICE_SITE": str(case / "site")})
        builds = calls.read_text().splitlines()
        summary = (out / "summary.md").read_text()
        if retried:
            assert proc.returncode == 0, proc.stdout + proc.stderr
            assert len(builds) == 2 and "CMAKE_DISABLE_PRECOMPILE_HEADERS=ON" in builds[1], builds
            assert "without them" in summary and "- build: ok" in summary, summary
            assert (out / "build-pch.log").exists()
        else:
            assert proc.returncode == 1 and "build failed" in proc.stdout, proc.stdout + proc.stderr
            assert len(builds) == 1, builds
            assert "- build: FAILED" in summary, summary
