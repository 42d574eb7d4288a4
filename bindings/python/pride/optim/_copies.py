"""Copies of pride's optimizers (copy.deepcopy, pickle): torch's Optimizer.__getstate__ keeps only
``defaults``, ``state`` and ``param_groups``, where torch's own optimizers keep everything. pride's keep
their settings (the group, the mode, ...) as attributes as well, so a copy made through torch's alone
lacked them and failed at its first step. The settings travel with the copy; the caches (CUDA
workspaces, flat buffers) start empty in it, as in a new optimizer."""

import copy

import torch.distributed as dist


class CopiesKeepSettings:
    """Mixin for a torch.optim.Optimizer subclass. ``_SETTINGS``: the attributes a copy keeps.
    ``_start_caches()``: makes the caches a copy lacks (called with the caches of a live optimizer
    present too, by torch's own load paths: it must leave those alone)."""

    _SETTINGS = ()

    def _start_caches(self):
        pass

    def __getstate__(self):
        state = super().__getstate__()
        for name in self._SETTINGS:
            state[name] = getattr(self, name)
        if state.get("group") is not None and dist.is_initialized() and state["group"] is dist.GroupMember.WORLD:
            state["group"] = None  # the same group, and one that pickles
        return state

    def __setstate__(self, state):
        super().__setstate__(state)
        self._start_caches()

    def __deepcopy__(self, memo):
        # A process group is the job's, not the optimizer's: the copy shares it (it cannot be copied).
        group = getattr(self, "group", None)
        if group is not None:
            memo.setdefault(id(group), group)
        twin = type(self).__new__(type(self))
        memo[id(self)] = twin
        twin.__setstate__(copy.deepcopy(self.__getstate__(), memo))
        return twin
