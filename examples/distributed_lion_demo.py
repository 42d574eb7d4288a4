"""Distributed Lion on local workers: D-Lion (MaVo, Avg) against G-Lion and G-AdamW.

Trains the same model with four optimizer configurations, data parallel over ``--workers`` local
processes that form a "pride" process group. Two tasks, both on data every machine has (nothing is
downloaded):

  --task digits  a small CNN on scikit-learn's handwritten digits (8x8 images shipped inside the
                 scikit-learn package); metric: test accuracy
  --task lm      a small GPT-style byte-level language model trained from scratch on the Python
                 standard library's own source files; metric: validation loss (nats per byte)

``--device cuda`` trains on the GPU (the workers share it when there is one); the configurations:

  D-Lion MaVo   pride.optim.DistributedLion(mode="vote"): each worker sends the 1-bit signs of its
                local Lion update, every worker applies the majority vote
  D-Lion Avg    pride.optim.DistributedLion(mode="mean"): ... applies the mean of the signs
  G-Lion        pride.optim.DistributedLion(mode="global"): gradients averaged by an fp32 allreduce,
                then plain Lion
  G-AdamW       torch.optim.AdamW on gradients averaged by an fp32 allreduce

and the other seed papers' optimizers (issue 16):

  D-Lion Cub    DistributedLion(aggregation="int8", quantization="l1", momentum_sync=MomentumSync(
                doubling_k=16)): Lion Cub's L1-quantized p-bit allreduce and momentum synchronisation
  1-bit Adam    pride.optim.OneBitAdam: float32 warm-up for 15% of the steps, then 1-bit momentum
  0/1 Adam      pride.optim.ZeroOneAdam: variance frozen at 15% of the steps, then local steps with
                1-bit synchronisations (interval doubling every 10% of the steps, at most 16)

and reports the final metric, the bytes each worker sends per training step (from
pride.stats()) and the time per step, in OUT/results.md, OUT/results.json and PNG plots.

    python examples/distributed_lion_demo.py                 # 4 workers, defaults below
    python examples/distributed_lion_demo.py --seeds 3       # mean and spread over 3 seeds
    python examples/distributed_lion_demo.py --quick         # 2 workers, 1 epoch, tiny model
    python examples/distributed_lion_demo.py --task lm --device cuda   # the GPU-sized task

The script launches its workers itself (multiprocessing "spawn" + a FileStore); no torchrun needed.
"""

import argparse
import json
import math
import multiprocessing as mp
import os
import platform
import queue
import shlex
import sys
import tempfile
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import pride  # registers the "pride" torch.distributed backend
from pride.optim import DistributedLion

ALGORITHMS = ["auto", "direct", "ring", "tree", "allgather", "hier"]  # pride's sign-allreduce algorithms
CONFIGS = ["D-Lion MaVo", "D-Lion Avg", "D-Lion Cub", "G-Lion", "1-bit Adam", "0/1 Adam", "G-AdamW"]
LION_MODE = {"D-Lion MaVo": "vote", "D-Lion Avg": "mean", "D-Lion Cub": "vote", "G-Lion": "global"}
# The schedules of 1-bit Adam's warm-up and 0/1 Adam's variance freeze, as a fraction of the run
# (a run is far shorter than the papers' 100k+ steps; 15% is the warm-up behind DeepSpeed's 5x).
ADAM_FREEZE_FRACTION = 0.15
# 1-bit and 0/1 Adam here use bias correction (a run of a few hundred steps is too short for
# DeepSpeed's uncorrected variance) and eps 1e-3: weights fed by pixels that are almost always 0 have a
# variance near 0, the compressed momentum is ±scale on every element, and a compressed step moves
# them by ~scale/eps. At eps 1e-8 1-bit Adam diverges at once; at 1e-4 1-bit Adam trains but 0/1
# Adam's synchronisations (which also reset m to the compressed mean) diverge in some seeds; 1e-3
# trains both (3 seeds each; docs/seed-optimizers.md).
ONEBIT_ADAM_OPTIONS = dict(bias_correction=True, eps=1e-3)
BASELINE = "G-AdamW"  # bytes are compared against it
REFERENCE = "G-Lion"  # accuracy is compared against it (SPEC §5)

