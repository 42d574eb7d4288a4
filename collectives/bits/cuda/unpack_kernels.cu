// Unpack on the GPU: each thread writes 16 bytes of elements from the bits of one half-word.
#include "collectives/bits/cuda/device_elements.cuh"
#include "collectives/bits/cuda/element_math.cuh"
#include "collectives/bits/cuda/kernels.h"

namespace pride::bits::cuda {
namespace {

using namespace device;

template <class Tr>
__global__ void unpack_vote_kernel(const uint32_t* pos32, const uint32_t* tie32, size_t n, typename Tr::T* y,
                                   bool aligned) {
  using T = typename Tr::T;
  constexpr int E = kVec<T>;
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  const size_t nvec = (n + E - 1) / E;
  const T plus = Tr::from_f32(1.0f), minus = Tr::from_f32(-1.0f), zero = Tr::from_f32(0.0f);
  for (size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < nvec; i += stride) {
    const size_t first = i * E;
    const uint32_t p = lane_bits<T>(pos32, first);
    const uint32_t z = tie32 ? lane_bits<T>(tie32, first) : 0u;
    T v[E];
#pragma unroll
    for (int k = 0; k < E; ++k) v[k] = (p >> k) & 1u ? plus : ((z >> k) & 1u ? zero : minus);
    store_elements(y, n, first, aligned, v);
  }
}

// The means tabulated in shared memory when there are few planes (element_math.cuh, kMaxMeanTablePlanes).
// P > 0: exactly P planes (≤ kFixedCountPlanes, so tabulated), read by counts_at_fixed; P == 0: `planes`
// at run time.
template <class Tr, int P>
__global__ void unpack_mean_kernel(const uint32_t* count32, int planes, size_t plane_halves, size_t n,
                                   MeanArgs m, typename Tr::T* y, bool aligned, bool tabulated) {
  using T = typename Tr::T;
  constexpr int E = kVec<T>;
  extern __shared__ __align__(16) unsigned char table_bytes[];
  T* table = reinterpret_cast<T*>(table_bytes);
  if (tabulated) tabulate_means(table, planes, m, [](float mean) { return Tr::from_f32(mean); });
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  const size_t nvec = (n + E - 1) / E;
  for (size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < nvec; i += stride) {
    const size_t first = i * E;
    uint32_t u[E];
    T v[E];
    if constexpr (P > 0) {
      counts_at_fixed<T, P>(count32, plane_halves, first, u);
#pragma unroll
      for (int k = 0; k < E; ++k) v[k] = table[u[k]];
    } else {
      counts_at<T>(count32, planes, plane_halves, first, u);
#pragma unroll
      for (int k = 0; k < E; ++k) v[k] = tabulated ? table[u[k]] : Tr::from_f32(mean_value(u[k], m));
    }
    store_elements(y, n, first, aligned, v);
  }
}

template <class Tr>
cudaError_t launch_vote(const uint64_t* pos, const uint64_t* tie, size_t n, void* y, cudaStream_t stream) {
  const size_t nvec = (n + kVec<typename Tr::T> - 1) / kVec<typename Tr::T>;
  unpack_vote_kernel<Tr><<<grid_for(nvec), kThreads, 0, stream>>>(
      reinterpret_cast<const uint32_t*>(pos), reinterpret_cast<const uint32_t*>(tie), n,
      static_cast<typename Tr::T*>(y), aligned16(y));
  return cudaGetLastError();
}

// The kernel for `planes` planes: the instance of that count up to kFixedCountPlanes, else the run-time one.
template <class Tr, int P = 1>
cudaError_t launch_mean(const uint64_t* count, int planes, size_t n, const MeanArgs& m, void* y,
                        cudaStream_t stream) {
  if constexpr (P <= kFixedCountPlanes) {
    if (planes != P) return launch_mean<Tr, P + 1>(count, planes, n, m, y, stream);
  }
  constexpr int kFixed = P <= kFixedCountPlanes ? P : 0;
  const size_t nvec = (n + kVec<typename Tr::T> - 1) / kVec<typename Tr::T>;
  const size_t table_bytes = mean_table_bytes(planes, sizeof(typename Tr::T));
  const bool tabulated = table_bytes != 0;
  unpack_mean_kernel<Tr, kFixed><<<grid_for(nvec), kThreads, table_bytes, stream>>>(
      reinterpret_cast<const uint32_t*>(count), planes, 2 * words_for(n), n, m, static_cast<typename Tr::T*>(y),
      aligned16(y), tabulated);
  return cudaGetLastError();
}

}  // namespace

cudaError_t unpack_vote(const uint64_t* pos, const uint64_t* tie, size_t n, void* y, DType dtype,
                        cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  switch (dtype) {
    case DType::kFloat32: return launch_vote<F32>(pos, tie, n, y, stream);
    case DType::kBFloat16: return launch_vote<BF16>(pos, tie, n, y, stream);
    case DType::kFloat16: return launch_vote<F16>(pos, tie, n, y, stream);
    case DType::kInt8: return launch_vote<I8>(pos, tie, n, y, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t unpack_mean(const uint64_t* count, int planes, size_t n, int scale, int64_t offset, int64_t nranks,
                        void* y, DType dtype, cudaStream_t stream) {
  if (planes < 1 || planes > 32 || nranks < 1) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  const MeanArgs m{scale, offset, float(nranks)};
  switch (dtype) {
    case DType::kFloat32: return launch_mean<F32>(count, planes, n, m, y, stream);
    case DType::kBFloat16: return launch_mean<BF16>(count, planes, n, m, y, stream);
    case DType::kFloat16: return launch_mean<F16>(count, planes, n, m, y, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace pride::bits::cuda
