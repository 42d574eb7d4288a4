// The count coding of count_coding.h on the GPU: one thread per limb to encode, one per word (of every
// plane) to decode, so no two threads write the same limb or word (no atomics). The definition's
// arithmetic: no tables, whose random lookups would cost more than the divisions on a GPU. The decoder
// is the definition's decode_word with the plane count R a template parameter (R <= 12: bases up to
// 4096, every mean of up to 2047 ranks; the definition itself beyond), so that its R words and R digit
// groups live in registers rather than in 32-entry arrays indexed at run time (local memory, read and
// written per digit).
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

// counts::decode_word for code.planes == R.
template <int R>
__device__ void decode_word_of(const counts::CountCode& code, const uint32_t* limbs, size_t nlimbs, size_t w,
                               uint64_t* planes, size_t stride) {
  const size_t first = w * 64, k = size_t(code.per_limb);
  uint64_t word[R];
#pragma unroll
  for (int p = 0; p < R; ++p) word[p] = 0;
  for (size_t l = first / k; l < nlimbs && l * k < first + 64; ++l) {
    uint32_t v = limbs[l], groups[R];
#pragma unroll
    for (int p = 0; p < R; ++p) groups[p] = 0;
    for (int j = 0; j < code.per_limb; ++j) {
      const uint32_t q = counts::divide(code, v), digit = v - q * code.base;
      v = q;
#pragma unroll
      for (int p = 0; p < R; ++p) groups[p] |= ((digit >> p) & 1u) << j;
    }
    const size_t at = l * k;  // the limb's first element; may precede the word by up to k − 1
#pragma unroll
    for (int p = 0; p < R; ++p) {
      word[p] |= at >= first ? uint64_t(groups[p]) << (at - first) : uint64_t(groups[p]) >> (first - at);
    }
  }
#pragma unroll
  for (int p = 0; p < R; ++p) planes[size_t(p) * stride + w] = word[p];
}

template <int R>
__global__ void decode_counts_of_kernel(counts::CountCode code, const uint32_t* in, size_t nwords, uint64_t* planes,
                                        size_t stride) {
  const size_t nlimbs = counts::limbs_for_words(code, nwords);
  const size_t step = size_t{gridDim.x} * blockDim.x;
  for (size_t w = size_t{blockIdx.x} * blockDim.x + threadIdx.x; w < nwords; w += step) {
    decode_word_of<R>(code, in, nlimbs, w, planes, stride);
  }
}

// The decoder for code.planes: decode_counts_of_kernel<R> up to kMaxFixedPlanes, the definition beyond.
constexpr int kMaxFixedPlanes = 12;
template <int R>
void launch_decode(const counts::CountCode& code, const uint32_t* in, size_t nwords, uint64_t* planes, size_t stride,
                   cudaStream_t stream) {
  if constexpr (R > kMaxFixedPlanes) {
    decode_counts_kernel<<<grid_for(nwords), kThreads, 0, stream>>>(code, in, nwords, planes, stride);
  } else if (code.planes == R) {
    decode_counts_of_kernel<R><<<grid_for(nwords), kThreads, 0, stream>>>(code, in, nwords, planes, stride);
  } else {
    launch_decode<R + 1>(code, in, nwords, planes, stride, stream);
  }
}

// A code that make_code did not produce (planes beyond the definition's arrays, no magic) would read and
// write out of place on the device: refused instead.
bool valid(const counts::CountCode& code) {
  const counts::CountCode made = counts::make_code(code.base);
  return code.base >= 2 && code.planes == made.planes && code.per_limb == made.per_limb && code.magic == made.magic;
}

}  // namespace

cudaError_t encode_counts(const counts::CountCode& code, const uint64_t* planes, size_t stride, size_t nwords,
                          uint32_t* out, cudaStream_t stream) {
  if (!valid(code)) return cudaErrorInvalidValue;
  if (nwords == 0) return cudaSuccess;
  encode_counts_kernel<<<grid_for(counts::limbs_for_words(code, nwords)), kThreads, 0, stream>>>(code, planes, stride,
                                                                                                  nwords, out);
  return cudaGetLastError();
}

cudaError_t decode_counts(const counts::CountCode& code, const uint32_t* in, size_t nwords, uint64_t* planes,
                          size_t stride, cudaStream_t stream) {
  if (!valid(code)) return cudaErrorInvalidValue;
  if (nwords == 0) return cudaSuccess;
  launch_decode<1>(code, in, nwords, planes, stride, stream);
  return cudaGetLastError();
}

}  // namespace pride::bits::cuda