# Targets of the demo issue / SPEC §5, checked (not assumed) in the report.
ACCURACY_TOLERANCE_POINTS = 1.5
LM_LOSS_TOLERANCE = 0.05
BYTES_REDUCTION_TARGET = 20.0


# --------------------------------------------------------------------------------------------------
# Command line


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0] + " Compares the final metric, bytes sent per worker "
        "per step and time per step; writes a markdown table, JSON and plots to --out.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--workers", type=int, default=4, help="local worker processes (data-parallel ranks)")
    p.add_argument("--epochs", type=int, default=15, help="training epochs per configuration")
    p.add_argument("--seeds", type=int, default=1,
                   help="repeat everything with seeds 0..SEEDS-1 (train/test split, init, shuffling); "
                        "the table reports mean ± std over seeds")
    p.add_argument("--width", type=int, default=32,
                   help="model size: channels of the first conv layer (the CNN has width, 2·width, "
                        "2·width channels; parameters grow as width²)")
    p.add_argument("--batch-size", type=int, default=32, help="samples per worker per step")
    p.add_argument("--lion-lr", type=float, default=None,
                   help="peak learning rate of the three Lion configs (cosine decay to 0); default 1e-3 for "
                        "digits, 3e-4 for lm")
    p.add_argument("--lion-wd", type=float, default=0.1, help="decoupled weight decay of the Lion configs")
    p.add_argument("--adamw-lr", type=float, default=None,
                   help="peak learning rate of G-AdamW (cosine decay to 0); default 3e-3 for digits, 1e-3 for lm")
    p.add_argument("--adamw-wd", type=float, default=0.01, help="weight decay of G-AdamW")
    p.add_argument("--lion-votes", default="exact", choices=["exact", "binary", "ternary"],
                   help="DistributedLion's votes for D-Lion: exact (sign(0) = 0; a bucket goes as ternary votes "
                        "whenever some rank has an exactly-zero update in it, e.g. the weights of dead ReLU units), "
                        "binary (1 bit per element; a zero votes -1) or ternary")
    p.add_argument("--configs", default=",".join(CONFIGS),
                   help=f"comma-separated configurations to train (default all: {', '.join(CONFIGS)}); "
                        f"G-Lion and G-AdamW are always included (the report compares against them)")
    p.add_argument("--algo", default=os.environ.get("PRIDE_ALGO", "direct"),
                   choices=ALGORITHMS,
                   help="sign-allreduce algorithm (sets PRIDE_ALGO for the workers; default: PRIDE_ALGO if set, "
                        "else direct). direct is the "
                        "bandwidth-optimal one (SPEC §4), what a bandwidth-bound multi-host job uses; "
                        "auto lets the cost model choose, and on one host it picks the latency-friendly "
                        "allgather (N-1 bits per element) for a model this small. All give identical "
                        "results, so only bytes and time change")
    p.add_argument("--task", default="digits", choices=["digits", "lm"],
                   help="digits: CNN on scikit-learn's digits; lm: GPT-style byte-level language model on the "
                        "Python standard library's source")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                   help="where the workers train (cuda: every worker uses GPU 0 unless there are more)")
    p.add_argument("--lm-steps", type=int, default=600, help="lm: training steps per configuration")
    p.add_argument("--lm-evals", type=int, default=10, help="lm: validation points over the run")
    p.add_argument("--lm-layers", type=int, default=4, help="lm: transformer blocks")
    p.add_argument("--lm-dim", type=int, default=256, help="lm: model width (heads of 64)")
    p.add_argument("--lm-context", type=int, default=128, help="lm: bytes of context")
    p.add_argument("--lm-megabytes", type=float, default=8.0, help="lm: bytes of source text to use (MB)")
    p.add_argument("--out", default="results", help="directory for results.md, results.json and the plots")
    p.add_argument("--timeout", type=float, default=1800.0,
                   help="seconds before the whole run is declared hung and its workers are killed")
    p.add_argument("--quick", action="store_true",
                   help="tiny smoke run: 2 workers, 1 epoch, width 8, 1 seed (overrides those flags)")
    # scripts/demo.sh: check the flags, then exit, before its set-up and build (argparse exits 2 on bad ones)
    p.add_argument("--check-args", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.algo not in ALGORITHMS:  # argparse checks what was given, not a default taken from PRIDE_ALGO
        p.error(f"PRIDE_ALGO={args.algo!r}: choose from {', '.join(ALGORITHMS)}")
    if args.quick:
        args.workers, args.epochs, args.width, args.seeds = 2, 1, 8, 1
        args.lm_steps, args.lm_evals, args.lm_layers, args.lm_dim, args.lm_context, args.lm_megabytes = 20, 2, 1, 64, 32, 0.5
    chosen = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = [c for c in chosen if c not in CONFIGS]
    if unknown:
        p.error(f"--configs: unknown {unknown}; choose from {CONFIGS}")
    args.configs = [c for c in CONFIGS if c in chosen or c in (BASELINE, REFERENCE)]
    if args.lion_lr is None:
        args.lion_lr = 1e-3 if args.task == "digits" else 3e-4
    if args.adamw_lr is None:
        args.adamw_lr = 3e-3 if args.task == "digits" else 1e-3
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device on this machine")
    if min(args.lm_steps, args.lm_evals, args.lm_layers, args.lm_context) < 1 or args.lm_dim % 64:
        p.error("--lm-steps, --lm-evals, --lm-layers and --lm-context must be positive, --lm-dim a multiple of 64")
    if args.workers < 1 or args.epochs < 1 or args.seeds < 1 or args.width < 1 or args.batch_size < 1:
        p.error("--workers, --epochs, --seeds, --width and --batch-size must be positive")
    return args


# --------------------------------------------------------------------------------------------------
# Data: scikit-learn's digits, split by seed, sharded by rank


def load_digits_split(seed, test_fraction=0.2):
    """(x_train, y_train, x_test, y_test) as tensors; images 1x8x8, standardised with train statistics."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=test_fraction, stratify=y, random_state=seed)
    mean, std = x_tr.mean(), x_tr.std()

    def to_tensors(images, labels):
        images = torch.tensor((images - mean) / std, dtype=torch.float32).view(-1, 1, 8, 8)
        return images, torch.tensor(labels, dtype=torch.long)

    return (*to_tensors(x_tr, y_tr), *to_tensors(x_te, y_te))


def epoch_batches(num_samples, batch_size, rank, world, seed, epoch):
    """This rank's index batches for one epoch, like DistributedSampler(drop_last=True): one shared
    permutation (same seed on every rank), rank r takes every world-th sample from r. Every rank gets
    the same number of batches, so every rank issues the same sequence of collectives."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    per_rank = num_samples // world
    mine = torch.randperm(num_samples, generator=g)[rank:per_rank * world:world]
    return list(mine.split(batch_size))


# --------------------------------------------------------------------------------------------------
# Model


def make_model(width):
    """A small CNN: 8x8 -> 4x4 -> 2x2. No BatchNorm: its running statistics would be computed from each
    rank's own shard and make the replicas differ, which D-Lion's premise (identical x) excludes."""
    w2 = 2 * width
    return nn.Sequential(
        nn.Conv2d(1, width, 3, padding=1), nn.ReLU(),
        nn.Conv2d(width, w2, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(w2, w2, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(w2 * 2 * 2, 10),
    )


@torch.no_grad()
def test_accuracy(model, x, y):
    model.eval()
    acc = (model(x).argmax(1) == y).float().mean().item()
    model.train()
    return 100.0 * acc


# --------------------------------------------------------------------------------------------------
# Tasks: data, model, batches and the metric, behind one interface


class DigitsTask:
    """The CNN on scikit-learn's digits; one round is one epoch, the metric is test accuracy."""

    metric = "test accuracy %"
    higher_is_better = True

    def __init__(self, args, seed, device):
        self.args, self.seed = args, seed
        self.x_tr, self.y_tr, self.x_te, self.y_te = (t.to(device) for t in load_digits_split(seed))

    def describe(self):
        return (f"CNN width {self.args.width} ({count_parameters(self.model()):,} parameters), "
                f"{self.args.epochs} epochs, batch {self.args.batch_size} per worker; scikit-learn digits "
                f"(1797 images 8x8, 20% held out)")

    def model(self):
        return make_model(self.args.width)

    def rounds(self):
        return self.args.epochs

    def steps_per_round(self, world):
        return math.ceil(len(self.y_tr) // world / self.args.batch_size)

    def round_batches(self, round_index, rank, world):
        return epoch_batches(len(self.y_tr), self.args.batch_size, rank, world, self.seed, round_index)

    def loss(self, model, idx):
        return F.cross_entropy(model(self.x_tr[idx]), self.y_tr[idx])

    def evaluate(self, model):
        return test_accuracy(model, self.x_te, self.y_te)


def stdlib_source_bytes(limit):
    """The Python standard library's own .py files, concatenated in a fixed order, at most `limit` bytes."""
    import sysconfig

    root = sysconfig.get_paths()["stdlib"]
    chunks, total = [], 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in ("site-packages", "dist-packages", "__pycache__"))
        for name in sorted(filenames):
            if name.endswith(".py") and total < limit:
                with open(os.path.join(dirpath, name), "rb") as f:
                    data = f.read(limit - total)
                chunks.append(data)
                total += len(data)
    if total < 1 << 16:
        raise RuntimeError(f"only {total} bytes of Python source under {root}")
    return b"".join(chunks)


class TinyGPT(nn.Module):
    """A GPT-style decoder: byte embeddings plus learned positions, pre-norm causal transformer blocks,
    a linear head over the 256 byte values."""

    def __init__(self, layers, dim, context):
        super().__init__()
        self.tok = nn.Embedding(256, dim)
        self.pos = nn.Embedding(context, dim)
        block = nn.TransformerEncoderLayer(dim, dim // 64, 4 * dim, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 256, bias=False)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(context), persistent=False)

    def forward(self, x):
        t = x.shape[1]
        h = self.tok(x) + self.pos(torch.arange(t, device=x.device))
        h = self.blocks(h, mask=self.mask[:t, :t], is_causal=True)
        return self.head(self.norm(h))


class LanguageModelTask:
    """TinyGPT on the standard library's source, byte-level; the metric is validation loss (nats per
    byte) on the last 10% of the text. One round is lm_steps / lm_evals steps."""

    metric = "validation loss (nats/byte)"
    higher_is_better = False

    def __init__(self, args, seed, device):
        self.args, self.seed, self.device = args, seed, device
        text = torch.frombuffer(bytearray(stdlib_source_bytes(int(args.lm_megabytes * 1e6))), dtype=torch.uint8)
        split = int(0.9 * len(text))
        self.train, self.val = text[:split].to(device), text[split:].to(device)
        self.ctx = args.lm_context

    def describe(self):
        a = self.args
        return (f"GPT-style byte model, {a.lm_layers} blocks of width {a.lm_dim}, context {a.lm_context} "
                f"({count_parameters(self.model()):,} parameters), {a.lm_steps} steps, batch {a.batch_size} "
                f"sequences per worker; {len(self.train) + len(self.val):,} bytes of the Python standard "
                f"library's source, the last 10% held out")

    def model(self):
        return TinyGPT(self.args.lm_layers, self.args.lm_dim, self.ctx)

    def rounds(self):
        return self.args.lm_evals

    def steps_per_round(self, world):
        return max(1, self.args.lm_steps // self.args.lm_evals)

    def round_batches(self, round_index, rank, world):
        g = torch.Generator().manual_seed((self.seed * 1_000_003 + round_index) * 4099 + rank)
        starts = torch.randint(0, len(self.train) - self.ctx - 1, (self.steps_per_round(world), self.args.batch_size),
                               generator=g)
        return list(starts)

    def _loss_at(self, model, data, starts):
        offsets = starts.to(data.device)[:, None] + torch.arange(self.ctx + 1, device=data.device)
        window = data[offsets].long()
        logits = model(window[:, :-1])
        return F.cross_entropy(logits.reshape(-1, 256), window[:, 1:].reshape(-1))

    def loss(self, model, starts):
        return self._loss_at(model, self.train, starts)

    @torch.no_grad()
    def evaluate(self, model):
        model.eval()
        g = torch.Generator().manual_seed(12345)
        losses = [self._loss_at(model, self.val, torch.randint(0, len(self.val) - self.ctx - 1, (32,), generator=g))
                  for _ in range(16)]
        model.train()
        return torch.stack(losses).mean().item()


def make_task(args, seed, device):
    return (DigitsTask if args.task == "digits" else LanguageModelTask)(args, seed, device)


def count_parameters(model):
    return sum(p.numel() for p in model.parameters())


# --------------------------------------------------------------------------------------------------
# Optimizers


class GradientAllreduce:
    """The G-* baselines' communication: average the gradients of all ranks in fp32 before the local
    optimizer step, in one flat buffer (one allreduce per step, like a single DDP bucket)."""

    def __init__(self, params, world):
        self.params = [p for p in params if p.requires_grad]
        self.world = world

    @torch.no_grad()
    def __call__(self):
        grads = [p.grad for p in self.params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)  # SUM then divide: the same bytes as AVG, and every backend has SUM
        flat.div_(self.world)
        for g, avg in zip(grads, flat.split([g.numel() for g in grads])):
            g.copy_(avg.view_as(g))


def make_optimizer(config, model, args, world, total_steps):
    """(optimizer, hook run between backward and step or None)."""
    if config == BASELINE:
        opt = torch.optim.AdamW(model.parameters(), lr=args.adamw_lr, weight_decay=args.adamw_wd)
        return opt, GradientAllreduce(model.parameters(), world)
    freeze = max(1, round(ADAM_FREEZE_FRACTION * total_steps))
    if config == "1-bit Adam":  # these communicate inside step()
        return pride.optim.OneBitAdam(model.parameters(), lr=args.adamw_lr, weight_decay=args.adamw_wd,
                                      freeze_step=freeze, **ONEBIT_ADAM_OPTIONS), None
    if config == "0/1 Adam":
        return pride.optim.ZeroOneAdam(model.parameters(), lr=args.adamw_lr, weight_decay=args.adamw_wd,
                                       var_freeze_step=freeze, local_step_scaler=max(1, total_steps // 10),
                                       **ONEBIT_ADAM_OPTIONS), None
    cub = {}
    if config == "D-Lion Cub":
        cub = dict(aggregation="int8", quantization="l1", momentum_sync=pride.optim.MomentumSync(doubling_k=16))
    opt = DistributedLion(model.parameters(), lr=args.lion_lr, weight_decay=args.lion_wd,
                          mode=LION_MODE[config], votes=args.lion_votes, **cub)
    return opt, None  # DistributedLion communicates inside step()


# --------------------------------------------------------------------------------------------------
# One configuration on one rank


def train_config(config, seed, task, args, rank, world, device):
    """Trains one configuration; returns this rank's measurements (rank 0 adds the task's metric)."""
    torch.manual_seed(seed)
    model = task.model().to(device)
    pride.broadcast_parameters(model.state_dict(), root_rank=0)  # identical start on every rank
    steps_per_round = task.steps_per_round(world)
    total_steps = steps_per_round * task.rounds()
    opt, before_step = make_optimizer(config, model, args, world, total_steps)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * s / total_steps)))
    warmup = min(5, total_steps // 2)  # first steps pay for allocations and connection set-up
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    rec = {"loss": [], "metric": [], "step_s": [], "bytes_sent": 0, "steps": 0, "algorithms": []}
    bar = progress_bar(rank, total_steps, f"seed {seed} {config:<11}")
    for round_index in range(task.rounds()):
        dist.barrier()  # rank 0 may still be evaluating; don't count that wait as step time
        pride.reset_stats()  # count the training steps' traffic only
        losses = []
        for batch in task.round_batches(round_index, rank, world):
            sync()
            start = time.perf_counter()
            loss = task.loss(model, batch)
            opt.zero_grad()
            loss.backward()
            if before_step is not None:
                before_step()
            opt.step()
            sync()
            rec["step_s"].append(time.perf_counter() - start)
            sched.step()
            losses.append(loss.detach())
            bar.update()
        rec["loss"] += torch.stack(losses).float().cpu().tolist()
        traffic = pride.stats()
        rec["bytes_sent"] += traffic["bytes_sent"]
        rec["algorithms"] = sorted(k for k, v in traffic["per_algorithm"].items() if v["calls"])
        rec["steps"] += steps_per_round
        if rank == 0:
            rec["metric"].append(task.evaluate(model))
            bar.set_postfix(round=round_index + 1, loss=f"{rec['loss'][-1]:.3f}", metric=f"{rec['metric'][-1]:.3f}")
    bar.close()
    rec["step_s"] = rec["step_s"][warmup:]
    rec["replica_max_abs_diff"] = replica_divergence(model)
    return rec


def replica_divergence(model):
    """Largest |x_rank - x_0| over all parameters: 0 when the ranks hold identical replicas."""
    flat = torch.cat([p.detach().flatten().float() for p in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, flat)
    return max((g - gathered[0]).abs().max().item() for g in gathered)


def progress_bar(rank, total, desc):
    """tqdm on rank 0; the other ranks stay quiet."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, disable=rank != 0, dynamic_ncols=True, leave=True)


def combine_ranks(rec):
    """Gathers every rank's record to rank 0: loss per step and step time averaged over ranks, bytes
    per step averaged over steps and ranks. Returns the combined record on rank 0, None elsewhere."""
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, rec)
    if dist.get_rank() != 0:
        return None
    n = len(everyone)
    return {
        "metric": rec["metric"],
        "final_metric": rec["metric"][-1],
        "loss": [sum(r["loss"][i] for r in everyone) / n for i in range(len(rec["loss"]))],
        "bytes_per_step": sum(r["bytes_sent"] / r["steps"] for r in everyone) / n,
        "ms_per_step": 1e3 * sum(sum(r["step_s"]) / max(1, len(r["step_s"])) for r in everyone) / n,
        "replica_max_abs_diff": rec["replica_max_abs_diff"],
        "algorithms": rec["algorithms"],
    }


# --------------------------------------------------------------------------------------------------
# Workers and their launcher


def worker(rank, world, store_path, args, results):
    """One rank: joins the pride group, trains every (seed, config), rank 0 reports the records."""
    try:
        torch.set_num_threads(1)  # workers share the machine's cores; oversubscribed threads only thrash
        device = torch.device("cpu")
        if args.device == "cuda":
            device = torch.device("cuda", rank % torch.cuda.device_count())  # ranks share the GPUs there are
            torch.cuda.set_device(device)
        store = dist.FileStore(store_path, world)
        dist.init_process_group("pride", store=store, rank=rank, world_size=world,
                                timeout=timedelta(seconds=120))
        runs = []
        for seed in range(args.seeds):
            task = make_task(args, seed, device)
            for config in args.configs:
                combined = combine_ranks(train_config(config, seed, task, args, rank, world, device))
                if rank == 0:
                    runs.append({"seed": seed, "config": config, **combined})
        dist.destroy_process_group()
        results.put((rank, None, runs if rank == 0 else None))
    except BaseException:  # noqa: BLE001 - every failure goes to the parent with its traceback
        results.put((rank, traceback.format_exc(), None))
        raise SystemExit(1)


def launch(args):
    """Runs ``args.workers`` workers; returns rank 0's runs or raises with the failed ranks' tracebacks.
    A worker that dies makes its peers' collectives fail within the group timeout; whatever is
    still alive at --timeout (or shortly after a failure) is killed, so the demo never hangs."""
    os.environ["PRIDE_ALGO"] = args.algo  # read by the workers' pride backends (spawn inherits it)
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    with tempfile.TemporaryDirectory(prefix="pride-demo-") as tmp:
        store_path = os.path.join(tmp, "store")
        procs = [ctx.Process(target=worker, args=(r, args.workers, store_path, args, results), daemon=True)
                 for r in range(args.workers)]
        for p in procs:
            p.start()
        outcome, runs = collect(procs, results, args.timeout)
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join()
    failed = {r: err for r, err in outcome.items() if err}
    if failed or runs is None:
        details = "\n".join(f"--- rank {r} ---\n{e}" for r, e in sorted(failed.items()))
        raise RuntimeError(f"the demo's workers failed:\n{details}")
    return runs


def collect(procs, results, timeout):
    """Waits for every worker's report: ({rank: traceback or None}, rank 0's runs)."""
    outcome, runs = {}, None
    deadline = time.monotonic() + timeout
    grace_after_failure = 30.0  # time for the surviving ranks to notice and report their own error
    while len(outcome) < len(procs) and time.monotonic() < deadline:
        try:
            rank, err, payload = results.get(timeout=0.5)
        except queue.Empty:
            if all(not p.is_alive() for p in procs):
                break
            continue
        outcome[rank] = err
        if rank == 0 and err is None:
            runs = payload
        if err is not None:
            deadline = min(deadline, time.monotonic() + grace_after_failure)
    for r, p in enumerate(procs):
        if r not in outcome:
            outcome[r] = (f"no report (exit code {p.exitcode})" if not p.is_alive()
                          else "hung: killed after the deadline")
    return outcome, runs


# --------------------------------------------------------------------------------------------------
# Report: results.json, results.md, plots


def summarize(runs, configs):
    """Per config: mean and std over seeds of the metric, bytes and time, and the curves averaged over seeds."""
    summary = {}
    for config in configs:
        mine = [r for r in runs if r["config"] == config]
        metric = torch.tensor([r["final_metric"] for r in mine], dtype=torch.float64)
        summary[config] = {
            "metric_mean": metric.mean().item(),
            "metric_std": metric.std().item() if len(mine) > 1 else 0.0,
            "metric_per_seed": metric.tolist(),
            "bytes_per_step": sum(r["bytes_per_step"] for r in mine) / len(mine),
            "ms_per_step": sum(r["ms_per_step"] for r in mine) / len(mine),
            "metric_curve": torch.tensor([r["metric"] for r in mine]).mean(0).tolist(),
            "loss_curve": torch.tensor([r["loss"] for r in mine]).mean(0).tolist(),
            "replica_max_abs_diff": max(r["replica_max_abs_diff"] for r in mine),
        }
    base = summary[BASELINE]["bytes_per_step"]
    for s in summary.values():
        s["bytes_reduction_vs_baseline"] = base / s["bytes_per_step"] if s["bytes_per_step"] else math.inf
    return summary


def check_targets(summary, task_name):
    """[(target, measured, met)] for the demo's targets: the metric close to G-Lion's (digits: within
    1.5 accuracy points, SPEC §5; lm: validation loss within 5% of G-Lion's), and the bytes."""
    ref = summary[REFERENCE]["metric_mean"]
    rows = []
    for config in [c for c in ("D-Lion MaVo", "D-Lion Avg") if c in summary]:
        value = summary[config]["metric_mean"]
        if task_name == "digits":
            gap = value - ref
            rows.append((f"{config} accuracy within {ACCURACY_TOLERANCE_POINTS} points of {REFERENCE}",
                         f"{gap:+.2f} points", gap >= -ACCURACY_TOLERANCE_POINTS))
        else:
            rel = (value - ref) / ref
            rows.append((f"{config} validation loss within {LM_LOSS_TOLERANCE:.0%} of {REFERENCE}",
                         f"{rel:+.1%}", rel <= LM_LOSS_TOLERANCE))
    for config in [c for c in ("D-Lion MaVo", "D-Lion Avg") if c in summary]:
        red = summary[config]["bytes_reduction_vs_baseline"]
        rows.append((f"{config} bytes/step ≥ {BYTES_REDUCTION_TARGET:g}× fewer than {BASELINE}",
                     f"{red:.1f}×", red >= BYTES_REDUCTION_TARGET))
    return rows


def machine_description():
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return (f"{cpu}, {os.cpu_count()} logical CPUs, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}, torch {torch.__version__}")


def write_markdown(path, summary, targets, args, command, machine, wall_s, task_text, metric_name):
    seeds = ", ".join(str(s) for s in range(args.seeds))
    lines = [
        "# Distributed Lion demo",
        "",
        f"`{command}`",
        "",
        f"{args.workers} workers on {args.device}, {task_text}, seeds {seeds}, "
        f"sign-allreduce algorithm {args.algo}, D-Lion votes {args.lion_votes}. Machine: {machine}. "
        f"Wall time {wall_s:.0f} s.",
        "",
        f"| config | {metric_name} (mean ± std over {args.seeds} seed{'s' * (args.seeds > 1)}) "
        f"| bytes sent / step / worker | {BASELINE} bytes ÷ config bytes | ms / step |",
        "|---|---|---|---|---|",
    ]
    for config, s in summary.items():
        lines.append(f"| {config} | {s['metric_mean']:.3f} ± {s['metric_std']:.3f} "
                     f"| {s['bytes_per_step']:,.0f} | {s['bytes_reduction_vs_baseline']:.1f}× "
                     f"| {s['ms_per_step']:.2f} |")
    lines += ["", "| target | measured | status |", "|---|---|---|"]
    lines += [f"| {t} | {m} | {'met' if ok else 'missed'} |" for t, m, ok in targets]
    lines += [
        "",
        "Bytes are `pride.stats()['bytes_sent']` over the training steps only (evaluation and set-up "
        "excluded), averaged over steps and workers. ms/step is the wall time of forward, backward, "
        "communication and update (with the GPU synchronized around it on cuda), averaged over steps "
        "after a warm-up and over workers.",
        "",
    ]
    with open(path, "w") as f:
        f.write("\n".join(lines))


METRIC_PLOT = {"digits": "accuracy.png", "lm": "val_loss.png"}


def write_plots(out, summary, args, metric_name):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for config, s in summary.items():
        ax.plot(range(1, len(s["metric_curve"]) + 1), s["metric_curve"], marker="o", label=config)
    ax.set(xlabel="epoch" if args.task == "digits" else "evaluation", ylabel=metric_name,
           title=f"{metric_name} (mean over seeds)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, METRIC_PLOT[args.task]), dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    for config, s in summary.items():
        ax.plot(range(1, len(s["loss_curve"]) + 1), s["loss_curve"], label=config, alpha=0.85)
    ax.set(xlabel="step", ylabel="training loss", yscale="log",
           title="Training loss (mean over workers and seeds)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "loss.png"), dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    names = list(summary)
    values = [summary[c]["bytes_per_step"] for c in names]
    bars = ax.bar(names, values, color=["tab:blue", "tab:orange", "tab:green", "tab:red"])
    ax.bar_label(bars, labels=[f"{v / 1024:,.1f} KiB" for v in values])
    ax.set(yscale="log", ylim=(min(values) / 2, max(values) * 3), ylabel="bytes sent per step per worker",
           title=f"Communication per step ({args.workers} workers)")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "bytes.png"), dpi=120)
    plt.close(fig)


def report(runs, args, wall_s):
    os.makedirs(args.out, exist_ok=True)
    summary = summarize(runs, args.configs)
    targets = check_targets(summary, args.task)
    command = "python " + shlex.join(sys.argv)
    machine = machine_description()
    task = make_task(args, 0, torch.device("cpu"))
    if args.device == "cuda":
        machine += f", {torch.cuda.get_device_name()}"
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"command": command, "machine": machine, "args": vars(args), "wall_s": wall_s,
                   "summary": summary, "targets": targets, "runs": runs}, f, indent=1)
    write_markdown(os.path.join(args.out, "results.md"), summary, targets, args, command, machine, wall_s,
                   task.describe(), task.metric)
    write_plots(args.out, summary, args, task.metric)
    return summary, targets


def main(argv=None):
    args = parse_args(argv)
    if args.check_args:
        return 0
    start = time.monotonic()
    try:
        runs = launch(args)
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    summary, targets = report(runs, args, time.monotonic() - start)
    with open(os.path.join(args.out, "results.md")) as f:
        print(f.read())
    print(f"wrote {args.out}/results.md, results.json, {METRIC_PLOT[args.task]}, loss.png, bytes.png")
    for config, s in summary.items():
        if s["replica_max_abs_diff"] != 0.0:
            why = " (0/1 Adam's local steps: replicas are equal only at its synchronisations)" if config == "0/1 Adam" else ""
            print(f"warning: {config}: replicas differ by up to {s['replica_max_abs_diff']:.3g}{why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
