"""What 1-bit Adam and 0/1 Adam share: Adam's arithmetic in torch's own operation order, full-precision
gradient averaging, the 1-bit compressed allreduce over a parameter group's flat buffer, and error state
that is saved and loaded with the optimizer (DeepSpeed resets it on load; here resume is exact).

Each parameter group is one flat float32 buffer for communication (DeepSpeed flattens each group too):
one worker scale per group and call, the group's worker error (its numel) and server error (this
rank's owned chunk) in the state of the group's first parameter. Schedule counters live in the
param_group dict, so state_dict() carries them.

Missing gradients, as torch's AdamW treats them: a parameter without a gradient on every rank (frozen,
or a branch no rank's batch reached) takes no step at all, not even weight decay, and its moments stay
as they are. One without a gradient on some ranks only counts as zeros there (DDP's
find_unused_parameters does the same). The ranks agree on which is which, and check that their groups
and settings match, through one allreduce of a byte per parameter (plus 17) at the start of each step
that communicates (0/1 Adam's local steps send nothing: there each rank steps what it has gradients for).
An absent parameter keeps its place in the group's flat vector, so the error state keeps its layout:
its part carries what it would send with nothing new (its momentum, or zeros), and the result there is
not applied.
"""

import hashlib
import logging
import weakref

import torch
import torch.distributed as dist

from .. import ddp_hooks
from ..collectives import _not_a_member, _refuse_a_non_member, compressed_allreduce, compressed_allreduce_server_numel
from . import _grad_scaler
from ._copies import CopiesKeepSettings
from ._param_groups import no_duplicates

_log = logging.getLogger("pride")

_DTYPES = (torch.float32, torch.bfloat16, torch.float16)

# The square root of the variance in the torch operations' path. torch's CPU sqrt (MKL's vector math)
# is not correctly rounded, unlike CUDA's and pride's fused kernels' (compressed_adam.h); the tests put
# a correctly rounded one here to compare that path with the fused kernels bit for bit.
_sqrt = torch.sqrt


