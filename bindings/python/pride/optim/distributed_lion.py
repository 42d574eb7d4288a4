"""Distributed Lion (Liu et al., NeurIPS 2024, Algorithm 1) over pride's sign-allreduce."""

import hashlib
import logging
import os
import warnings

import torch
import torch.distributed as dist
from torch.distributed.algorithms.join import Join, Joinable, JoinHook

from .. import _C
from .. import ddp_hooks
from ..collectives import _not_a_member, _refuse_a_non_member
from . import _grad_scaler, lion_cub
from ._copies import CopiesKeepSettings
from ._param_groups import no_duplicates
from .lion_cub import MomentumSync

_log = logging.getLogger("pride")

_MODES = ("vote", "mean", "global")
_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_ALIGN_FLOATS = 4  # float32 elements in 16 bytes: G-Lion's averaged gradients start on such a boundary


class DistributedLion(CopiesKeepSettings, torch.optim.Optimizer, Joinable):
    """Each rank runs Lion on its own gradients and momentum; only the 1-bit update travels.

    mode="vote" (MaVo): Δ = sign(Σ_i δ_i), the ranks' majority vote.
    mode="mean" (Avg):  Δ = (1/N) Σ_i δ_i.
    mode="global" (G-Lion, the baseline): gradients averaged with an fp32 allreduce, then plain Lion.
    Every rank then applies x ← x − lr·(Δ + λ·x); replicas that start equal stay bitwise equal.

    votes="exact" (the default) follows Algorithm 1 with sign(0) = 0: an element whose local update
    c = β1·m + (1−β1)·g is exactly 0 abstains, so an element that is 0 on every rank gets Δ = 0 and only
    weight decay moves it (with weight_decay=0 it stays bitwise unchanged), and unanimous ranks give
    plain Lion's update. It costs about what binary votes cost: each bucket travels as 1-bit binary
    votes, and the elements that abstain on some rank are re-voted as ternary votes, found by listing
    them (once, then remembered while they persist, as dead units' do); only when they are too many to
    list, or change too often, does a bucket travel as ternary votes (2 bits in the reduce phase). The
    ranks agree on this in a small allreduce per bucket (docs/design.md, "The vote kind").
    votes="binary" always sends 1 bit per element (an exactly-zero update votes −1: SPEC §2's rule for
    sign_allreduce, which makes such elements drift by lr per step); votes="ternary" always sends both
    planes.
    Missing gradients: every rank builds the same layout from the parameter list, not from which
    gradients exist. A parameter whose grad is None on this rank abstains in the vote and keeps its
    momentum (a rank whose batch did not reach a branch); a parameter whose grad is None on every rank
    takes no step, not even weight decay, as in torch's optimizers. In mode="global" a missing gradient
    counts as zeros in the mean. A digest of the layout (shapes, dtypes, order, hyper-parameters) rides
    on each bucket's agreement: ranks whose parameter lists differ get a ValueError on every rank
    naming the first differing parameter's index and shape, never a hang or silent divergence.
    mode="global" averages with torch.distributed over any group (Gloo, NCCL or pride).
    The step is fused in C++: parameters of one dtype and device are handled as one flat buffer in
    buckets of ``bucket_mb`` MiB of parameters (default 16 on CPU, 1024 on CUDA), packing one bucket
    while the previous one is on the wire. CUDA parameters are updated by fused kernels on the current
    stream (two launches per bucket, whatever the number of tensors); only the packed votes leave the GPU.
    Momentum is per rank. ``sharded_state_dict()`` / ``load_sharded_state_dict()`` save and load every
    rank's own momentum through torch.distributed.checkpoint (each rank's tensors under keys of its own,
    so the checkpoint keeps them all). Frameworks that save one rank's ``state_dict()`` and load it on
    every rank get a defined result: every rank starts from that rank's momentum (replicas stay
    identical, since the parameters are and the update is voted), with a logged note.
    The step count ``opt.steps`` (what a ``MomentumSync`` schedule counts) is kept in every param group
    under "step", the same number in each, so that torch's DCP state-dict API
    (``get_optimizer_state_dict`` / ``set_optimizer_state_dict``, which keep only "state" and
    "param_groups") carries it too; it is no hyper-parameter and not part of the layout the ranks compare.

    Under DistributedDataParallel, DDP would all-reduce the fp32 gradients before the vote (every rank
    then votes on the same average, and the traffic is DDP's, not the vote's). ``attach(ddp_model)``
    registers pride.ddp_hooks.local_gradients_hook so that DDP sends no gradients; at its first step the
    optimizer does so itself for a DDP model holding its parameters that has no communication hook,
    and warns once, with the cost, when it cannot (the model has a hook of its own).

    Lion Cub's options (Ishikawa et al., arXiv 2411.16462; pride/optim/lion_cub.py):
    ``aggregation="int8"`` is its "p-bit allreduce": each rank's ``quantization`` of c — "sign" (sign(c),
    the same vote as the default 1-bit path, at 8 bits per element instead of ≤ 2) or "l1"/"l0"/"linf"
    (c scaled by its tensor's mean/geometric-mean/max magnitude to ⌊127/N⌋ levels: a vote weighted by
    magnitude) — is summed by an int8 ring allreduce and Δ = sign(sum) (or sum/N in mode "mean" with
    "sign"). ``aggregation="levels"`` gives the same Δ bit for bit (mode "vote" only) at 9/16 of the int8
    ring's bytes for 2-3 ranks, half for 4-7, less beyond, a quarter for "sign": the levels travel as bit
    planes to owners that sum them with bit-sliced counters and send back only the sign
    (pride.level_vote). ``momentum_sync=MomentumSync(every=K | doubling_k=k, until=None, params=None)``
    averages the chosen parameters' momenta over the ranks in float32 after the scheduled steps.

    Mixed precision: under ``torch.amp.GradScaler`` (``scaler.step(opt)``) a rank whose gradients
    overflowed sits the step out as a joined rank does (below): it abstains, the others vote, every rank
    applies the result, and the ranks' steps stay paired. (A plain optimizer would skip that rank's step
    only.)

    Uneven inputs: the optimizer is a Joinable. Under ``torch.distributed.algorithms.join.Join([ddp_model,
    opt])`` a rank that ran out of data shadows the others' steps: it abstains in every vote (a missing
    gradient, above), so the ranks still training vote alone, replicas stay identical, and the joined
    rank's momentum is left as it was.
    """

    # torch.amp.GradScaler calls step() every time and leaves the overflow decision to it (_grad_scaler.py).
    _step_supports_amp_scaling = True

    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0, mode="vote", group=None,
                 votes="exact", bucket_mb=None, aggregation="bits", quantization="sign", momentum_sync=None):
        if not lr >= 0.0:
            raise ValueError(f"DistributedLion: invalid learning rate {lr}")
        if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"DistributedLion: invalid betas {betas}")
        if not weight_decay >= 0.0:
            raise ValueError(f"DistributedLion: invalid weight_decay {weight_decay}")
        if mode not in _MODES:
            raise ValueError(f"DistributedLion: mode must be one of {_MODES}, got {mode!r}")
        if votes not in ("exact", "binary", "ternary"):
            raise ValueError(f"DistributedLion: votes must be 'exact', 'binary' or 'ternary', got {votes!r}")
        if bucket_mb is not None and not bucket_mb > 0:
            raise ValueError(f"DistributedLion: bucket_mb must be positive, got {bucket_mb}")
        if aggregation not in lion_cub.AGGREGATIONS:
            raise ValueError(f"DistributedLion: aggregation must be one of {lion_cub.AGGREGATIONS}, got {aggregation!r}")
        if quantization not in lion_cub.QUANTIZATIONS:
            raise ValueError(f"DistributedLion: quantization must be one of {lion_cub.QUANTIZATIONS}, got "
                             f"{quantization!r}")
        if quantization != "sign" and (aggregation == "bits" or mode != "vote"):
            raise ValueError(f"DistributedLion: quantization={quantization!r} sends several levels per element: it "
                             "needs aggregation='int8' or 'levels' and mode='vote' (Lion Cub applies the sign of the "
                             "sum)")
        if aggregation == "levels" and mode != "vote":
            raise ValueError(f"DistributedLion: aggregation='levels' returns only the sign of the ranks' sum; "
                             f"mode={mode!r} needs " + ("aggregation='int8'" if mode == "mean" else
                                                        "aggregation='bits' (G-Lion sends gradients)"))
        if aggregation == "int8" and mode == "global":
            raise ValueError("DistributedLion: aggregation='int8' sums the ranks' updates; mode='global' sends "
                             "gradients instead")
        if momentum_sync is not None and not isinstance(momentum_sync, MomentumSync):
            raise TypeError(f"DistributedLion: momentum_sync must be a pride.optim.MomentumSync, got "
                            f"{type(momentum_sync).__name__}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), weight_decay=weight_decay))
        self.aggregation = aggregation
        self.quantization = quantization
        self.momentum_sync = momentum_sync
        # self.steps, the steps taken (the momentum-sync schedule counts them), lives in the param groups
        # ("step"): add_param_group gave each group the count, 0.
        self.mode = mode
        self.group = group
        self.votes = votes
        self.bucket_mb = bucket_mb
        self._start_caches()
        self._check_group()

    # What copy.deepcopy and pickle keep besides torch's defaults, state and param groups (_copies.py).
    _SETTINGS = ("aggregation", "quantization", "momentum_sync", "mode", "group", "votes", "bucket_mb")

    def _start_caches(self):
        caches = self.__dict__
        caches.setdefault("_int8_scratch", {})  # (device, dtype) -> lion_cub.Int8Scratch: the quantized aggregations' buffers
        caches.setdefault("_cuda_workspaces", {})  # (device, dtype) -> _C.CudaLionWorkspace, reused across steps
        caches.setdefault("_abstention_memories", {})  # (param group index, device, dtype) -> _C.AbstentionMemory
        caches.setdefault("_ddp_checked", False)
        caches.setdefault("_layout_digested", (None, 0))  # (layout, its digest) of the last step
        if "_join_config" not in caches:
            Joinable.__init__(self)

    # ---- Per-rank state ----
    @property
    def steps(self):
        """Steps taken: what a MomentumSync schedule counts. Kept in every param group under "step" (one
        count for the optimizer, the same in each group), so that every state dict that keeps the param
        groups keeps it: torch's state_dict(), and DCP's get_optimizer_state_dict, which drops any other
        top-level entry."""
        groups = self.param_groups
        return groups[0].get("step", 0) if groups else 0

    @steps.setter
    def steps(self, value):
        value = int(value)
        for group in self.param_groups:
            group["step"] = value

    def _rank_and_world(self):
        if not dist.is_initialized():
            return 0, 1
        return dist.get_rank(self.group), dist.get_world_size(self.group)

    def state_dict(self):
        """torch's optimizer state dict (the step count in each param group, "step"), plus which rank of
        how many saved it (this rank's momentum) and the step count again (where state dicts before the
        param groups held it kept it)."""
        state = super().state_dict()
        rank, world = self._rank_and_world()
        state["pride"] = {"rank": rank, "world_size": world, "steps": self.steps}
        return state

    def load_state_dict(self, state_dict):
        """torch's load_state_dict. The step count comes from the param groups ("step"; the largest, should
        they differ), or, in a state dict saved before they held it, from the "pride" entry; a state dict
        with neither (torch's own keys, written by hand) leaves the count as it was."""
        state_dict = dict(state_dict)
        saved = state_dict.pop("pride", None)
        before = self.steps
        previous = {"state": self.state, "param_groups": self.param_groups}  # torch's load replaces both
        super().load_state_dict(state_dict)  # the param groups are now the saved ones
        try:
            # After torch's load, so that its load_state_dict pre-hooks (the documented way to adapt a state
            # dict, e.g. dropping AdamW's second moment) have run.
            _refuse_another_optimizers_state(self)
        except ValueError:
            self.__setstate__(previous)
            raise
        rank, world = self._rank_and_world()
        if saved is not None and world > 1 and saved.get("rank") != rank:
            _log.warning(
                "DistributedLion (rank %d of %d): loading the optimizer state that rank %s of %s saved: this rank "
                "starts from that rank's momentum (replicas stay identical). To keep every rank's own momentum, "
                "save and load opt.sharded_state_dict() with torch.distributed.checkpoint.", rank, world,
                saved.get("rank"), saved.get("world_size"))
        counts = [int(group["step"]) for group in self.param_groups if "step" in group]
        if counts:
            self.steps = max(counts)
        elif saved is not None:
            self.steps = saved.get("steps", 0)
        else:
            self.steps = before

    def sharded_state_dict(self):
        """A state dict for torch.distributed.checkpoint (dcp.save / dcp.load) that keeps every rank's
        momentum: the tensors live under "rank<r>", which no other rank writes, and the settings are
        the same on every rank. Load with ``sd = opt.sharded_state_dict(); dcp.load(sd, ...);
        opt.load_sharded_state_dict(sd)`` on the same number of ranks."""
        rank, world = self._rank_and_world()
        params = [p for group in self.param_groups for p in group["params"]]
        momenta = {str(i): self._momentum(p) for i, p in enumerate(params)}  # zeros until a first step
        # The groups without their copy of the step count, which travels as "steps": the keys that
        # checkpoints saved before the groups held it have (dcp.load wants every key it is given).
        groups = [{k: v for k, v in g.items() if k not in ("params", "step")} for g in self.param_groups]
        return {"param_groups": groups, "world_size": world, "steps": self.steps, "momentum": {f"rank{rank}": momenta}}

    def load_sharded_state_dict(self, state_dict):
        rank, world = self._rank_and_world()
        if state_dict.get("world_size") != world:
            raise ValueError(f"DistributedLion: the checkpoint holds the momentum of {state_dict.get('world_size')} "
                             f"ranks, this group has {world}; load it on as many ranks")
        if len(state_dict["param_groups"]) != len(self.param_groups):
            raise ValueError("DistributedLion: the checkpoint has a different number of parameter groups")
        momenta = state_dict["momentum"][f"rank{rank}"]
        params = [p for group in self.param_groups for p in group["params"]]
        if len(momenta) != len(params):
            raise ValueError(f"DistributedLion: the checkpoint has momentum for {len(momenta)} parameters, "
                             f"the optimizer has {len(params)}")
        for i, p in enumerate(params):
            self._momentum(p).copy_(momenta[str(i)])
        for group, saved in zip(self.param_groups, state_dict["param_groups"]):
            group.update(saved)
        self.steps = int(state_dict.get("steps", 0))  # into every group

    # ---- Joinable (torch.distributed.algorithms.join) ----
    def join_hook(self, **kwargs):
        return _ShadowStep(self)

    @property
    def join_device(self):
        return self.param_groups[0]["params"][0].device

    @property
    def join_process_group(self):
        return self.group if self.group is not None else dist.group.WORLD

    def attach(self, ddp_model):
        """Makes the DistributedDataParallel model that holds these parameters keep each rank's gradients
        local (pride.ddp_hooks.local_gradients_hook): only the optimizer's vote crosses the network.
        Call it after wrapping the model, before the first backward pass. Returns the model."""
        from torch.nn.parallel import DistributedDataParallel

        if not isinstance(ddp_model, DistributedDataParallel):
            raise TypeError(f"DistributedLion.attach: expected a DistributedDataParallel model, got "
                            f"{type(ddp_model).__name__}")
        mine = {id(p) for group in self.param_groups for p in group["params"]}
        if not any(id(p) in mine for p in ddp_model.parameters()):
            raise ValueError("DistributedLion.attach: none of this optimizer's parameters belong to the model")
        if ddp_hooks.has_local_gradients_hook(ddp_model):
            return ddp_model
        if getattr(ddp_model, "_comm_hooks", []):
            raise ValueError("DistributedLion.attach: the model has a communication hook already (DDP takes one); "
                             "remove it, or register pride.ddp_hooks.local_gradients_hook instead of it")
        ddp_model.register_comm_hook(None, ddp_hooks.local_gradients_hook)
        return ddp_model

    def _check_ddp(self):
        """Once, at the first step: a DDP model that holds these parameters and still all-reduces their
        gradients is attached, or, if it has a hook of its own, named in a warning with what it costs."""
        self._ddp_checked = True
        params = [p for group in self.param_groups for p in group["params"]]
        for model in ddp_hooks.ddp_models_holding(params):
            if ddp_hooks.has_local_gradients_hook(model):
                continue
            grad_mb = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad) / 2**20
            vote_mb = sum(p.numel() for p in params) / 8 / 2**20
            if not getattr(model, "_comm_hooks", []):
                self.attach(model)
                _log.info("DistributedLion: registered pride.ddp_hooks.local_gradients_hook on the "
                          "DistributedDataParallel model holding its parameters (DDP sent %.1f MB of gradients "
                          "per step before the vote's %.1f MB); call opt.attach(model) to skip even the first "
                          "step's allreduce", grad_mb, vote_mb)
                continue
            warnings.warn(
                f"DistributedLion: its parameters belong to a DistributedDataParallel model whose communication "
                f"hook still sends their gradients, about {grad_mb:.1f} MB per step, before the vote's "
                f"{vote_mb:.1f} MB; every rank then votes on the same gradient and the 1-bit saving is lost. "
                "Register pride.ddp_hooks.local_gradients_hook instead (opt.attach(model) does).",
                stacklevel=3)

    def _check_group(self):
        """At construction, not at the first step: a job whose ranks would each train a model of their
        own, or vote over a group that cannot, fails before any work is done."""
        if not dist.is_initialized():
            world = os.environ.get("WORLD_SIZE", "")
            if world.isdigit() and int(world) > 1:
                raise RuntimeError(
                    f"DistributedLion: WORLD_SIZE={world} says this process is one rank of {world}, but "
                    "torch.distributed is not initialized, so each rank would train a model of its own; call "
                    "torch.distributed.init_process_group('pride') before creating the optimizer (or unset "
                    "WORLD_SIZE to train on one process)")
            if self.group is not None:
                raise RuntimeError("DistributedLion: a group was given but torch.distributed is not initialized")
            return
        if self.mode != "global" and not _not_a_member(self.group):
            self._backend()  # vote and mean need pride's sign-allreduce: a clear TypeError otherwise

    def _backend(self):
        """The group's pride backend, or None for a world of one (no process group)."""
        if not dist.is_initialized():
            if self.group is not None:
                raise RuntimeError("DistributedLion: a group was given but torch.distributed is not initialized")
            return None
        from ..collectives import _pride_backend

        return _pride_backend(self.group, "optim.DistributedLion")

    def _distributed(self):
        return dist.is_initialized() and dist.get_world_size(self.group) > 1

    def _layout(self):
        """What every rank must agree on: each parameter's place, shape, dtype and device type, in order,
        and each group's hyper-parameters and the optimizer's settings. Gradients play no part, nor does
        the step count that each group holds ("step"; the schedules that read it are compared instead)."""
        # The step keeps the digest of a layout that compares equal to the last one, so values that compare
        # equal must print the same: floats (16 and 16.0, -0.0 and 0.0: `+ 0.0` makes the zero positive).
        # torch.Size and torch.dtype print the same on every rank, and are cheaper to read than strings
        # (p.device.type alone costs 0.4 us: read only where a tensor is not on CUDA).
        groups = []
        for group in self.param_groups:
            params = tuple((p.shape, p.dtype, "cuda" if p.is_cuda else p.device.type) for p in group["params"])
            hyper = (float(group["lr"]) + 0.0, tuple(float(b) + 0.0 for b in group["betas"]),
                     float(group["weight_decay"]) + 0.0)
            groups.append((params, hyper))
        bucket_mb = None if self.bucket_mb is None else float(self.bucket_mb)
        return (self.mode, self.votes, bucket_mb, tuple(groups), self.aggregation, self.quantization,
                self.momentum_sync.describe(self._all_params()) if self.momentum_sync else None)

    @staticmethod
    def _digest(layout):
        return int.from_bytes(hashlib.blake2b(repr(layout).encode(), digest_size=8).digest(), "little")

    def _raise_layout_mismatch(self, layout):
        """Every rank gets here together: gather the layouts (and step counts) and name the first difference."""
        everyone = [None] * dist.get_world_size(self.group)
        dist.all_gather_object(everyone, (layout, self.steps), group=self.group)
        me = dist.get_rank(self.group)
        layouts = [lay for lay, _ in everyone]
        if all(lay == layouts[0] for lay in layouts) and len({steps for _, steps in everyone}) > 1:
            counts = ", ".join(f"rank {r} at step {steps}" for r, (_, steps) in enumerate(everyone))
            raise ValueError(f"DistributedLion (rank {me}): the ranks' step counts differ ({counts}), and the "
                             f"MomentumSync schedule counts steps; every rank must resume from the same "
                             f"checkpoint (opt.steps, state_dict()['pride']['steps'])")
        raise ValueError(f"DistributedLion (rank {me}): the ranks' parameter lists differ: "
                         f"{_first_difference(layouts)}; every rank must build the same model and optimizer")

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        Join.notify_join_context(self)
        # Under torch.amp.GradScaler (_grad_scaler.py): a rank whose gradients overflowed sits the step
        # out as a joined rank does (it abstains; nothing else changes for the others).
        shadow = _grad_scaler.overflowed(self)
        if not shadow:
            _grad_scaler.unscale_gradients(self)
        self._step(shadow=shadow)
        return loss

    @torch.compiler.disable  # its collectives and C++ calls are not for dynamo to trace (a compiled training
    def _step(self, shadow):  # step crashed in _pride_backend's ProcessGroup._get_backend); the rest compiles
        """One step; a shadow step (a joined rank's, see join_hook) runs the same collectives with no
        gradient at all, so this rank abstains everywhere and only the ranks still training vote."""
        _refuse_a_non_member(self.group, "optim.DistributedLion")
        # G-Lion averages gradients with torch.distributed on whatever group it was given; the voting
        # modes need pride's sign-allreduce.
        if not self._ddp_checked and self._distributed():
            self._check_ddp()
        backend = self._backend() if self.mode != "global" else None
        rank = self._rank_and_world()[0]  # what errors name (G-Lion's local step has no backend to ask)
        layout = self._layout()
        if layout != self._layout_digested[0]:  # the digest of an unchanged layout is kept, not rehashed
            self._layout_digested = (layout, self._digest(layout))
        digest = self._layout_digested[1]
        if self.momentum_sync is not None:
            # The schedule reads the step count: ranks a step apart (one loaded an older checkpoint) would
            # average their momenta at different steps, and pair one rank's averaging with another's
            # vote. The count joins the digest here (the layout's digest is kept; this costs no hashing),
            # so they are told by name at the first step (_raise_layout_mismatch).
            digest = (digest ^ ((self.steps + 1) * 0x9E3779B97F4A7C15)) & 0xFFFFFFFFFFFFFFFF
        if (self.mode == "global" or self.aggregation != "bits") and self._distributed():
            self._check_layout_global(layout, digest)
        for group_index, group in enumerate(self.param_groups):
            # The layout comes from the parameter list, not from which gradients exist: a parameter
            # without a gradient on this rank keeps its place and abstains (its momentum untouched);
            # one without a gradient on every rank takes no step.
            # One pass over the parameters. The step's Python is host time the GPU waits for before its
            # first kernel: a step over 100 small CPU tensors took 0.40 ms on a 2.8 GHz Xeon before this
            # pass and the kept digest, 0.20 ms after (docs/performance.md, "Host time of a
            # DistributedLion step").
            by_dtype = {}  # (device, dtype) -> ([params], [grads], [what the kernels step], [(param, copy)])
            for p in group["params"]:
                g = p.grad
                if g is not None and g.is_sparse:
                    raise RuntimeError("DistributedLion does not support sparse gradients")
                key = (p.device, p.dtype)
                lists = by_dtype.get(key)
                if lists is None:
                    if p.dtype not in _DTYPES:
                        raise TypeError(f"DistributedLion: parameters must be float32, bfloat16 or float16, got "
                                        f"{p.dtype}")
                    lists = by_dtype[key] = ([], [], [], [])
                lists[0].append(p)
                lists[1].append(None if g is None or shadow else g.contiguous())
                # The kernels step flat memory: a non-contiguous parameter (a transposed view registered
                # as one) is stepped in a contiguous copy, written back below, as torch's optimizers allow.
                if p.is_contiguous():
                    lists[2].append(p)
                else:
                    lists[2].append(p.detach().contiguous())
                    lists[3].append((p, lists[2][-1]))
            for (device, dtype), (params, grads, stepped, copies) in by_dtype.items():
                if self.aggregation != "bits":
                    # Lion Cub's p-bit allreduce: quantized c summed in int8, or its sign by level vote
                    # (lion_cub.py).
                    momenta = self._momenta(params, grads)
                    lion_cub.int8_step(stepped, grads, momenta, float(group["lr"]), float(group["betas"][0]),
                                       float(group["betas"][1]), float(group["weight_decay"]), self.mode,
                                       self.quantization, self.group, self._bucket_elements(device, dtype),
                                       self._int8_scratch.setdefault((device, dtype), lion_cub.Int8Scratch()),
                                       aggregation=self.aggregation)
                    for p, copy in copies:
                        p.copy_(copy)
                    continue
                if self.mode == "global":
                    # G-Lion: plain Lion on the averaged gradient, Δ = sign(c) exactly, nothing voted.
                    grads = self._averaged(grads, params)
                    target, mode, votes = None, "vote", "ternary"
                else:
                    target, mode, votes = backend, self.mode, self.votes
                momenta = self._momenta(params, grads)
                agreed = _C.distributed_lion_step(
                    target, stepped, grads, momenta, float(group["lr"]), float(group["betas"][0]),
                    float(group["betas"][1]), float(group["weight_decay"]), mode, votes,
                    self._bucket_elements(device, dtype), digest, self._workspace(device, dtype), rank,
                    memory=self._abstention_memory(device, dtype, group_index) if votes == "exact" and target is not None else None)
                if not agreed:
                    self._raise_layout_mismatch(layout)
                for p, copy in copies:
                    p.copy_(copy)
        steps = self.steps + 1
        self.steps = steps
        if self.momentum_sync is not None and self._distributed() and self.momentum_sync.due(steps):
            params = [p for group in self.param_groups for p in group["params"]]
            lion_cub.average_momenta([self._momentum(p) for p in self.momentum_sync.selected(params)], self.group)

    def add_param_group(self, param_group):
        no_duplicates(param_group, "DistributedLion")
        param_group["step"] = self.steps  # one count for the optimizer: a new group joins at it
        super().add_param_group(param_group)

    def _all_params(self):
        return [p for group in self.param_groups for p in group["params"]]

    def _momentum(self, p):
        """p's momentum, created (zeros) the first time p has a gradient to step with."""
        state = self.state[p]
        if "exp_avg" not in state:
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.contiguous_format)
        return state["exp_avg"]

    def _momenta(self, params, grads):
        """The momentum of each parameter with a gradient here (None where it has none)."""
        state = self.state
        out = []
        for p, g in zip(params, grads):
            m = None
            if g is not None:
                m = state[p].get("exp_avg")
                if m is None:
                    m = self._momentum(p)
            out.append(m)
        return out

    def _abstention_memory(self, device, dtype, group_index):
        # What the exact votes' agreements remember between steps (each bucket's union of abstaining
        # elements: bucket_agreement.h), per param group: each group's step has buckets of its own.
        key = (group_index, device, dtype)
        return self._abstention_memories.setdefault(key, _C.AbstentionMemory())

    def _workspace(self, device, dtype):
        if device.type != "cuda":
            return None
        if not _C.cuda_supported():
            raise ValueError(f"DistributedLion: parameters on {device}, but this build of pride has no CUDA support")
        key = (device, dtype)
        if key not in self._cuda_workspaces:
            self._cuda_workspaces[key] = _C.CudaLionWorkspace()
        return self._cuda_workspaces[key]

    def _bucket_elements(self, device, dtype):
        # Each bucket pays an agreement and a fingerprint check, a few round trips that wait behind the
        # bulk data of earlier buckets on a busy link: at 4 hosts x 1 Gbit/s, 2^24 parameters, a step took
        # 189 ms in 1 MiB buckets, 84-97 in 4 and 77-80 in 16 (docs/performance.md). DDP's default is 25.
        # On CUDA, packing a bucket takes a fraction of a millisecond, so there is little to overlap, while
        # each bucket still costs its round trips and a few stream waits: 4 ranks on one H200, 350M fp32
        # parameters, device-memory path, 97-103 ms a step in 64 MiB buckets, 17.7 in 1 GiB.
        mb = self.bucket_mb if self.bucket_mb is not None else (1024.0 if device.type == "cuda" else 16.0)
        return max(64, int(mb * (1 << 20)) // dtype.itemsize)

    def _check_layout_global(self, layout, digest):
        """G-Lion's layout check: a MAX-allreduce of (d, ~d) returns both intact only if every rank has d."""
        as_signed = digest - (1 << 64) if digest >= 1 << 63 else digest
        device = next((p.device for g in self.param_groups for p in g["params"]), torch.device("cpu"))
        both = torch.tensor([as_signed, ~as_signed], dtype=torch.int64, device=device)
        dist.all_reduce(both, op=dist.ReduceOp.MAX, group=self.group)
        high, low_inverted = both.tolist()
        if high != ~low_inverted:
            self._raise_layout_mismatch(layout)

    def _averaged(self, grads, params):
        """G-Lion: the mean gradient over the group, all-reduced in float32 (one flat buffer). A rank
        without a parameter's gradient contributes zeros (as DDP does for unused parameters); a
        parameter without a gradient on every rank gets None: it takes no step."""
        if not self._distributed():
            return grads
        device = params[0].device
        have = torch.tensor([g is not None for g in grads], dtype=torch.float32, device=device)
        # Each gradient starts on 16 bytes of the flat buffer, so that the float32 views returned below
        # are as aligned as the tensors the CUDA step reads with vector loads (it steps an unaligned one
        # element by element). The padding is zeros, and every element's sum is its own: no value changes.
        padding = None  # made once, on the first gradient whose size needs it
        pieces, offsets, offset = [], [], 0
        for g, p in zip(grads, params):
            n = p.numel()
            pieces.append(g.reshape(-1).float() if g is not None else torch.zeros(n, dtype=torch.float32, device=device))
            offsets.append(offset)
            pad = -n % _ALIGN_FLOATS
            if pad:
                if padding is None:
                    padding = torch.zeros(_ALIGN_FLOATS - 1, dtype=torch.float32, device=device)
                pieces.append(padding[:pad])
            offset += n + pad
        flat = torch.cat(pieces + [have])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=self.group)
        flat /= dist.get_world_size(self.group)
        anyone = flat[offset:].tolist()
        return [flat[at:at + p.numel()].view_as(p).to(p.dtype) if any_grad > 0 else None
                for p, at, any_grad in zip(params, offsets, anyone)]


