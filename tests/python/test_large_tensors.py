"""Tensors of more than 2**31 elements (SPEC §2: counts are size_t end to end): an element index that
passes through a 32-bit int anywhere (a kernel's loop, a chunk's offset, a wire length) lands on the
wrong element or fails above 2**31. The oracle is plain: every rank marks the same few positions, some
of them just below and above 2**31 and at the tail, and the result must carry exactly those marks.

They need about 5 GiB of memory per rank and a minute on a 2-core host, so the CPU ones run only when
PRIDE_LARGE_TESTS=1 (docs/compat.md records their runs); the CUDA one is marked gpu and runs on the GPU
machine (scripts/device_test.sh --suite gpu).
"""

import os

import pytest
import torch

from distributed_harness import init_group, run

NUMEL = 2**31 + 99  # not a multiple of 64: the last packed word is partial
MARKS = [5, 2**31 - 1, 2**31, 2**31 + 5, NUMEL - 64, NUMEL - 1]  # every rank's -1 entries
SPLIT = 2**31 + 33  # rank 0 says -1 and rank 1 +1 here: a sum of 0, whose vote and mean are 0 (SPEC §2)

large = pytest.mark.skipif(os.environ.get("PRIDE_LARGE_TESTS") != "1",
                           reason="needs ~5 GiB per rank and a minute: set PRIDE_LARGE_TESTS=1")


def _marked(device, dtype, rank):
    t = torch.ones(NUMEL, dtype=dtype, device=device)
    t[MARKS] = -1
    t[SPLIT] = -1 if rank == 0 else 1
    return t


def _positions(mask):
    return mask.nonzero().flatten().tolist()


def _signs_beyond_int32(rank, world_size, store_path, device):
    import pride

    init_group(rank, world_size, store_path, timeout_s=600)
    if device == "cuda":
        torch.cuda.set_device(0)
    for mode in ("vote", "mean"):
        t = _marked(device, torch.bfloat16, rank)
        pride.sign_allreduce(t, mode=mode)
        assert (_positions(t < 0), _positions(t == 0)) == (MARKS, [SPLIT]), f"rank {rank}: {mode}"
        assert torch.count_nonzero(t > 0).item() == NUMEL - len(MARKS) - 1, f"rank {rank}: {mode}"
        del t


def _bytes_beyond_int32(rank, world_size, store_path):
    import torch.distributed as dist

    init_group(rank, world_size, store_path, timeout_s=600)
    t = torch.full((NUMEL,), rank + 1, dtype=torch.uint8)
    t[MARKS] = 10 * (rank + 1)
    dist.all_reduce(t)
    total = world_size * (world_size + 1) // 2
    assert _positions(t != total) == MARKS, f"rank {rank}: all_reduce"
    assert t[MARKS].tolist() == [10 * total] * len(MARKS)
    del t
    t = torch.full((NUMEL,), 7 if rank == 0 else 0, dtype=torch.uint8)
    if rank == 0:
        t[MARKS] = 9
    dist.broadcast(t, 0)
    assert _positions(t != 7) == MARKS, f"rank {rank}: broadcast"


def _packed_and_levels_beyond_int32(rank, world_size, store_path):
    import pride

    init_group(rank, world_size, store_path, timeout_s=600)
    bits = torch.full(((NUMEL + 7) // 8,), 0xFF, dtype=torch.uint8)  # +1 everywhere
    bits[-1] = (1 << (NUMEL % 8)) - 1  # the last byte's trailing bits zero, as SPEC §2 lays them out
    for j in MARKS + ([SPLIT] if rank == 0 else []):
        bits[j // 8] &= ~(1 << (j % 8)) & 0xFF
    result = pride.sign_allreduce_packed(bits, NUMEL)  # vote: int8 (mean's float32 would be 8 GiB a rank)
    assert (_positions(result < 0), _positions(result == 0)) == (MARKS, [SPLIT]), f"rank {rank}: packed"
    del bits, result
    q = _marked("cpu", torch.int8, rank)
    pride.level_vote(q, 1)
    assert (_positions(q < 0), _positions(q == 0)) == (MARKS, [SPLIT]), f"rank {rank}: level_vote"


@large
def test_sign_allreduce_packed_and_level_vote_beyond_int32_elements_2ranks():
    run(_packed_and_levels_beyond_int32, 2, deadline_s=600)


@large
def test_sign_allreduce_beyond_int32_elements_2ranks():
    run(_signs_beyond_int32, 2, "cpu", deadline_s=600)


@large
def test_all_reduce_and_broadcast_beyond_int32_elements_2ranks():
    run(_bytes_beyond_int32, 2, deadline_s=600)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
def test_sign_allreduce_beyond_int32_elements_on_cuda_2ranks():
    run(_signs_beyond_int32, 2, "cuda", deadline_s=300)
