// Pack and unpack on the GPU. Pack gives each warp 32 consecutive elements per step: every lane
// tests its element, __ballot_sync gathers the 32 answers into one 32-bit word in lane order, which
// is exactly the little-endian bit layout of the plane (a 64-bit word is two such halves, low first).
#include "collectives/bits/cuda/pack_kernels.h"

#include <algorithm>

namespace pride::bits::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 4096;

// Vote predicates on the raw bits, as in the CPU kernels: +0, -0 and NaN are not positive.
struct F32Pos {
  using T = uint32_t;
  __device__ static bool pos(T b) { return b >= 0x00000001u && b <= 0x7F800000u; }
};
struct BF16Pos {
  using T = uint16_t;
  __device__ static bool pos(T b) { return b >= 0x0001u && b <= 0x7F80u; }
};
struct F16Pos {
  using T = uint16_t;
  __device__ static bool pos(T b) { return b >= 0x0001u && b <= 0x7C00u; }
};

// One 32-bit half-word of the plane per warp step; words past n come out zero. The loop bound is the
// same for every lane of a warp, so the whole warp reaches each ballot.
template <class P>
__global__ void pack_binary_kernel(const typename P::T* x, size_t n, uint32_t* plane32, size_t nhalves) {
  const unsigned lane = threadIdx.x % 32;
  const size_t warp = (size_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32;
  const size_t nwarps = size_t{gridDim.x} * blockDim.x / 32;
  for (size_t h = warp; h < nhalves; h += nwarps) {
    const size_t i = h * 32 + lane;
    const bool vote = i < n && P::pos(x[i]);
    const unsigned bits = __ballot_sync(0xFFFFFFFFu, vote);
    if (lane == 0) plane32[h] = bits;
  }
}

// Output element patterns of +1 and -1 (0 is all-zero bits in every dtype).
template <class T>
__global__ void unpack_vote_kernel(const uint32_t* pos32, const uint32_t* tie32, size_t n, T* y, T plus,
                                   T minus) {
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  for (size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    const unsigned bit = 1u << (i % 32);
    if (pos32[i / 32] & bit) {
      y[i] = plus;
    } else {
      y[i] = tie32 && (tie32[i / 32] & bit) ? T{0} : minus;
    }
  }
}

int blocks_for(size_t threads_needed) {
  return static_cast<int>(std::min<size_t>((threads_needed + kThreads - 1) / kThreads, kMaxBlocks));
}

template <class P>
cudaError_t launch_pack(const void* x, size_t n, uint64_t* plane, cudaStream_t stream) {
  const size_t nhalves = 2 * words_for(n);
  pack_binary_kernel<P><<<blocks_for(nhalves * 32), kThreads, 0, stream>>>(
      static_cast<const typename P::T*>(x), n, reinterpret_cast<uint32_t*>(plane), nhalves);
  return cudaGetLastError();
}

template <class T>
cudaError_t launch_unpack(const uint64_t* pos, const uint64_t* tie, size_t n, void* y, T plus, T minus,
                          cudaStream_t stream) {
  unpack_vote_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(reinterpret_cast<const uint32_t*>(pos),
                                                                 reinterpret_cast<const uint32_t*>(tie), n,
                                                                 static_cast<T*>(y), plus, minus);
  return cudaGetLastError();
}

}  // namespace

cudaError_t pack_binary(const void* x, DType dtype, size_t n, uint64_t* plane, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  switch (dtype) {
    case DType::kFloat32: return launch_pack<F32Pos>(x, n, plane, stream);
    case DType::kBFloat16: return launch_pack<BF16Pos>(x, n, plane, stream);
    case DType::kFloat16: return launch_pack<F16Pos>(x, n, plane, stream);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t unpack_vote(const uint64_t* pos, const uint64_t* tie, size_t n, void* y, DType dtype,
                        cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  switch (dtype) {
    case DType::kFloat32: return launch_unpack<uint32_t>(pos, tie, n, y, 0x3F800000u, 0xBF800000u, stream);
    case DType::kBFloat16: return launch_unpack<uint16_t>(pos, tie, n, y, 0x3F80, 0xBF80, stream);
    case DType::kFloat16: return launch_unpack<uint16_t>(pos, tie, n, y, 0x3C00, 0xBC00, stream);
    case DType::kInt8: return launch_unpack<int8_t>(pos, tie, n, y, 1, -1, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace pride::bits::cuda
