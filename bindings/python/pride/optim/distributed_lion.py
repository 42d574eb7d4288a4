"""Distributed Lion (Liu et al., NeurIPS 2024, Algorithm 1) over pride's sign-allreduce."""

import torch
import torch.distributed as dist

from .. import _C

_MODES = ("vote", "mean", "global")
_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


class DistributedLion(torch.optim.Optimizer):
    """Each rank runs Lion on its own gradients and momentum; only the 1-bit update travels.

    mode="vote" (MaVo): Δ = sign(Σ_i δ_i), the ranks' majority vote.
    mode="mean" (Avg):  Δ = (1/N) Σ_i δ_i.
    mode="global" (G-Lion, the baseline): gradients averaged with an fp32 allreduce, then plain Lion.
    Every rank then applies x ← x − lr·(Δ + λ·x); replicas that start equal stay bitwise equal.

    votes="exact" (the default) follows Algorithm 1 with sign(0) = 0: an element whose local update
    c = β1·m + (1−β1)·g is exactly 0 abstains, so an element that is 0 on every rank gets Δ = 0 and only
    weight decay moves it (with weight_decay=0 it stays bitwise unchanged), and unanimous ranks give
    plain Lion's update. It costs what binary votes cost unless some rank has an exact zero in a
    bucket: each bucket travels as 1-bit binary votes when no rank has one, as ternary votes otherwise
    (the ranks agree through a one-byte allreduce per bucket).
    votes="binary" always sends 1 bit per element (an exactly-zero update votes −1: SPEC §2's rule for
    sign_allreduce, which makes such elements drift by lr per step); votes="ternary" always sends both
    planes.
    The step is fused in C++: parameters of one dtype and device are handled as one flat buffer in
    buckets of ``bucket_mb`` MiB of parameters (default 4 on CPU, 64 on CUDA), packing one bucket
    while the previous one is on the wire. CUDA parameters are updated by fused kernels on the current
    stream (two launches per bucket, whatever the number of tensors); only the packed votes leave the GPU.
    Momentum is per rank: save and load each rank's state_dict on the same number of ranks.
    """

    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0, mode="vote", group=None,
                 votes="exact", bucket_mb=None):
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
        super().__init__(params, dict(lr=lr, betas=tuple(betas), weight_decay=weight_decay))
        self.mode = mode
        self.group = group
        self.votes = votes
        self.bucket_mb = bucket_mb
        self._cuda_workspaces = {}  # (device, dtype) -> _C.CudaLionWorkspace, reused across steps

    def _backend(self):
        """The group's pride backend, or None for a world of one (no process group)."""
        if not dist.is_initialized():
            if self.group is not None:
                raise RuntimeError("DistributedLion: a group was given but torch.distributed is not initialized")
            return None
        from ..collectives import _pride_backend

        return _pride_backend(self.group, "optim.DistributedLion")

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        backend = self._backend()
        for group in self.param_groups:
            by_dtype = {}
            for p in group["params"]:
                if p.grad is None:
                    continue  # parameters without a gradient take no step (and cast no vote)
                if p.grad.is_sparse:
                    raise RuntimeError("DistributedLion does not support sparse gradients")
                if p.dtype not in _DTYPES:
                    raise TypeError(f"DistributedLion: parameters must be float32, bfloat16 or float16, got {p.dtype}")
                state = self.state[p]
                if "exp_avg" not in state:
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.contiguous_format)
                by_dtype.setdefault((p.device, p.dtype), []).append(p)
            for (device, dtype), params in by_dtype.items():
                grads = [p.grad.contiguous() for p in params]
                momenta = [self.state[p]["exp_avg"] for p in params]
                if self.mode == "global":
                    # G-Lion: plain Lion on the averaged gradient, Δ = sign(c) exactly, nothing voted.
                    grads = self._averaged(grads)
                    target, mode, votes = None, "vote", "ternary"
                else:
                    target, mode, votes = backend, self.mode, self.votes
                _C.distributed_lion_step(
                    target, params, grads, momenta, float(group["lr"]), float(group["betas"][0]),
                    float(group["betas"][1]), float(group["weight_decay"]), mode, votes,
                    self._bucket_elements(device, dtype), self._workspace(device, dtype))
        return loss

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
        mb = self.bucket_mb if self.bucket_mb is not None else (64.0 if device.type == "cuda" else 4.0)
        return max(64, int(mb * (1 << 20)) // torch.empty(0, dtype=dtype).element_size())

    def _averaged(self, grads):
        """G-Lion: the mean gradient over the group, all-reduced in float32 (one flat buffer)."""
        if not dist.is_initialized() or dist.get_world_size(self.group) == 1:
            return grads
        flat = torch.cat([g.reshape(-1).float() for g in grads])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=self.group)
        flat /= dist.get_world_size(self.group)
        out, offset = [], 0
        for g in grads:
            out.append(flat[offset:offset + g.numel()].view_as(g).to(g.dtype))
            offset += g.numel()
        return out
