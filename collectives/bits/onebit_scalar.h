// The 1-bit compression kernels (onebit.h) one element at a time: the whole portable path, and the
// tails of the AVX2 path (onebit_avx2.h), which must equal these bit for bit.
//
// Sums of squares go into kSquareLanes partial sums, element k into partial k % kSquareLanes, each in
// increasing k, combined pairwise at the end (combine_square_lanes). The order is fixed so that both
// ISAs give the same scale; eight lanes are what the AVX2 path keeps in two registers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace pride::bits::detail::PRIDE_KERNEL_NS {

constexpr size_t kSquareLanes = 8;

inline double combine_square_lanes(const double (&lanes)[kSquareLanes]) {
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

// scale, or −scale (its sign bit flipped, which is what negation does) when `negative`. Bit
// arithmetic, not a branch: the signs of a gradient are as good as random, and a mispredicted branch
// per element made these kernels 25× slower than the memory traffic.
template <class Float>
inline Float flip_sign_if(Float scale, bool negative) {
  using Bits = std::conditional_t<sizeof(Float) == 4, uint32_t, uint64_t>;
  Bits u;
  std::memcpy(&u, &scale, sizeof u);
  u ^= Bits(negative) << (8 * sizeof(Bits) - 1);
  std::memcpy(&scale, &u, sizeof u);
  return scale;
}

// From element `begin` (a multiple of kSquareLanes) to n: y² added to its lane.
inline void square_sum_from(const float* y, size_t n, size_t begin, double (&lanes)[kSquareLanes]) {
  for (size_t k = begin; k < n; ++k) lanes[k % kSquareLanes] += double(y[k]) * double(y[k]);
}

// The same, after x = x + error (float32, written back).
inline void add_error_and_square_sum_from(float* x, const float* error, size_t n, size_t begin,
                                          double (&lanes)[kSquareLanes]) {
  for (size_t k = begin; k < n; ++k) {
    x[k] = x[k] + error[k];
    lanes[k % kSquareLanes] += double(x[k]) * double(x[k]);
  }
}

// Whole words from element `begin` (a multiple of 64) to n; the bits past n come out zero.
inline void compress_signs_from(const float* y, float scale, size_t n, size_t begin, uint64_t* signs,
                                float* error) {
  for (size_t base = begin; base < n; base += 64) {
    const size_t count = n - base < 64 ? n - base : 64;
    uint64_t word = 0;
    for (size_t i = 0; i < count; ++i) {
      const float v = y[base + i];
      const bool negative = v < 0.0f;  // false for −0 and NaN: they count as +1
      word |= uint64_t(!negative) << i;
      error[base + i] = v - flip_sign_if(scale, negative);
    }
    signs[base / 64] = word;
  }
}

inline void expand_signs_from(const uint64_t* signs, float scale, size_t n, size_t begin, float* out) {
  for (size_t k = begin; k < n; ++k) {
    const bool positive = (signs[k / 64] >> (k % 64)) & 1u;
    out[k] = flip_sign_if(scale, !positive);
  }
}

// Σ_i ±scales[i] in double in index order, divided by count, rounded once.
inline void average_signs_from(const uint64_t* const* signs, const float* scales, int count, size_t n,
                               size_t begin, float* out) {
  for (size_t k = begin; k < n; ++k) {
    double sum = 0.0;
    for (int i = 0; i < count; ++i) {
      const bool positive = (signs[i][k / 64] >> (k % 64)) & 1u;
      sum += flip_sign_if(double(scales[i]), !positive);
    }
    out[k] = float(sum / double(count));
  }
}

}  // namespace pride::bits::detail::PRIDE_KERNEL_NS