# What a Lion's state holds per parameter: its momentum (lion-pytorch's and this optimizer's "exp_avg"),
# and a step count some implementations keep (ignored: the count comes from the param groups).
_LION_STATE_KEYS = {"exp_avg", "step"}


def _refuse_another_optimizers_state(opt):
    """torch's optimizers load each other's state dicts silently. A Lion's (lion-pytorch's) loads with its
    meaning intact; another optimizer's does not: AdamW's exp_avg is a momentum of another kind (its betas,
    its lr with it), and its second moment would sit unused. Refuse that by name (the state as loaded)."""
    params = [p for group in opt.param_groups for p in group["params"]]
    for index, p in enumerate(params):
        entry = opt.state.get(p, {})
        foreign = sorted(set(entry) - _LION_STATE_KEYS) if isinstance(entry, dict) else []
        if foreign:
            raise ValueError(f"DistributedLion.load_state_dict: the state of parameter {index} holds "
                             f"{', '.join(foreign)}, which a Lion does not keep: the state dict was saved by "
                             f"another optimizer (a Lion's, such as lion-pytorch's, loads)")


def _first_difference(layouts):
    """Where the gathered layouts first differ, in words: parameter index and shape, or the setting."""
    names = {0: "mode", 1: "votes", 2: "bucket_mb", 4: "aggregation", 5: "quantization", 6: "momentum_sync"}
    for i, name in names.items():
        values = {r: lay[i] for r, lay in enumerate(layouts)}
        if len(set(values.values())) > 1:
            return f"{name}: " + ", ".join(f"rank {r} {v!r}" for r, v in values.items())

    def flat_params(lay):
        return [(gi, p) for gi, (params, _) in enumerate(lay[3]) for p in params]

    per_rank = [flat_params(lay) for lay in layouts]
    for index in range(max(len(ps) for ps in per_rank)):
        entries = {r: (ps[index] if index < len(ps) else None) for r, ps in enumerate(per_rank)}
        if len(set(entries.values())) > 1:
            def describe(e):
                if e is None:
                    return "absent"
                group, (shape, dtype, device) = e
                dtype = str(dtype).replace("torch.", "")
                return f"{dtype} {list(shape)} on {device} (param group {group})"
            return f"parameter {index} is " + ", ".join(f"{describe(e)} on rank {r}" for r, e in entries.items())
    for gi in range(max(len(lay[3]) for lay in layouts)):
        hypers = {r: (lay[3][gi][1] if gi < len(lay[3]) else None) for r, lay in enumerate(layouts)}
        if len(set(hypers.values())) > 1:
            return f"param group {gi}'s (lr, betas, weight_decay) is " + ", ".join(
                f"{h} on rank {r}" for r, h in hypers.items())
    return "the ranks' digests differ, but no difference was found in the gathered layouts"


class _ShadowStep(JoinHook):
    """What a joined rank runs for each step the other ranks still take."""

    def __init__(self, optimizer):
        self.optimizer = optimizer

    def main_hook(self):
        with torch.no_grad():
            self.optimizer._step(shadow=True)

