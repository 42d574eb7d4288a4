"""Registration of the "pride" backend with torch.distributed."""

import torch.distributed as dist

from . import _C

BACKEND_NAME = "pride"


def _create_backend(store, rank, size, timeout):
    return _C.create_backend(store, rank, size, timeout)


def register_backend():
    """Makes ``init_process_group("pride")`` work for CPU and CUDA tensors, and "cpu:pride,cuda:nccl"
    too. Idempotent. A build without CUDA support still registers for "cuda", so that a CUDA tensor gets
    pride's own clear error instead of torch's "no backend for device"."""
    if BACKEND_NAME in dist.Backend.backend_list:
        return
    dist.Backend.register_backend(BACKEND_NAME, _create_backend, devices=["cpu", "cuda"])
