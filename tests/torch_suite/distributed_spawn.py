"""torch's own distributed test suite (torch.testing._internal.distributed.distributed_test) against a
backend, the way torch's test/distributed/test_distributed_spawn.py runs it: one process per rank,
spawned per test, over a FileStore. Run by tests/python/test_torch_suite.py, or by hand:

    BACKEND=pride WORLD_SIZE=3 TEMP_DIR=$(mktemp -d) python -m pytest tests/torch_suite/distributed_spawn.py

BACKEND=gloo runs the same tests on torch's Gloo, the reference: every CPU test Gloo passes must pass
on pride. pride is registered in every DistTestCases feature set that Gloo is in.

On a GPU machine, BACKEND=nccl runs them on torch's ProcessGroupNCCL, and BACKEND=pride with
PRIDE_SUITE_AS=nccl runs the same tests as NCCL's, on pride groups whose CUDA tensors go over pride's
NCCL transport (issue 14): every test NCCL passes must pass there. With PRIDE_SUITE_ONE_GPU=1 the ranks
share the one GPU, each as a host of its own to NCCL (NCCL_HOSTID), as pride's NCCL tests run. Both
start each rank afresh (spawn): the decorators evaluated at import have asked CUDA for its devices.
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

if os.environ.get("BACKEND") not in ("pride", "gloo", "nccl"):
    sys.exit("distributed_spawn.py: set BACKEND=pride (or gloo or nccl, the references)")

# PRIDE_SUITE_AS=gloo (or PRIDE_SUITE_AS_GLOO=1): the tests that torch gates on the backend's NAME being
# "gloo" (decorators evaluated at import, e.g. require_backend_is_available({"gloo"})) run too. The
# module is imported as for Gloo, then the process groups are created with pride (the module's
# BACKEND, which _run passes to init_process_group and the test bodies read). PRIDE_SUITE_AS=nccl does
# the same with NCCL's name, so that the tests take NCCL's CUDA paths.
_as = os.environ.get("PRIDE_SUITE_AS", "gloo" if os.environ.get("PRIDE_SUITE_AS_GLOO") == "1" else "")
if _as not in ("", "gloo", "nccl"):
    sys.exit(f"distributed_spawn.py: PRIDE_SUITE_AS must be gloo or nccl, got {_as!r}")
_as = _as if os.environ["BACKEND"] == "pride" else ""
if _as == "nccl":
    for feature, backends in DistTestCases.backend_feature.items():
        if "nccl" in backends:
            backends.add("pride")
if _as:
    os.environ["BACKEND"] = _as
import torch.testing._internal.distributed.distributed_test as distributed_test  # noqa: E402
from torch.testing._internal.distributed.distributed_test import DistributedTest, TestDistBackend  # noqa: E402



class _PrideAs(str):
    """ "pride" where the backend is used (init_process_group, sets of backends), yet equal to the
    reference's name ("gloo" or "nccl") in the test bodies' `BACKEND == ...` checks, so that they take
    that backend's paths, as their decorators did at import."""

    def __new__(cls, reference):
        self = super().__new__(cls, "pride")
        self.reference = reference
        return self

    def __eq__(self, other):
        return str.__eq__(self, other) or other == self.reference

    def __ne__(self, other):
        return not self.__eq__(other)

    __hash__ = str.__hash__


if _as:
    os.environ["BACKEND"] = "pride"
    distributed_test.BACKEND = _PrideAs(_as)


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    @classmethod
    def _run(cls, rank, *args, **kwargs):
        if os.environ.get("PRIDE_SUITE_ONE_GPU") == "1":  # in the rank's process, before any group
            os.environ["NCCL_HOSTID"] = f"pride-suite-host-{rank}"  # each rank a host of its own to NCCL
            os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
            os.environ.setdefault("NCCL_IB_DISABLE", "1")
            os.environ.setdefault("NCCL_MNNVL_ENABLE", "0")
            os.environ.setdefault("PRIDE_CUDA_TRANSPORT", "nccl")
            # torch's gates want a GPU per rank (_run and skip_if_no_gpu compare device_count() with
            # WORLD_SIZE) and init_multigpu_helper divides the GPUs among the ranks (none each here):
            # every rank gets GPU 0 instead. c10d's own device choice reads the C++ count, untouched.
            # CUDA's lazy init checks every device up to device_count(): it runs first, on the real count
            # (torch.cuda.random imported device_count by name, so seeding keeps the real one too).
            torch.cuda.init()
            ranks, real = int(os.environ["WORLD_SIZE"]), torch.cuda.device_count()
            torch.cuda.device_count = lambda: max(real, ranks)
            distributed_test.init_multigpu_helper = lambda world_size, backend: {r: [0] for r in range(world_size)}
            # Some tests also call torch.cuda.set_device(self.rank) before taking rank_to_GPU's device:
            # rank 1 would ask for a GPU that is not there (the first device run: invalid device ordinal
            # for NCCL and pride alike). It selects GPU 0, as init_multigpu_helper does.
            one_gpu_set_device = torch.cuda.set_device
            torch.cuda.set_device = lambda device: one_gpu_set_device(0)
        super()._run(rank, *args, **kwargs)

    def setUp(self):
        super().setUp()
        spawn = os.environ.get("PRIDE_SUITE_START", "fork") == "spawn" or os.environ["BACKEND"] == "nccl" or _as == "nccl"
        if spawn:
            self._spawn_processes()  # as torch's runner does: every rank imports torch afresh (slow)
        else:
            # fork: the ranks inherit the imported modules (about 1 s per test instead of 10 on two
            # cores). Safe here: the parent process never creates a process group or touches CUDA.
            self._start_processes(torch.multiprocessing.get_context("fork").Process)


if __name__ == "__main__":
    run_tests()
