// Pack on the GPU: each lane tests 16 bytes of elements, lanes OR their bits into plane half-words
// with shuffles (device_elements.cuh), and one lane in each group writes the half-word. A warp step
// covers kVec half-words; steps past the last element write zeros, so every word of the plane,
// trailing bits included, is written.
#include <type_traits>

#include "collectives/bits/cuda/device_elements.cuh"
#include "collectives/bits/cuda/half_pair_signs.h"
#include "collectives/bits/cuda/kernels.h"

namespace pride::bits::cuda {
namespace {

using namespace device;

// +infinity's bits in a 16-bit format: the largest magnitude that votes.
template <class Tr>
__device__ constexpr uint32_t inf_bits() {
  return std::is_same_v<Tr, BF16> ? 0x7F80u : 0x7C00u;
}

// The vote bits of a lane's 8 16-bit elements, two at a time (half_pair_signs.h): bit k of up (down)
// is Tr::pos (Tr::neg) of element k.
__device__ inline void lane_signs_16(const uint16_t (&v)[8], uint32_t inf, uint32_t& up, uint32_t& down) {
  uint32_t words[4], pos[4], neg[4];
  memcpy(words, v, sizeof words);
#pragma unroll
  for (int i = 0; i < 4; ++i) half_pair_signs(words[i], inf, pos[i], neg[i]);
  up = gather_pair_signs(pos[0], pos[1], pos[2], pos[3]);
  down = gather_pair_signs(neg[0], neg[1], neg[2], neg[3]);
}

template <class Tr, bool kTernary>
__global__ void pack_kernel(const typename Tr::T* x, size_t n, uint32_t* pos32, uint32_t* neg32, size_t nhalves,
                            bool aligned) {
  using T = typename Tr::T;
  constexpr int E = kVec<T>;
  const size_t warp = (size_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32;
  const size_t nwarps = size_t{gridDim.x} * blockDim.x / 32;
  const size_t nsteps = (nhalves + E - 1) / E;
  for (size_t step = warp; step < nsteps; step += nwarps) {  // warp-uniform: every lane reaches the shuffles
    const size_t first = step * 32 * E + lane_id() * E;
    T v[E];
    load_elements(x, n, first, aligned, v);
    uint32_t up = 0, down = 0;
    if constexpr (sizeof(T) == 2) {
      lane_signs_16(v, inf_bits<Tr>(), up, down);
    } else {
#pragma unroll
      for (int k = 0; k < E; ++k) {
        up |= uint32_t{Tr::pos(v[k])} << k;
        if (kTernary) down |= uint32_t{Tr::neg(v[k])} << k;
      }
    }
    up = gather_lane_bits<E>(up);
    if (kTernary) down = gather_lane_bits<E>(down);
    const size_t half = step * E + lane_id() / (32 / E);
    if (lane_id() % (32 / E) == 0 && half < nhalves) {
      pos32[half] = up;
      if (kTernary) neg32[half] = down;
    }
  }
}

template <class Tr, bool kTernary>
cudaError_t launch(const void* x, size_t n, uint64_t* pos, uint64_t* neg, cudaStream_t stream) {
  const size_t nhalves = 2 * words_for(n);
  const size_t nsteps = (nhalves + kVec<typename Tr::T> - 1) / kVec<typename Tr::T>;
  pack_kernel<Tr, kTernary><<<grid_for(nsteps * 32), kThreads, 0, stream>>>(
      static_cast<const typename Tr::T*>(x), n, reinterpret_cast<uint32_t*>(pos), reinterpret_cast<uint32_t*>(neg),
      nhalves, aligned16(x));
  return cudaGetLastError();
}

template <bool kTernary>
cudaError_t pack(const void* x, DType dtype, size_t n, uint64_t* pos, uint64_t* neg, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return with_float_traits(dtype, [&](auto tr) { return launch<decltype(tr), kTernary>(x, n, pos, neg, stream); });
}

}  // namespace

cudaError_t pack_binary(const void* x, DType dtype, size_t n, uint64_t* plane, cudaStream_t stream) {
  return pack<false>(x, dtype, n, plane, nullptr, stream);
}

cudaError_t pack_ternary(const void* x, DType dtype, size_t n, uint64_t* pos, uint64_t* neg, cudaStream_t stream) {
  return pack<true>(x, dtype, n, pos, neg, stream);
}

}  // namespace pride::bits::cuda