class CompressedAdamBase(CopiesKeepSettings, torch.optim.Optimizer):
    """Shared machinery; see OneBitAdam and ZeroOneAdam."""

    _name = "CompressedAdam"
    _SETTINGS = ("group",)  # what copy.deepcopy and pickle keep besides torch's own (_copies.py)
    # torch.amp.GradScaler calls step() every time and leaves the overflow decision to it: skipped on
    # every rank when any rank overflowed (_grad_scaler.py).
    _step_supports_amp_scaling = True

    def __init__(self, params, defaults, group=None):
        lr, betas, eps, wd = defaults["lr"], defaults["betas"], defaults["eps"], defaults["weight_decay"]
        if not lr >= 0.0:
            raise ValueError(f"{self._name}: invalid learning rate {lr}")
        if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"{self._name}: invalid betas {betas}")
        if not eps >= 0.0:
            raise ValueError(f"{self._name}: invalid eps {eps}")
        if not wd >= 0.0:
            raise ValueError(f"{self._name}: invalid weight_decay {wd}")
        defaults = dict(defaults, betas=tuple(betas))
        super().__init__(params, defaults)  # checks each group in add_param_group
        self.group = group
        self._check_group()

    def add_param_group(self, param_group):
        """torch's add_param_group, with what the flat buffers need: no tensor twice, float32, bfloat16
        or float16 parameters on one device per group. A group that fails is not added."""
        no_duplicates(param_group, self._name)
        super().add_param_group(param_group)
        params = self.param_groups[-1]["params"]
        problem = None
        devices = {p.device for p in params}
        if len(devices) > 1:
            problem = ValueError(f"{self._name}: a parameter group's parameters must share one device, got {devices}")
        for p in params:
            if p.dtype not in _DTYPES:
                problem = TypeError(f"{self._name}: parameters must be float32, bfloat16 or float16, got {p.dtype}")
        if problem is not None:
            self.param_groups.pop()
            raise problem

    # ---- The group ----
    def _check_group(self):
        if not dist.is_initialized():
            return
        if not _not_a_member(self.group) and dist.get_world_size(self.group) > 1:
            from ..collectives import _pride_backend

            _pride_backend(self.group, f"optim.{self._name}")  # the compressed allreduce needs pride

    def _world(self):
        if not dist.is_initialized():
            return 0, 1
        return dist.get_rank(self.group), dist.get_world_size(self.group)

    def attach(self, ddp_model):
        """Makes the DistributedDataParallel model holding these parameters keep each rank's gradients
        local (pride.ddp_hooks.local_gradients_hook): the optimizer does all the communication itself,
        full precision where its schedule says so and 1-bit otherwise. Returns the model."""
        mine = {id(p) for g in self.param_groups for p in g["params"]}
        if not any(id(p) in mine for p in ddp_model.parameters()):
            raise ValueError(f"{self._name}.attach: none of this optimizer's parameters belong to the model")
        if not ddp_hooks.has_local_gradients_hook(ddp_model):
            if getattr(ddp_model, "_comm_hooks", []):
                raise ValueError(f"{self._name}.attach: the model has a communication hook already")
            ddp_model.register_comm_hook(None, ddp_hooks.local_gradients_hook)
        return ddp_model

    @torch.no_grad()
    def step(self, closure=None):
        _refuse_a_non_member(self.group, f"optim.{self._name}")
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        plans, overflowed = self._agree()
        if overflowed:  # some rank's gradients overflowed under a GradScaler: every rank skips the step
            return loss
        _grad_scaler.unscale_gradients(self)
        for g, (present, synced) in zip(self.param_groups, plans):
            if g["params"]:
                self._create_state(g)
                self._step_group(g, present, synced)
        return loss

    def _create_state(self, g):
        """Every state entry the group will ever have, at its first step. torch's DCP state-dict API loads
        only the entries that a step on a fresh optimizer creates (it takes one with lr 0 first, then
        loads into what exists): entries made later, such as the errors at the first compressed step,
        would be dropped by its flattened path."""
        if "worker_error" in self.state[g["params"][0]]:
            return  # made at the group's first step (or loaded)
        self._errors(g)
        for p in g["params"]:
            self._moments(p)

    def _step_group(self, g, present, synced):
        """One step of group g. present[i]: whether its parameter i steps (it has a gradient on some rank;
        on a local step, on this rank); synced[i] (a synchronisation only, else None): whether it
        synchronises."""
        raise NotImplementedError

    def _next_step(self, g):
        """What group g's next step needs from the other ranks: "agree" (it communicates: presence is
        agreed), "sync" (a synchronisation after local steps: which parameters moved is agreed) or
        "local" (nothing: no collective at all)."""
        return "agree"

    def _moved_since_sync(self, p):
        return False

    # ---- What the ranks agree on before a step ----
    def _agree(self):
        """Per group, (present, synced) for _step_group, and whether the step is skipped for an overflow
        under a GradScaler; on every step that communicates, a check that the ranks' groups, parameter
        shapes, dtypes, settings and schedule counters match (as DistributedLion checks its layout), so
        that ranks that differ get an error naming the difference instead of compressed steps paired
        wrongly (ranks with different numbers of parameters send allreduces of different sizes: pride's
        own check of the call then raises, naming both sizes). One uint8 MAX allreduce: a byte per
        parameter of each group that communicates, the overflow, then an 8-byte digest d and 255 − d,
        whose maxima sum to 255 everywhere only when every rank has the same d. A step on which every group is local sends nothing: a rank whose
        gradients overflowed takes it without gradients (its schedules must stay the other ranks')."""
        _, world = self._world()
        kinds = [self._next_step(g) for g in self.param_groups]
        local = [[p.grad is not None for p in g["params"]] for g in self.param_groups]
        # What each group's flags say: presence, or presence or movement since the last synchronisation.
        flags = [here if kind != "sync" else [h or self._moved_since_sync(p) for h, p in zip(here, g["params"])]
                 for g, here, kind in zip(self.param_groups, local, kinds)]
        overflowed = _grad_scaler.overflowed(self)
        if world == 1 or all(kind == "local" for kind in kinds):
            if overflowed and world > 1:
                local = [[False] * len(here) for here in local]
            return [(here, None if kind != "sync" else mine) for here, mine, kind in zip(local, flags, kinds)], \
                world == 1 and overflowed
        sent = [int(f) for group, kind in zip(flags, kinds) if kind != "local" for f in group] + [int(overflowed)]
        digest = self._settings_digest()
        agreed = torch.tensor(sent + list(digest) + [255 - b for b in digest], dtype=torch.uint8)
        dist.all_reduce(agreed, op=dist.ReduceOp.MAX, group=self.group)
        n = len(sent)
        if not bool(((agreed[n:n + 8].int() + agreed[n + 8:].int()) == 255).all()):
            self._raise_settings_mismatch()
        agreed = agreed[:n].tolist()
        plans, start = [], 0
        for here, kind in zip(local, kinds):
            if kind == "local":
                plans.append((here, None))
                continue
            theirs = [bool(x) for x in agreed[start:start + len(here)]]
            start += len(here)
            # A synchronisation's local step stays local (this rank's gradients); the set it synchronises
            # is everyone's.
            plans.append((theirs, None) if kind == "agree" else (here, theirs))
        return plans, bool(agreed[-1])

    def _settings_digest(self):
        """8 bytes of _settings(). The parameters' part is kept while the parameters are the same tensors
        of the same shapes and dtypes (its repr and hash are the costly part); the groups'
        settings and counters, a few numbers that change every step, are hashed each time."""
        key = tuple((id(p), p.shape, p.dtype) for g in self.param_groups for p in g["params"])
        kept = self.__dict__.get("_parameters_digested")
        if kept is None or kept[0] != key:
            parameters = [entry for entry in self._settings() if entry[1].startswith("parameter ")]
            kept = (key, hashlib.blake2b(repr(parameters).encode(), digest_size=8).digest())
            self.__dict__["_parameters_digested"] = kept
        groups = [entry for entry in self._settings(parameters=False)]
        return hashlib.blake2b(kept[1] + repr(groups).encode(), digest_size=8).digest()

    def _settings(self, parameters=True):
        """What every rank must have the same of: each group's settings and counters, and its parameters'
        shapes and dtypes, as (group, what, value) entries."""
        out = []
        for i, g in enumerate(self.param_groups):
            out.append((i, "number of parameters", len(g["params"])))
            # This optimizer's own keys only: others (a scheduler's, a framework's) may hold objects whose
            # repr differs between processes.
            for key in sorted(k for k in g if k in self.defaults and k != "params"):
                value = g[key]
                out.append((i, key, value.tolist() if torch.is_tensor(value) else value))
            for j, p in enumerate(g["params"] if parameters else ()):
                out.append((i, f"parameter {j}", (tuple(p.shape), str(p.dtype).replace("torch.", ""))))
        return out

    def _raise_settings_mismatch(self):
        """Every rank saw the mismatch (the same allreduce result): they exchange their settings to name
        the first difference, and all raise."""
        rank, world = self._world()
        everyone = [None] * world
        dist.all_gather_object(everyone, self._settings(), group=self.group)
        where = "the number of parameter groups"
        for entries in zip(*everyone):
            if any(e != entries[0] for e in entries[1:]):
                group, what = entries[0][0], entries[0][1]
                values = ", ".join(f"rank {r} has {e[2]!r}" if (e[0], e[1]) == (group, what) else
                                   f"rank {r} has group {e[0]}'s {e[1]}" for r, e in enumerate(entries))
                where = f"parameter group {group}, {what}: {values}"
                break
        raise ValueError(f"{self._name} (rank {rank} of {world}): the ranks' optimizers differ in {where}. Every "
                         f"rank must build the same parameter groups with the same settings and call step() "
                         f"the same number of times")

    # ---- Saving and loading ----
    # The error-feedback buffers are this rank's own. In a state dict each one is a dict with one entry,
    # keyed by the rank and world size that saved it ({"rank1_of4": tensor}): torch.distributed.checkpoint
    # writes one copy of each key for all ranks (dcp.save keeps one rank's tensor where several ranks
    # give the same name) and its state-dict API keeps only "state" and "param_groups", so a plain
    # "worker_error" came back as one rank's on every rank, or did not fit the server error's size.
    # Keys of their own keep every rank's copy in a checkpoint, and say whose a loaded one is.
    _PER_RANK = ("worker_error", "server_error")

    def state_dict(self):
        """torch's state dict (moments, errors, schedule counters). The errors are this rank's own, under
        "rank<r>_of<n>": save every rank's state_dict() (or all of them through
        torch.distributed.checkpoint, which keeps each rank's) to resume exactly."""
        state = super().state_dict()
        rank, world = self._world()
        mine = self._per_rank_key(rank, world)
        state["state"] = {
            index: {key: ({mine: value} if key in self._PER_RANK and torch.is_tensor(value) else value)
                    for key, value in entry.items()}
            for index, entry in state["state"].items()}  # copies: torch's entries are the live ones
        state["pride"] = {"rank": rank, "world_size": world}
        return state

    @staticmethod
    def _per_rank_key(rank, world):
        return f"rank{rank}_of{world}"

    def load_state_dict(self, state_dict):
        """torch's load_state_dict. The moments and schedules are the same on every rank and are kept; the
        errors are kept where this rank of this world size saved them, and otherwise reset (with a
        warning): another rank's errors compensate another rank's compression."""
        # torch runs the load pre-hooks inside its load_state_dict and the post-hooks at its end: run them
        # here instead, so that pride's checks and fix-ups see the dict the pre-hooks made (an adapted or
        # trimmed one) and the post-hooks see the state as it ends (errors unwrapped, float32 restored).
        pre_hooks = dict(self._optimizer_load_state_dict_pre_hooks)
        post_hooks = dict(self._optimizer_load_state_dict_post_hooks)
        for hook in pre_hooks.values():
            adapted = hook(self, state_dict)
            if adapted is not None:
                state_dict = adapted
        state_dict = dict(state_dict)
        saved = state_dict.pop("pride", None)
        self._refuse_another_optimizers_state(state_dict)
        self._optimizer_load_state_dict_pre_hooks.clear()
        self._optimizer_load_state_dict_post_hooks.clear()
        try:
            super().load_state_dict(state_dict)
        finally:
            self._optimizer_load_state_dict_pre_hooks.update(pre_hooks)
            self._optimizer_load_state_dict_post_hooks.update(post_hooks)
        self._restore_float32_state(state_dict)
        rank, world = self._world()
        mine = self._per_rank_key(rank, world)
        legacy_owner = None if saved is None else self._per_rank_key(saved.get("rank"), saved.get("world_size"))
        owners, dropped = set(), 0
        for st in self.state.values():
            for key in self._PER_RANK:
                if key not in st:
                    continue
                value = st[key]
                if torch.is_tensor(value):  # written before the errors were keyed: the "pride" entry says whose
                    owner = mine if legacy_owner is None else legacy_owner
                    value = {owner: value}
                if mine in value:
                    st[key] = value[mine]
                else:
                    del st[key]
                    owners.update(value)
                    dropped += 1
        if dropped:
            _log.warning("%s (rank %d of %d): the state dict holds the error-feedback state of %s, not of this rank; "
                         "it was reset (%d buffers). Save and load each rank's own state_dict() (or every rank's "
                         "through torch.distributed.checkpoint) to resume exactly.", self._name, rank, world,
                         ", ".join(sorted(o.replace("_of", " of ").replace("rank", "rank ") for o in owners)),
                         dropped)
        for hook in post_hooks.values():
            hook(self)

    def _refuse_another_optimizers_state(self, state_dict):
        """A state dict of another kind of optimizer (AdamW's, Lion's) would load and then fail at the first
        step with a KeyError: name what it lacks instead."""
        groups = state_dict.get("param_groups", [])
        for i, g in enumerate(groups):
            missing = sorted(k for k in self.defaults if k not in g)
            if missing:
                raise ValueError(f"{self._name}.load_state_dict: parameter group {i} of the state dict lacks "
                                 f"{', '.join(missing)}: it was not saved by a {self._name}")
        for index, entry in state_dict.get("state", {}).items():
            if entry and not {"exp_avg", "exp_avg_sq"} <= set(entry):
                raise ValueError(f"{self._name}.load_state_dict: the state of parameter {index} lacks "
                                 f"{', '.join(sorted({'exp_avg', 'exp_avg_sq'} - set(entry)))}: it was not saved "
                                 f"by a {self._name}")

    def _restore_float32_state(self, state_dict):
        """torch's load_state_dict casts floating state to its parameter's dtype; every state tensor here
        is float32 whatever the parameters (the moments, errors, accumulator and anchor of a bfloat16
        model too), so the saved values are put back as they were saved."""
        saved_state = state_dict.get("state", {})
        for saved_group, group in zip(state_dict.get("param_groups", []), self.param_groups):
            for saved_id, p in zip(saved_group["params"], group["params"]):
                for key, value in saved_state.get(saved_id, {}).items():
                    if key not in self.state[p]:
                        continue
                    if isinstance(value, dict):  # the errors, keyed by the rank that saved them
                        self.state[p][key] = {k: self._float32_as_saved(v, p, self.state[p][key][k])
                                              for k, v in value.items()}
                    else:
                        self.state[p][key] = self._float32_as_saved(value, p, self.state[p][key])

    @staticmethod
    def _float32_as_saved(saved, p, loaded):
        if torch.is_tensor(saved) and saved.is_floating_point() and saved.dtype == torch.float32:
            return saved.detach().to(device=p.device, copy=True)
        return loaded

    # ---- Per-parameter and per-group state ----
    def _moments(self, p):
        st = self.state[p]
        if "exp_avg" not in st:
            st["exp_avg"] = torch.zeros_like(p, dtype=torch.float32, memory_format=torch.contiguous_format)
            st["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32, memory_format=torch.contiguous_format)
        return st["exp_avg"], st["exp_avg_sq"]

    def _errors(self, g):
        """The group's worker and server errors (zeros at first), sized for this group and rank."""
        st = self.state[g["params"][0]]
        numel = sum(p.numel() for p in g["params"])
        device = g["params"][0].device
        server = compressed_allreduce_server_numel(numel, self.group)
        if "worker_error" not in st or st["worker_error"].numel() != numel or st["server_error"].numel() != server:
            st["worker_error"] = torch.zeros(numel, dtype=torch.float32, device=device)
            st["server_error"] = torch.zeros(server, dtype=torch.float32, device=device)
        return st["worker_error"], st["server_error"]

    def _reset_errors(self, g):
        worker, server = self._errors(g)
        worker.zero_()
        server.zero_()

    @staticmethod
    def _local_grads(g, copy=False):
        """This rank's gradients as float32 (zeros where a parameter has none). Without ``copy`` a float32
        gradient is returned as the tensor itself: the caller must not write to it."""
        out = []
        for p in g["params"]:
            if p.grad is not None and p.grad.is_sparse:
                raise RuntimeError("pride's compressed Adam optimizers do not support sparse gradients")
            out.append(torch.zeros_like(p, dtype=torch.float32) if p.grad is None
                       else p.grad.to(torch.float32, copy=copy))
        return out

    def _averaged_grads(self, g):
        """The group's gradients averaged over the ranks in float32 (one allreduce of a flat buffer)."""
        grads = self._local_grads(g)
        rank, world = self._world()
        if world == 1:
            return grads
        flat = torch.cat([t.reshape(-1) for t in grads])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=self.group)
        flat.div_(world)
        return [t.view_as(p) for t, p in zip(flat.split([p.numel() for p in g["params"]]), g["params"])]

    def _compressed_mean(self, g, tensors, variances=None, write=None):
        """The ranks' mean of `tensors` (float32, one per parameter) through the 1-bit compressed
        allreduce with the group's error feedback, written back into `tensors` (only where ``write[i]``
        when given: an absent parameter's part is sent, and its result dropped).

        Sign compression never yields 0, so an element that carries nothing gets ±scale. Where its
        variance is exactly 0 (no gradient ever reached it on a variance step: an input pixel that is
        always 0, a dead unit) Adam's update would be ±scale/eps and the parameter would blow up.
        With ``mask_zero_variance`` (the default) those elements are zeroed after the allreduce:
        DeepSpeed's ``exp_avg_mask``, derived from the variance, the same on every rank."""
        flat = self._group_flat_buffer(g)
        torch.cat([t.reshape(-1) for t in tensors], out=flat)
        self._compressed_mean_in_place(g, flat)
        for i, (t, part) in enumerate(zip(tensors, flat.split([t.numel() for t in tensors]))):
            if write is not None and not write[i]:
                continue
            t.copy_(part.view_as(t))
            if variances is not None and g["mask_zero_variance"]:
                mask = self._nonzero_variance(variances[i])
                if mask is not None:
                    t.mul_(mask)

    def _compressed_mean_in_place(self, g, flat):
        """The ranks' mean of the group's flat float32 vector through the compressed allreduce, in place."""
        worker, server = self._errors(g)
        _, world = self._world()
        if world > 1:
            compressed_allreduce(flat, worker, server, group=self.group)
        else:
            _compress_alone(flat, worker, server)

    def _group_flat_buffer(self, g):
        return self._flat_buffer(self._errors(g)[0])

    def _flat_buffer(self, worker_error):
        """A float32 buffer the size of the group's flat vector, kept between steps: a fresh 16 MiB
        tensor per step pays its page faults every time. Scratch only (groups of one size share it),
        so not part of the state."""
        buffers = self.__dict__.setdefault("_flat_buffers", {})
        key = (worker_error.numel(), worker_error.device)
        if key not in buffers:
            buffers[key] = torch.empty_like(worker_error)
        return buffers[key]

    def _nonzero_variance(self, v):
        """The mask v > 0, or None when no element of v is 0 (nothing to mask). Cached while v is
        unchanged (its version counter): after the variance freezes it never changes. Entries hold v
        weakly, so a variance replaced by load_state_dict() takes its mask with it."""
        cache = self.__dict__.setdefault("_variance_masks", {})
        hit = cache.get(id(v))
        if hit is not None and hit[0]() is v and hit[1] == v._version:
            return hit[2]
        mask = v > 0
        if bool(mask.all()):
            mask = None
        for key in [k for k, entry in cache.items() if entry[0]() is None]:
            del cache[key]
        cache[id(v)] = (weakref.ref(v), v._version, mask)
        return mask

    # ---- The fused CPU kernels ----
    # Contiguous CPU tensors, and CUDA tensors where pride is built with CUDA, take pride's fused kernels
    # after the variance froze (collectives/bits/compressed_adam.h: one or two passes per step instead of
    # five to ten torch operations; on CPU the same bits as those but for the square root, which is
    # correctly rounded there; CUDA's kernels give the CPU kernels' bits); anything else, or False here,
    # the torch operations.
    _use_fused_kernels = True

    def _fused_kernels_take(self, params, grads, states):
        if not self._use_fused_kernels:
            return False
        if any(grad is not None and grad.is_sparse for grad in grads):
            raise RuntimeError("pride's compressed Adam optimizers do not support sparse gradients")
        from .. import _C

        return _C.compressed_adam_fused_supported(params, grads, states)

    @staticmethod
    def _step_size_and_bias_correction2_sqrt(g, m_step, v_step):
        """Adam's step size and sqrt(1 − β2^v_step), as _adam_update computes them."""
        if not g["bias_correction"]:
            return g["lr"], 1.0
        beta1, beta2 = g["betas"]
        return g["lr"] / (1 - beta1 ** m_step), (1 - beta2 ** v_step) ** 0.5

    # ---- Adam's arithmetic, in torch.optim.AdamW's order (single-tensor path) ----
    @staticmethod
    def _adam_update(p, m, v, lr, eps, weight_decay, bias_correction, m_step, v_step, beta1, beta2):
        """p ← p·(1 − lr·wd) − step_size · m / (sqrt(v)/sqrt(bc2) + eps), as torch.optim.AdamW does it;
        without bias correction step_size = lr and bc2 = 1 (DeepSpeed's formulas). m and v are float32;
        a lower-precision parameter is updated in float32 and rounded once."""
        if bias_correction:
            step_size = lr / (1 - beta1 ** m_step)
            denom = (_sqrt(v) / ((1 - beta2 ** v_step) ** 0.5)).add_(eps)
        else:
            step_size = lr
            denom = _sqrt(v).add_(eps)
        if p.dtype == torch.float32:
            if weight_decay != 0:
                p.mul_(1 - lr * weight_decay)
            p.addcdiv_(m, denom, value=-step_size)
        else:
            master = p.float()
            if weight_decay != 0:
                master.mul_(1 - lr * weight_decay)
            master.addcdiv_(m, denom, value=-step_size)
            p.copy_(master)


def _runs(flags):
    """The maximal runs of consecutive true flags, as (start, stop) index pairs: the fused kernels step
    each run of present parameters as one slice of the group's flat buffer."""
    runs, start = [], None
    for i, flag in enumerate(list(flags) + [False]):
        if flag and start is None:
            start = i
        elif not flag and start is not None:
            runs.append((start, i))
            start = None
    return runs


def _offsets(params):
    """Where each parameter starts in its group's flat vector, and the total (n + 1 entries)."""
    out = [0]
    for p in params:
        out.append(out[-1] + p.numel())
    return out


def _compress_alone(flat, worker, server):
    """A world of one (no process group): the same two compressions with nobody to exchange with (pride's
    CPU kernels, as the collective runs them; torch operations for other devices)."""
    if flat.device.type == "cpu":
        from .. import _C

        _C.compressed_allreduce_alone(flat, worker, server)
        return
    for error in (worker, server):
        flat.add_(error)
        scale = flat.double().square().sum().div(max(flat.numel(), 1)).sqrt().float()
        signs = torch.where(flat < 0, -1.0, 1.0).to(flat.dtype)
        error.copy_(flat - scale * signs)
        flat.copy_(scale * signs)
