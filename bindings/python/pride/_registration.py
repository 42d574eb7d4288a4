"""Registration of the "pride" backend with torch.distributed."""

import torch.distributed as dist

from . import _C

BACKEND_NAME = "pride"


def _create_backend(store, rank, size, timeout):
    return _C.create_backend(store, rank, size, timeout)


def register_backend():
    """Makes ``init_process_group("pride")`` and "cpu:pride,cuda:nccl" work. Idempotent."""
    if BACKEND_NAME in dist.Backend.backend_list:
        return
    dist.Backend.register_backend(BACKEND_NAME, _create_backend, devices=["cpu"])
