// The fused apply of Distributed Lion on the GPU: x ← x·(1 − lr·wd) − lr·Δ straight from the result
// planes, 16 bytes of parameters per thread (elementwise_scalar.h's arithmetic, element_math.cuh).
#include "collectives/bits/cuda/device_elements.cuh"
#include "collectives/bits/cuda/element_math.cuh"
#include "collectives/bits/cuda/kernels.h"
#include "collectives/bits/cuda/slice_pieces.h"
#include "collectives/bits/cuda/tensor_slices.h"

namespace pride::bits::cuda {
namespace {

using namespace device;

// Where Δ comes from: the vote's planes (+1 plane, optional tie plane), or the mean's count planes.
struct VoteDelta {
  const uint32_t* pos32;
  const uint32_t* tie32;
  template <class T>
  __device__ void at(size_t first, float (&delta)[kVec<T>]) const {
    const uint32_t p = lane_bits<T>(pos32, first), z = tie32 ? lane_bits<T>(tie32, first) : 0u;
#pragma unroll
    for (int k = 0; k < kVec<T>; ++k) delta[k] = (p >> k) & 1u ? 1.0f : ((z >> k) & 1u ? 0.0f : -1.0f);
  }
  __device__ VoteDelta offset(uint64_t word) const {
    return {pos32 + 2 * word, tie32 ? tie32 + 2 * word : nullptr};
  }
  size_t table_bytes() const { return 0; }
  __device__ VoteDelta with_table(float*) const { return *this; }
};

// P > 0: exactly P count planes (≤ kFixedCountPlanes), read by counts_at_fixed; P == 0: `planes` at
// run time (counts_at).
template <class Tr, int P = 0>
struct MeanDelta {
  const uint32_t* count32;
  int planes;
  size_t plane_halves;
  MeanArgs m;
  const float* table = nullptr;  // in shared memory, once with_table() built it: Δ per count value
  template <class T>
  __device__ void at(size_t first, float (&delta)[kVec<T>]) const {
    uint32_t u[kVec<T>];
    if constexpr (P > 0) {
      counts_at_fixed<T, P>(count32, plane_halves, first, u);
    } else {
      counts_at<T>(count32, planes, plane_halves, first, u);
    }
    // Δ is the mean rounded to the dtype first, as if unpack_mean had produced a delta tensor.
#pragma unroll
    for (int k = 0; k < kVec<T>; ++k) delta[k] = table ? table[u[k]] : round_to<Tr>(mean_value(u[k], m));
  }
  __device__ MeanDelta offset(uint64_t word) const { return {count32 + 2 * word, planes, plane_halves, m, table}; }
  __host__ __device__ size_t table_bytes() const { return mean_table_bytes(planes, sizeof(float)); }
  // Every thread of the block calls it (it synchronises the block): Δ for every count value in
  // `shared` (table_bytes() of it), and a copy of this delta that reads them there.
  __device__ MeanDelta with_table(float* shared) const {
    if (table_bytes() == 0) return *this;
    tabulate_means(shared, planes, m, [](float mean) { return round_to<Tr>(mean); });
    MeanDelta d = *this;
    d.table = shared;
    return d;
  }
};

// Vectors of E elements [first_vec, end_vec) of the range of elements [0, n).
template <class Tr, class Delta>
__device__ void apply_range(typename Tr::T* x, size_t n, bool aligned, const Delta& d, const ApplyArgs& a,
                            size_t first_vec, size_t end_vec, size_t thread, size_t nthreads) {
  using T = typename Tr::T;
  constexpr int E = kVec<T>;
  for (size_t i = first_vec + thread; i < end_vec; i += nthreads) {
    const size_t first = i * E;
    T v[E];
    float delta[E];
    load_elements(x, n, first, aligned, v);
    d.template at<T>(first, delta);
#pragma unroll
    for (int k = 0; k < E; ++k) v[k] = lion_update<Tr>(v[k], delta[k], a);
    store_elements(x, n, first, aligned, v);
  }
}

// The mean's table, when it has one (MeanDelta::with_table), in dynamic shared memory.
extern __shared__ __align__(16) float delta_table[];

template <class Tr, class Delta>
__global__ void apply_kernel(typename Tr::T* x, size_t n, bool aligned, Delta d, ApplyArgs a) {
  const Delta delta = d.with_table(delta_table);
  apply_range<Tr>(x, n, aligned, delta, a, 0, (n + kVec<typename Tr::T> - 1) / kVec<typename Tr::T>,
                  size_t{blockIdx.x} * blockDim.x + threadIdx.x, size_t{gridDim.x} * blockDim.x);
}

template <class Tr, class Delta>
__global__ void apply_slices_kernel(const TensorSlice* slices, size_t nslices, Delta d, ApplyArgs a) {
  const Delta delta = d.with_table(delta_table);
  constexpr int E = kVec<typename Tr::T>;
  for (size_t k = blockIdx.x; k < nslices * kSlicePieces; k += gridDim.x) {  // pieces in turn (slice_pieces.h)
    const TensorSlice sl = slices[k / kSlicePieces];
    size_t first = 0, end = 0;
    piece_range((sl.count + E - 1) / E, uint32_t(k % kSlicePieces), kSlicePieces, first, end);
    apply_range<Tr>(static_cast<typename Tr::T*>(sl.inout), sl.count, sl.aligned != 0, delta.offset(sl.word), a,
                    first, end, threadIdx.x, blockDim.x);
  }
}

template <class Tr, class Delta>
cudaError_t launch(void* x, size_t n, const Delta& d, double lr, double wd, cudaStream_t stream) {
  const size_t nvec = (n + kVec<typename Tr::T> - 1) / kVec<typename Tr::T>;
  apply_kernel<Tr><<<grid_for(nvec), kThreads, d.table_bytes(), stream>>>(static_cast<typename Tr::T*>(x), n,
                                                                          aligned16(x), d, apply_args<Tr>(lr, wd));
  return cudaGetLastError();
}

template <class Tr, class Delta>
cudaError_t launch_slices(const TensorSlice* slices, size_t nslices, const Delta& d, double lr, double wd,
                          cudaStream_t stream) {
  apply_slices_kernel<Tr><<<grid_for(nslices * kSlicePieces * kThreads), kThreads, d.table_bytes(), stream>>>(
      slices, nslices, d, apply_args<Tr>(lr, wd));
  return cudaGetLastError();
}

// Calls fn(MeanDelta<Tr, P>{...}) with P = planes where a fixed-count instance exists, else P = 0.
template <class Tr, int P = 1, class Fn>
cudaError_t with_mean_delta(const uint64_t* count, int planes, size_t plane_halves, const MeanArgs& m, Fn&& fn) {
  if constexpr (P <= kFixedCountPlanes) {
    if (planes != P) return with_mean_delta<Tr, P + 1>(count, planes, plane_halves, m, fn);
    return fn(MeanDelta<Tr, P>{reinterpret_cast<const uint32_t*>(count), planes, plane_halves, m});
  } else {
    return fn(MeanDelta<Tr, 0>{reinterpret_cast<const uint32_t*>(count), planes, plane_halves, m});
  }
}

}  // namespace

cudaError_t apply_vote(void* x, DType dtype, size_t n, const uint64_t* pos, const uint64_t* tie, double lr,
                       double wd, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const VoteDelta d{reinterpret_cast<const uint32_t*>(pos), reinterpret_cast<const uint32_t*>(tie)};
  return with_float_traits(dtype, [&](auto tr) { return launch<decltype(tr)>(x, n, d, lr, wd, stream); });
}

cudaError_t apply_mean(void* x, DType dtype, size_t n, const uint64_t* count, int planes, int scale, int64_t offset,
                       int64_t nranks, double lr, double wd, cudaStream_t stream) {
  if (planes < 1 || planes > 32 || nranks < 1) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  return with_float_traits(dtype, [&](auto tr) {
    using Tr = decltype(tr);
    return with_mean_delta<Tr>(count, planes, 2 * words_for(n), {scale, offset, float(nranks)},
                               [&](const auto& d) { return launch<Tr>(x, n, d, lr, wd, stream); });
  });
}

cudaError_t apply_vote_slices(const TensorSlice* slices, size_t nslices, DType dtype, const uint64_t* pos,
                              const uint64_t* tie, double lr, double wd, cudaStream_t stream) {
  if (nslices == 0) return cudaSuccess;
  const VoteDelta d{reinterpret_cast<const uint32_t*>(pos), reinterpret_cast<const uint32_t*>(tie)};
  return with_float_traits(dtype, [&](auto tr) {
    return launch_slices<decltype(tr)>(slices, nslices, d, lr, wd, stream);
  });
}

cudaError_t apply_mean_slices(const TensorSlice* slices, size_t nslices, DType dtype, const uint64_t* count,
                              int planes, size_t plane_words, int scale, int64_t offset, int64_t nranks, double lr,
                              double wd, cudaStream_t stream) {
  if (planes < 1 || planes > 32 || nranks < 1) return cudaErrorInvalidValue;
  if (nslices == 0) return cudaSuccess;
  return with_float_traits(dtype, [&](auto tr) {
    using Tr = decltype(tr);
    return with_mean_delta<Tr>(count, planes, 2 * plane_words, {scale, offset, float(nranks)},
                               [&](const auto& d) { return launch_slices<Tr>(slices, nslices, d, lr, wd, stream); });
  });
}

}  // namespace pride::bits::cuda
