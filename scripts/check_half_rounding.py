"""Checks, for every float32 bit pattern that is not NaN, that torch's CPU narrowing to float16 and
bfloat16 (which pride's element_traits.h matches bit for bit, tested in tests/kernels) gives the same
bits as independent IEEE round-to-nearest-even conversions: numpy's float16 and ml_dtypes' bfloat16.
The CUDA kernels narrow with the GPU's cvt.rn instructions, which are IEEE round-to-nearest-even, so
this is what lets them give the CPU's bits (collectives/bits/cuda/element_math.cuh). About 7 minutes
on 2 cores; needs `pip install ml_dtypes`.

    .venv/bin/python scripts/check_half_rounding.py
"""

import argparse
import sys
import time

import numpy as np
import torch


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunk-log2", type=int, default=26, help="bit patterns per chunk, as a power of two")
    args = parser.parse_args()
    try:
        import ml_dtypes
    except ImportError:
        sys.exit("check_half_rounding: needs ml_dtypes (pip install ml_dtypes)")
    chunk = 1 << args.chunk_log2
    start_time, mismatches, checked = time.time(), {"float16": 0, "bfloat16": 0}, 0
    for start in range(0, 1 << 32, chunk):
        f = np.arange(start, start + chunk, dtype=np.uint64).astype(np.uint32).view(np.float32)
        f = f[~np.isnan(f)]
        t = torch.from_numpy(f)
        with np.errstate(over="ignore"):  # overflow to infinity is part of what is compared
            theirs = {"float16": f.astype(np.float16), "bfloat16": f.astype(ml_dtypes.bfloat16)}
        for name, dtype in (("float16", torch.float16), ("bfloat16", torch.bfloat16)):
            ours = t.to(dtype).view(torch.int16).numpy().view(np.uint16)
            mismatches[name] += int((ours != theirs[name].view(np.uint16)).sum())
        checked += f.size
        if (start // chunk) % 8 == 7:
            print(f"# {(start + chunk) / 2**32:.0%} of the bit patterns, {time.time() - start_time:.0f} s", flush=True)
    print(f"{checked} non-NaN float32 values: float16 mismatches {mismatches['float16']}, "
          f"bfloat16 mismatches {mismatches['bfloat16']} ({time.time() - start_time:.0f} s)")
    return 0 if not any(mismatches.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
