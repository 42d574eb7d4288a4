"""Optimizers that communicate through pride: Distributed Lion, and 1-bit Adam and 0/1 Adam on the
1-bit compressed allreduce."""

from .distributed_lion import DistributedLion
from .lion_cub import MomentumSync
from .onebit_adam import OneBitAdam
from .zero_one_adam import ZeroOneAdam

__all__ = ["DistributedLion", "MomentumSync", "OneBitAdam", "ZeroOneAdam"]
