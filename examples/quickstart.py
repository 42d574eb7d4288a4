"""pride in 30 lines. Run with:  torchrun --standalone --nproc-per-node 4 examples/quickstart.py"""

import argparse
import os

import torch
import torch.distributed as dist

import pride  # registers the "pride" backend

argparse.ArgumentParser(description=__doc__).parse_args()  # --help; it takes no options
if "RANK" not in os.environ:  # not started by torchrun
    raise SystemExit(f"quickstart.py needs a launcher. {__doc__}")
dist.init_process_group("pride")  # env:// (torchrun sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)
rank, world = dist.get_rank(), dist.get_world_size()

# A standard collective: every rank gets the sum.
t = torch.full((4,), float(rank))
dist.all_reduce(t)
print(f"rank {rank}: all_reduce      -> {t.tolist()}")

# The headline collective: every rank gets the element-wise majority vote of the ranks' signs,
# sent as one bit per element instead of 32.
torch.manual_seed(rank)
update = torch.randn(8)
mine = torch.sign(update).tolist()
pride.sign_allreduce(update, mode="vote")
print(f"rank {rank}: sign_allreduce  my signs {mine} -> majority {update.tolist()}")

dist.barrier()
if rank == 0:
    s = pride.stats()
    print(f"pride.stats(): {s['collectives']} collectives, bytes_sent={s['bytes_sent']}, "
          f"bytes_received={s['bytes_received']}")
    for algorithm, counters in sorted(s["per_algorithm"].items()):
        print(f"  {algorithm:>16}: {counters}")
dist.destroy_process_group()
