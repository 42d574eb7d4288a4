// Lion's whole step in one pass over each tensor, for a world of one (tensor_slices.h,
// lion_local_slices): the local update of lion_kernels.cu and the apply of apply_kernels.cu with the
// vote in a register instead of in planes. Splitting them costs the planes' traffic, a threshold kernel
// and a second pass's tail; one rank needs none of it.
#include "collectives/bits/cuda/device_elements.cuh"
#include "collectives/bits/cuda/element_math.cuh"
#include "collectives/bits/cuda/kernels.h"
#include "collectives/bits/cuda/slice_pieces.h"
#include "collectives/bits/cuda/tensor_slices.h"

namespace pride::bits::cuda {
namespace {

using namespace device;

// Vectors of E elements [first_vec, end_vec) of one slice.
template <class Tr>
__device__ void local_range(const LocalSlice& sl, const LionArgs& p, const ApplyArgs& a, bool ternary,
                            size_t first_vec, size_t end_vec, size_t thread, size_t nthreads) {
  using T = typename Tr::T;
  constexpr int E = kVec<T>;
  const T* g = static_cast<const T*>(sl.g);
  T* m = static_cast<T*>(sl.m);
  T* x = static_cast<T*>(sl.x);
  const size_t n = sl.count;
  const bool aligned = sl.aligned != 0;
  // Where c is 0 or NaN: lion_range packs neither bit, so one rank's ternary vote is a tie (Δ = 0) and
  // its binary vote, the 0 bit, is −1 (VoteDelta's rule in apply_kernels.cu).
  const float unsigned_delta = ternary ? 0.0f : -1.0f;
  for (size_t i = first_vec + thread; i < end_vec; i += nthreads) {
    const size_t first = i * E;
    T gv[E], mv[E], xv[E];
    load_elements(g, n, first, aligned, gv);
    load_elements(m, n, first, aligned, mv);
    load_elements(x, n, first, aligned, xv);
#pragma unroll
    for (int k = 0; k < E; ++k) {
      const float c = lion_step<Tr>(gv[k], mv[k], p);
      const float delta = c > 0.0f ? 1.0f : (c < 0.0f ? -1.0f : unsigned_delta);
      xv[k] = lion_update<Tr>(xv[k], delta, a);
    }
    store_elements(m, n, first, aligned, mv);
    store_elements(x, n, first, aligned, xv);
  }
}

template <class Tr>
__global__ void local_slices_kernel(const LocalSlice* slices, size_t nslices, LionArgs p, ApplyArgs a, bool ternary) {
  constexpr int E = kVec<typename Tr::T>;
  for (size_t k = blockIdx.x; k < nslices * kSlicePieces; k += gridDim.x) {  // pieces in turn (slice_pieces.h)
    const LocalSlice sl = slices[k / kSlicePieces];
    size_t first = 0, end = 0;
    piece_range((sl.count + E - 1) / E, uint32_t(k % kSlicePieces), kSlicePieces, first, end);
    local_range<Tr>(sl, p, a, ternary, first, end, threadIdx.x, blockDim.x);
  }
}

template <class Tr>
cudaError_t launch(const LocalSlice* slices, size_t nslices, const LionArgs& p, double lr, double wd, bool ternary,
                   cudaStream_t stream) {
  local_slices_kernel<Tr><<<grid_for(nslices * kSlicePieces * kThreads), kThreads, 0, stream>>>(
      slices, nslices, p, apply_args<Tr>(lr, wd), ternary);
  return cudaGetLastError();
}

}  // namespace

cudaError_t lion_local_slices(const LocalSlice* slices, size_t nslices, DType dtype, double beta1, double beta2,
                              bool ternary, double lr, double wd, cudaStream_t stream) {
  if (nslices == 0) return cudaSuccess;
  const LionArgs p = lion_args(beta1, beta2);
  return with_float_traits(
      dtype, [&](auto tr) { return launch<decltype(tr)>(slices, nslices, p, lr, wd, ternary, stream); });
}

}  // namespace pride::bits::cuda
