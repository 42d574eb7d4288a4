"""Optimizers that communicate through pride."""

from .distributed_lion import DistributedLion

__all__ = ["DistributedLion"]
