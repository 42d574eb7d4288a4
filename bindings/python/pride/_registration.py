"""Registration of the "pride" backend with torch.distributed."""

import torch.distributed as dist

from . import _C

BACKEND_NAME = "pride"


def _create_backend(store, rank, size, timeout):
    return _C.create_backend(store, rank, size, timeout)


def _devices():
    """The devices pride registers for: "cpu", and "cuda" where this process sees a CUDA device.

    A build without CUDA support still registers for "cuda" on a machine with a GPU, so that a CUDA
    tensor gets pride's own clear error instead of torch's "no backend for device". Without a GPU it
    does not: torch code that picks a device from the backend's devices (ShardedTensor.gather, for any
    backend but "nccl" and "gloo") then took "cuda" and failed with "Found no NVIDIA driver", where
    Gloo works. torch.cuda.device_count() asks NVML first, so that it does not initialise CUDA (which
    would keep forked children from using it)."""
    import torch

    return ["cpu", "cuda"] if torch.cuda.device_count() > 0 else ["cpu"]


def register_backend():
    """Makes ``init_process_group("pride")`` work for CPU tensors, and for CUDA tensors where a GPU is
    visible (see _devices); "cpu:pride,cuda:nccl" too. Idempotent."""
    if BACKEND_NAME in dist.Backend.backend_list:
        return
    dist.Backend.register_backend(BACKEND_NAME, _create_backend, devices=_devices())
