// Device-side building blocks of the CUDA kernels: the element traits (element_traits.h compiled for
// the device, so conversions and vote predicates are the CPU's own code), 16-byte vector access,
// the assembly of plane words from per-lane bits, and launch geometry.
//
// Work split: a lane handles kVec<T> consecutive elements (16 bytes of them), so a warp covers
// 32 * kVec<T> elements per step, which are kVec<T> 32-bit half-words of a plane. Lanes pack their
// kVec<T> bits, then groups of 32 / kVec<T> lanes OR them together with shuffles into whole half-words.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#define PRIDE_KERNEL_NS cuda_device
#include "collectives/bits/element_traits.h"
#undef PRIDE_KERNEL_NS

#include "collectives/bits/kernels.h"

namespace pride::bits::cuda::device {

using namespace ::pride::bits::detail::cuda_device;

constexpr unsigned kFullMask = 0xFFFFFFFFu;
constexpr int kThreads = 256;

template <class T>
constexpr int kVec = int(16 / sizeof(T));  // elements per lane per step

// words_for() of kernels.h, callable from device code.
__host__ __device__ constexpr size_t plane_words(size_t n) { return (n + 63) / 64; }

__device__ inline unsigned lane_id() { return threadIdx.x % 32; }

// Element i of x, or +0 (which votes for nothing in every dtype) past n.
template <class T>
__device__ inline void load_elements(const T* x, size_t n, size_t first, bool aligned, T (&v)[kVec<T>]) {
  if (aligned && first + kVec<T> <= n) {
    const uint4 raw = *reinterpret_cast<const uint4*>(x + first);
    memcpy(&v, &raw, sizeof raw);
    return;
  }
#pragma unroll
  for (int k = 0; k < kVec<T>; ++k) v[k] = first + k < n ? x[first + k] : T{};
}

template <class T>
__device__ inline void store_elements(T* y, size_t n, size_t first, bool aligned, const T (&v)[kVec<T>]) {
  if (aligned && first + kVec<T> <= n) {
    uint4 raw;
    memcpy(&raw, &v, sizeof raw);
    *reinterpret_cast<uint4*>(y + first) = raw;
    return;
  }
#pragma unroll
  for (int k = 0; k < kVec<T>; ++k) {
    if (first + k < n) y[first + k] = v[k];
  }
}

// Each lane holds kVec bits (bit k: its element k); returns, in lanes whose index is a multiple of
// 32 / kVec, the half-word made of its group's bits in lane order. All 32 lanes must call it.
template <int kBits>
__device__ inline uint32_t gather_lane_bits(uint32_t bits) {
  constexpr int kLanesPerWord = 32 / kBits;
  uint32_t word = bits << (kBits * (lane_id() % kLanesPerWord));
#pragma unroll
  for (int offset = 1; offset < kLanesPerWord; offset <<= 1) word |= __shfl_xor_sync(kFullMask, word, offset);
  return word;
}

// The kVec<T> bits of one lane's elements [first, first + kVec<T>) from a plane of half-words
// (kVec<T> divides 32, so they never straddle two half-words).
template <class T>
__device__ inline uint32_t lane_bits(const uint32_t* plane32, size_t first) {
  return (plane32[first / 32] >> (first % 32)) & ((kVec<T> == 32 ? 0u : (1u << kVec<T>)) - 1u);
}

// Calls fn(Tr{}) with the element traits of a floating-point dtype, the optimizer's dtypes, and returns
// what it returns; any other dtype is cudaErrorInvalidValue.
template <class Fn>
cudaError_t with_float_traits(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32: return fn(F32{});
    case DType::kBFloat16: return fn(BF16{});
    case DType::kFloat16: return fn(F16{});
    default: return cudaErrorInvalidValue;
  }
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Blocks for a grid-stride loop over `items` work items of one thread each: enough to fill the GPU
// several times over, never more than the work.
int grid_for(size_t items);

}  // namespace pride::bits::cuda::device
