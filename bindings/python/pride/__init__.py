"""pride: bitwise sign-allreduce and a torch.distributed backend for Distributed Lion.

Importing pride registers the torch.distributed backend "pride"::

    import torch.distributed as dist
    import pride

    dist.init_process_group("pride")          # env:// under torchrun
    pride.sign_allreduce(t, mode="vote")      # in place: the element-wise majority of the ranks' signs
"""

import os

import torch  # noqa: F401  (loads libtorch before the extension that links it)
import torch.distributed  # noqa: F401

# UCX reads this when its library loads, below. Its memory-type cache learns of CUDA allocations as
# they are made, so it takes blocks that torch's caching allocator got before UCX started for host
# memory, even in a message tagged CUDA; without the cache UCX asks the CUDA driver about each device
# buffer (ucx_transport.cc). Host buffers are tagged as such and never looked up. The user's setting wins.
os.environ.setdefault("UCX_MEMTYPE_CACHE", "n")

from . import _C  # noqa: E402
from ._registration import register_backend as _register_backend
from .collectives import (
    compressed_allreduce,
    compressed_allreduce_server_numel,
    level_vote,
    reset_stats,
    sign_allreduce,
    sign_allreduce_packed,
    stats,
)
from . import ddp_hooks, optim
from .horovod import (
    broadcast_optimizer_state,
    broadcast_parameters,
    init,
    local_rank,
    local_size,
    rank,
    size,
)

__version__ = "0.1.0"

_register_backend()

__all__ = [
    "sign_allreduce",
    "sign_allreduce_packed",
    "compressed_allreduce",
    "compressed_allreduce_server_numel",
    "level_vote",
    "stats",
    "reset_stats",
    "init",
    "rank",
    "size",
    "local_rank",
    "local_size",
    "broadcast_parameters",
    "broadcast_optimizer_state",
]
