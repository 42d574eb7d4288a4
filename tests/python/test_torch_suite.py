"""torch's own distributed test suite against pride (issue 11): every CPU test that torch's Gloo passes
in torch.testing._internal.distributed.distributed_test passes on pride, WORLD_SIZE=3.

Three runs of tests/torch_suite/distributed_spawn.py, each in its own process, on the torch installed:
  gloo            the reference: which tests Gloo passes here;
  pride           pride under its own name (its DistTestCases feature sets are Gloo's);
  pride, as Gloo  the tests torch gates on the backend's name being "gloo" run too, on pride groups.
A test Gloo passes must pass in the third run; no test may fail in the second. KNOWN_SKIPS says why
each exception cannot pass on any third-party backend.
"""

import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SUITE = "tests/torch_suite/distributed_spawn.py"  # relative to ROOT, where the runs start: node ids below

KNOWN_SKIPS = {
    "test_ddp_logging_data_cpu":
        "DDP's logging data reports ProcessGroup::getBackendName(), which torch fixes at 'custom' for every "
        "third-party backend (BackendType::CUSTOM, c10d/ProcessGroup.hpp); the test compares it with "
        "dist.get_backend(), 'pride'",
}


def _monitored_barrier_refuses_plugins():
    """torch before 2.14 (2.11 here) raises in dist.monitored_barrier for every backend not named gloo."""
    import inspect

    import torch.distributed.distributed_c10d as c10d

    return "only implemented for GLOO" in inspect.getsource(c10d.monitored_barrier)


if _monitored_barrier_refuses_plugins():
    for _name in ("test_monitored_barrier_gloo", "test_monitored_barrier_gloo_subgroup"):
        KNOWN_SKIPS[_name] = (
            "this torch's dist.monitored_barrier raises 'only implemented for GLOO backend' for any other "
            "backend before calling it; pride's monitoredBarrier still runs in "
            "test_monitored_barrier_gloo_rank_0_timeout (ProcessGroup.monitored_barrier)")


def run_suite(tmp_path, name, backend, as_gloo=False):
    xml = tmp_path / f"{name}.xml"
    temp_dir = tmp_path / f"{name}-tmp"
    temp_dir.mkdir()
    env = dict(os.environ, BACKEND=backend, WORLD_SIZE="3", TEMP_DIR=str(temp_dir),
               PRIDE_SUITE_AS_GLOO="1" if as_gloo else "0", PYTORCH_PRINT_REPRO_ON_FAILURE="0")
    deselect = [f"--deselect={SUITE}::TestDistBackendWithSpawn::{t}" for t in KNOWN_SKIPS]
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", ROOT, SUITE,
                           f"--junitxml={xml}", *deselect], env=env, capture_output=True, text=True, timeout=1200,
                          cwd=ROOT)
    if not xml.exists():
        pytest.fail(f"the {name} run produced no report:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    results = {}
    for case in ET.parse(xml).iter("testcase"):
        status, message = "passed", ""
        for child in case:
            if child.tag in ("skipped", "failure", "error"):
                status, message = child.tag, (child.get("message") or "")[:300]
        results[case.get("name")] = (status, message)
    return results


def test_every_cpu_test_gloo_passes_passes_on_pride(tmp_path):
    pytest.importorskip("expecttest")  # torch's test utilities need it (scripts/setup.sh installs it)
    gloo = run_suite(tmp_path, "gloo", "gloo")
    gloo_passes = sorted(t for t, (status, _) in gloo.items() if status == "passed")
    assert len(gloo_passes) > 50, f"Gloo passed only {len(gloo_passes)} tests: the reference run is broken"

    assert not set(KNOWN_SKIPS) & set(gloo), f"known skips were not deselected: {set(KNOWN_SKIPS) & set(gloo)}"
    pride = run_suite(tmp_path, "pride", "pride")
    failed = {t: m for t, (status, m) in pride.items() if status in ("failure", "error")}
    assert not failed, f"failed on pride: {failed}"

    as_gloo = run_suite(tmp_path, "pride-as-gloo", "pride", as_gloo=True)
    missing = {t: as_gloo.get(t, ("absent", "")) for t in gloo_passes if as_gloo.get(t, ("absent",))[0] != "passed"}
    assert not missing, f"tests Gloo passes that pride does not: {missing}"
    print(f"Gloo passes {len(gloo_passes)}; pride passes all of them "
          f"({sum(s == 'passed' for s, _ in pride.values())} under its own name)")
