// Lion's local step fused with packing its vote, on the GPU: one pass reads g and m, writes m and the
// vote bits (lion_impl.h's arithmetic, element_math.cuh). Lanes assemble plane half-words as pack does.
#include "collectives/bits/cuda/device_elements.cuh"
#include "collectives/bits/cuda/element_math.cuh"
#include "collectives/bits/cuda/kernels.h"
#include "collectives/bits/cuda/slice_pieces.h"
#include "collectives/bits/cuda/tensor_slices.h"

namespace pride::bits::cuda {
namespace {

using namespace device;

// The steps (32 * E elements each, E plane half-words) of elements [0, n).
template <class T>
__host__ __device__ size_t lion_steps(size_t n) {
  return (2 * plane_words(n) + kVec<T> - 1) / kVec<T>;
}

// Steps [first_step, end_step) of the range of elements [0, n), warp `warp` of `nwarps` working on
// them; together the steps of lion_steps(n) write every half-word of the range's 2 * words_for(n).
template <class Tr>
__device__ void lion_range(const typename Tr::T* g, typename Tr::T* m, size_t n, bool aligned, const LionArgs& p,
                           uint32_t* pos32, uint32_t* neg32, size_t first_step, size_t end_step, size_t warp,
                           size_t nwarps) {
  using T = typename Tr::T;
  constexpr int E = kVec<T>;
  const size_t nhalves = 2 * plane_words(n);
  for (size_t step = first_step + warp; step < end_step; step += nwarps) {
    const size_t first = step * 32 * E + lane_id() * E;
    T gv[E], mv[E];
    load_elements(g, n, first, aligned, gv);
    load_elements(m, n, first, aligned, mv);
    uint32_t up = 0, down = 0;
#pragma unroll
    for (int k = 0; k < E; ++k) {
      const float c = lion_step<Tr>(gv[k], mv[k], p);
      up |= uint32_t{c > 0.0f} << k;
      down |= uint32_t{c < 0.0f} << k;
    }
    store_elements(m, n, first, aligned, mv);
    up = gather_lane_bits<E>(up);
    if (neg32) down = gather_lane_bits<E>(down);  // neg32 is the same for the whole grid
    const size_t half = step * E + lane_id() / (32 / E);
    if (lane_id() % (32 / E) == 0 && half < nhalves) {
      pos32[half] = up;
      if (neg32) neg32[half] = down;
    }
  }
}

template <class Tr>
__global__ void lion_kernel(const typename Tr::T* g, typename Tr::T* m, size_t n, bool aligned, LionArgs p,
                            uint32_t* pos32, uint32_t* neg32) {
  const size_t warp = (size_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32;
  lion_range<Tr>(g, m, n, aligned, p, pos32, neg32, 0, lion_steps<typename Tr::T>(n), warp,
                 size_t{gridDim.x} * blockDim.x / 32);
}

template <class Tr>
__global__ void lion_slices_kernel(const TensorSlice* slices, size_t nslices, LionArgs p, uint32_t* pos32,
                                   uint32_t* neg32) {
  using T = typename Tr::T;
  for (size_t k = blockIdx.x; k < nslices * kSlicePieces; k += gridDim.x) {  // pieces in turn (slice_pieces.h)
    const TensorSlice sl = slices[k / kSlicePieces];
    size_t first = 0, end = 0;
    piece_range(lion_steps<T>(sl.count), uint32_t(k % kSlicePieces), kSlicePieces, first, end);
    lion_range<Tr>(static_cast<const T*>(sl.in), static_cast<T*>(sl.inout), sl.count, sl.aligned != 0, p,
                   pos32 + 2 * sl.word, neg32 ? neg32 + 2 * sl.word : nullptr, first, end, threadIdx.x / 32,
                   blockDim.x / 32);
  }
}

template <class Tr>
cudaError_t launch(const void* g, void* m, size_t n, const LionArgs& p, uint64_t* pos, uint64_t* neg,
                   cudaStream_t stream) {
  lion_kernel<Tr><<<grid_for(lion_steps<typename Tr::T>(n) * 32), kThreads, 0, stream>>>(
      static_cast<const typename Tr::T*>(g), static_cast<typename Tr::T*>(m), n, aligned16(g) && aligned16(m), p,
      reinterpret_cast<uint32_t*>(pos), reinterpret_cast<uint32_t*>(neg));
  return cudaGetLastError();
}

template <class Tr>
cudaError_t launch_slices(const TensorSlice* slices, size_t nslices, const LionArgs& p, uint64_t* pos, uint64_t* neg,
                          cudaStream_t stream) {
  lion_slices_kernel<Tr><<<grid_for(nslices * kSlicePieces * kThreads), kThreads, 0, stream>>>(
      slices, nslices, p, reinterpret_cast<uint32_t*>(pos), reinterpret_cast<uint32_t*>(neg));
  return cudaGetLastError();
}

}  // namespace

cudaError_t lion_vote(const void* g, void* m, DType dtype, size_t n, double beta1, double beta2, uint64_t* pos,
                      uint64_t* neg, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const LionArgs p = lion_args(beta1, beta2);
  return with_float_traits(dtype, [&](auto tr) { return launch<decltype(tr)>(g, m, n, p, pos, neg, stream); });
}

cudaError_t lion_vote_slices(const TensorSlice* slices, size_t nslices, DType dtype, double beta1, double beta2,
                             uint64_t* pos, uint64_t* neg, cudaStream_t stream) {
  if (nslices == 0) return cudaSuccess;
  const LionArgs p = lion_args(beta1, beta2);
  return with_float_traits(dtype,
                           [&](auto tr) { return launch_slices<decltype(tr)>(slices, nslices, p, pos, neg, stream); });
}

}  // namespace pride::bits::cuda
