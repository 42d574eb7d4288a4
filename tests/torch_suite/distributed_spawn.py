"""torch's own distributed test suite (torch.testing._internal.distributed.distributed_test) against a
backend, the way torch's test/distributed/test_distributed_spawn.py runs it: one process per rank,
spawned per test, over a FileStore. Run by tests/python/test_torch_suite.py, or by hand:

    BACKEND=pride WORLD_SIZE=3 TEMP_DIR=$(mktemp -d) python -m pytest tests/torch_suite/distributed_spawn.py

BACKEND=gloo runs the same tests on torch's Gloo, the reference: every CPU test Gloo passes must pass
on pride. pride is registered in every DistTestCases feature set that Gloo is in.
"""

import os
import sys

import torch  # noqa: F401
import torch.distributed as dist
from torch.testing._internal.common_distributed import DistTestCases
from torch.testing._internal.common_utils import run_tests

import pride  # noqa: F401  registers the backend "pride"

# Features: pride implements what Gloo does (CPU and CUDA tensors, DDP, subgroups); it is a plugin.
for feature, backends in DistTestCases.backend_feature.items():
    if "gloo" in backends:
        backends.add("pride")
DistTestCases.backend_feature["plugin"].add("pride")
for collective, backends in DistTestCases.skip_collective.items():
    if "gloo" in backends:
        backends.add("pride")

if os.environ.get("BACKEND") not in ("pride", "gloo"):
    sys.exit("distributed_spawn.py: set BACKEND=pride (or gloo, the reference)")

# PRIDE_SUITE_AS_GLOO=1: the tests that torch gates on the backend's NAME being "gloo" (decorators
# evaluated at import, e.g. require_backend_is_available({"gloo"})) run too. The module is imported
# as for Gloo, then the process groups are created with pride (the module's BACKEND, which _run
# passes to init_process_group and the test bodies read).
_as_gloo = os.environ.get("PRIDE_SUITE_AS_GLOO") == "1" and os.environ["BACKEND"] == "pride"
if _as_gloo:
    os.environ["BACKEND"] = "gloo"
import torch.testing._internal.distributed.distributed_test as distributed_test  # noqa: E402
from torch.testing._internal.distributed.distributed_test import DistributedTest, TestDistBackend  # noqa: E402



class _PrideAsGloo(str):
    """ "pride" where the backend is used (init_process_group, sets of backends), yet equal to "gloo" in
    the test bodies' `BACKEND == "gloo"` checks, so that they take Gloo's CPU paths, as their decorators
    did at import."""

    def __eq__(self, other):
        return str.__eq__(self, other) or other == "gloo"

    def __ne__(self, other):
        return not self.__eq__(other)

    __hash__ = str.__hash__


if _as_gloo:
    os.environ["BACKEND"] = "pride"
    distributed_test.BACKEND = _PrideAsGloo("pride")


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        if os.environ.get("PRIDE_SUITE_START", "fork") == "spawn":
            self._spawn_processes()  # as torch's runner does: every rank imports torch afresh (slow)
        else:
            # fork: the ranks inherit the imported modules (about 1 s per test instead of 10 on two
            # cores). Safe here: the parent process never creates a process group or touches CUDA.
            self._start_processes(torch.multiprocessing.get_context("fork").Process)


if __name__ == "__main__":
    run_tests()
