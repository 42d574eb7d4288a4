// The device side of re-voting a few elements (engine/sign/sparse_abstentions.h; torch_plugin/
// device_revote.h): gathering this rank's ternary votes at a sorted list of elements into packed words,
// and writing the re-vote's result bits back into the result planes at those elements. The lists are
// small next to the bucket (re-voting pays only while they are), so these kernels are cheap; both write
// whole words, each by one thread, and need no atomics.
#include "collectives/bits/cuda/device_elements.cuh"
#include "collectives/bits/cuda/kernels.h"

namespace pride::bits::cuda {
namespace {

using namespace device;

__device__ inline uint64_t bit_at(const uint64_t* plane, uint32_t j) { return (plane[j / 64] >> (j % 64)) & 1u; }

// One thread per output word: the bits of up to 64 listed elements from each plane.
__global__ void gather_vote_bits_kernel(const uint64_t* pos, const uint64_t* neg, const uint32_t* at, size_t m,
                                        uint64_t* out) {
  const size_t mw = (m + 63) / 64;
  for (size_t w = blockIdx.x * size_t{blockDim.x} + threadIdx.x; w < mw; w += size_t{gridDim.x} * blockDim.x) {
    uint64_t p = 0, q = 0;
    const size_t end = m < (w + 1) * 64 ? m : (w + 1) * 64;
    for (size_t k = w * 64; k < end; ++k) {
      p |= bit_at(pos, at[k]) << (k % 64);
      q |= bit_at(neg, at[k]) << (k % 64);
    }
    out[w] = p;
    out[mw + w] = q;
  }
}

// `at` is ascending, so the elements that fall in one plane word are a run of the list: the thread of
// the run's first element writes that word of every plane, once (no two threads share a word).
__global__ void scatter_plane_bits_kernel(uint64_t* planes, int nplanes, size_t plane_words, const uint32_t* at,
                                          size_t m, const uint64_t* values) {
  const size_t mw = (m + 63) / 64;
  for (size_t k = blockIdx.x * size_t{blockDim.x} + threadIdx.x; k < m; k += size_t{gridDim.x} * blockDim.x) {
    const uint32_t word = at[k] / 64;
    if (k > 0 && at[k - 1] / 64 == word) continue;  // not the first of its run
    size_t end = k;
    while (end < m && at[end] / 64 == word) ++end;
    for (int p = 0; p < nplanes; ++p) {
      const uint64_t* v = values + size_t(p) * mw;
      uint64_t set = 0, clear = 0;
      for (size_t e = k; e < end; ++e) {
        const uint64_t mask = uint64_t{1} << (at[e] % 64);
        if ((v[e / 64] >> (e % 64)) & 1u) set |= mask;
        else clear |= mask;
      }
      uint64_t* w = planes + size_t(p) * plane_words + word;
      *w = (*w & ~clear) | set;
    }
  }
}

}  // namespace

cudaError_t gather_vote_bits(const uint64_t* pos, const uint64_t* neg, const uint32_t* at, size_t m, uint64_t* out,
                             cudaStream_t stream) {
  if (m == 0) return cudaSuccess;
  gather_vote_bits_kernel<<<grid_for((m + 63) / 64), kThreads, 0, stream>>>(pos, neg, at, m, out);
  return cudaGetLastError();
}

cudaError_t scatter_plane_bits(uint64_t* planes, int nplanes, size_t plane_words, const uint32_t* at, size_t m,
                               const uint64_t* values, cudaStream_t stream) {
  if (m == 0 || nplanes <= 0) return cudaSuccess;
  scatter_plane_bits_kernel<<<grid_for(m), kThreads, 0, stream>>>(planes, nplanes, plane_words, at, m, values);
  return cudaGetLastError();
}

}  // namespace pride::bits::cuda
