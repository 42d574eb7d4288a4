// The count coding of count_coding.h on the GPU: one thread per limb to encode, one per word (of every
// plane) to decode, so no two threads write the same limb or word (no atomics). The definition's
// arithmetic as it stands: no tables, whose random lookups would cost more than the divisions on a GPU.
#include "collectives/bits/count_coding.h"
#include "collectives/bits/cuda/device_elements.cuh"
#include "collectives/bits/cuda/kernels.h"

namespace pride::bits::cuda {
namespace {

using namespace device;

__global__ void encode_counts_kernel(counts::CountCode code, const uint64_t* planes, size_t stride, size_t nwords,
                                     uint32_t* out) {
  const size_t nlimbs = counts::limbs_for_words(code, nwords);
  const size_t step = size_t{gridDim.x} * blockDim.x;
  for (size_t l = size_t{blockIdx.x} * blockDim.x + threadIdx.x; l < nlimbs; l += step) {
    out[l] = counts::encode_limb(code, planes, stride, nwords, l);
  }
}

__global__ void decode_counts_kernel(counts::CountCode code, const uint32_t* in, size_t nwords, uint64_t* planes,
                                     size_t stride) {
  const size_t nlimbs = counts::limbs_for_words(code, nwords);
  const size_t step = size_t{gridDim.x} * blockDim.x;
  for (size_t w = size_t{blockIdx.x} * blockDim.x + threadIdx.x; w < nwords; w += step) {
    counts::decode_word(code, in, nlimbs, w, planes, stride);
  }
}

}  // namespace

cudaError_t encode_counts(const counts::CountCode& code, const uint64_t* planes, size_t stride, size_t nwords,
                          uint32_t* out, cudaStream_t stream) {
  if (nwords == 0) return cudaSuccess;
  encode_counts_kernel<<<grid_for(counts::limbs_for_words(code, nwords)), kThreads, 0, stream>>>(code, planes, stride,
                                                                                                  nwords, out);
  return cudaGetLastError();
}

cudaError_t decode_counts(const counts::CountCode& code, const uint32_t* in, size_t nwords, uint64_t* planes,
                          size_t stride, cudaStream_t stream) {
  if (nwords == 0) return cudaSuccess;
  decode_counts_kernel<<<grid_for(nwords), kThreads, 0, stream>>>(code, in, nwords, planes, stride);
  return cudaGetLastError();
}

}  // namespace pride::bits::cuda
