// The level packing of levels.h on the GPU, with its range check in the same pass. Each lane takes 16
// int8 values, offsets and splits them with the CPU's own byte-wise helpers (levels_scalar.h), and
// pairs of lanes OR their 16 bits of each plane into half-words with shuffles, as the sign pack does
// (pack_kernels.cu). Values past n read as −s (u = 0), so every word is written and trailing bits are
// zero, as on the CPU.
#include "collectives/bits/cuda/device_elements.cuh"
#include "collectives/bits/cuda/kernels.h"

#define PRIDE_KERNEL_NS cuda_device
#include "collectives/bits/levels_scalar.h"
#undef PRIDE_KERNEL_NS

namespace pride::bits::cuda {
namespace {

using namespace device;

constexpr int kLevelVec = kVec<int8_t>;  // 16 values per lane

// kPlanes planes of nhalves half-words each, plane p at out32 + p·nhalves. The out-of-range flag is a
// plain store of 1 by any lane that sees such a value: every writer writes the same word, so no atomic.
template <int kPlanes>
__global__ void pack_levels_kernel(const int8_t* q, size_t n, int max_level, uint32_t* out32, size_t nhalves,
                                   bool aligned, uint32_t* out_of_range) {
  const size_t warp = (size_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32;
  const size_t nwarps = size_t{gridDim.x} * blockDim.x / 32;
  const size_t nsteps = (nhalves + kLevelVec - 1) / kLevelVec;
  const uint64_t s_bytes = kLevelLowBits * uint64_t(max_level);
  for (size_t step = warp; step < nsteps; step += nwarps) {  // warp-uniform: every lane reaches the shuffles
    const size_t first = step * 32 * kLevelVec + lane_id() * kLevelVec;
    int8_t v[kLevelVec];
    load_elements(q, n, first, aligned, v);
    bool outside = false;
#pragma unroll
    for (int k = 0; k < kLevelVec; ++k) {
      if (first + k < n) {
        outside |= v[k] < -max_level || v[k] > max_level;
      } else {
        v[k] = int8_t(-max_level);
      }
    }
    uint64_t low, high;  // values 0–7 and 8–15, value k in byte k % 8 (little-endian, as the CPU's memcpy)
    memcpy(&low, v, 8);
    memcpy(&high, v + 8, 8);
    const uint64_t u_low = offset_level_bytes(low, s_bytes), u_high = offset_level_bytes(high, s_bytes);
    uint32_t half[kPlanes];
#pragma unroll
    for (int p = 0; p < kPlanes; ++p) {
      const uint32_t bits = uint32_t(gather_level_bit(u_low, p)) | uint32_t(gather_level_bit(u_high, p)) << 8;
      half[p] = gather_lane_bits<kLevelVec>(bits);
    }
    const size_t h = step * kLevelVec + lane_id() / (32 / kLevelVec);
    if (lane_id() % (32 / kLevelVec) == 0 && h < nhalves) {
#pragma unroll
      for (int p = 0; p < kPlanes; ++p) out32[size_t(p) * nhalves + h] = half[p];
    }
    if (outside) *out_of_range = 1u;
  }
}

template <int kPlanes>
cudaError_t launch(const int8_t* q, size_t n, int max_level, uint64_t* out, uint32_t* out_of_range,
                   cudaStream_t stream) {
  const size_t nhalves = 2 * words_for(n);
  const size_t nsteps = (nhalves + kLevelVec - 1) / kLevelVec;
  pack_levels_kernel<kPlanes><<<grid_for(nsteps * 32), kThreads, 0, stream>>>(
      q, n, max_level, reinterpret_cast<uint32_t*>(out), nhalves, aligned16(q), out_of_range);
  return cudaGetLastError();
}

}  // namespace

cudaError_t pack_levels(const int8_t* q, size_t n, int max_level, uint64_t* out, uint32_t* out_of_range,
                        cudaStream_t stream) {
  if (max_level < 1 || max_level > 127) return cudaErrorInvalidValue;
  if (const cudaError_t zeroed = cudaMemsetAsync(out_of_range, 0, sizeof(uint32_t), stream); zeroed != cudaSuccess) {
    return zeroed;
  }
  if (n == 0) return cudaSuccess;
  int planes = 0;  // level_planes(s): the bits of 2s, 2 … 8 (counted here: this library has no host kernels)
  for (int top = 2 * max_level; top > 0; top >>= 1) ++planes;
  switch (planes) {
    case 2: return launch<2>(q, n, max_level, out, out_of_range, stream);
    case 3: return launch<3>(q, n, max_level, out, out_of_range, stream);
    case 4: return launch<4>(q, n, max_level, out, out_of_range, stream);
    case 5: return launch<5>(q, n, max_level, out, out_of_range, stream);
    case 6: return launch<6>(q, n, max_level, out, out_of_range, stream);
    case 7: return launch<7>(q, n, max_level, out, out_of_range, stream);
    case 8: return launch<8>(q, n, max_level, out, out_of_range, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace pride::bits::cuda
