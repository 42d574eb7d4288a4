// CUDA versions of pack_binary and unpack_vote (same layout and semantics as kernels.h), for device
// tensors: votes are packed on the GPU so that only bits cross PCIe. Both launch asynchronously on
// `stream` and return the launch status; inputs and outputs are device pointers.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "collectives/bits/kernels.h"

namespace pride::bits::cuda {

// plane[words_for(n)]: bit j = (x[j] > 0); bits past n are zero. float32/bf16/fp16 input.
cudaError_t pack_binary(const void* x, DType dtype, size_t n, uint64_t* plane, cudaStream_t stream);

// y[j] = +1 where pos, else 0 where tie (tie may be null), else -1. float32/bf16/fp16/int8 output.
cudaError_t unpack_vote(const uint64_t* pos, const uint64_t* tie, size_t n, void* y, DType dtype,
                        cudaStream_t stream);

}  // namespace pride::bits::cuda
