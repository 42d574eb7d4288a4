// AVX2 1-bit compression kernels: eight float32 elements per instruction, element-wise arithmetic in
// the same order and precision as onebit_scalar.h, which does the tails. Only included from
// kernels_avx2.cc (compiled with -mavx2).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "collectives/bits/elementwise_avx2.h"
#include "collectives/bits/onebit_scalar.h"

namespace pride::bits::detail::PRIDE_KERNEL_NS {

// The two registers hold lanes 0–3 and 4–7 of onebit_scalar.h's partial sums. With kAddError,
// y = x + error is written to x first.
template <bool kAddError>
double onebit_square_sum(const float* x, const float* error, float* y_out, size_t n) {
  __m256d low = _mm256_setzero_pd(), high = _mm256_setzero_pd();
  const size_t whole = n - n % kSquareLanes;
  for (size_t k = 0; k < whole; k += kSquareLanes) {
    __m256 y = _mm256_loadu_ps(x + k);
    if constexpr (kAddError) {
      y = _mm256_add_ps(y, _mm256_loadu_ps(error + k));
      _mm256_storeu_ps(y_out + k, y);
    }
    const __m256d y_low = _mm256_cvtps_pd(_mm256_castps256_ps128(y));
    const __m256d y_high = _mm256_cvtps_pd(_mm256_extractf128_ps(y, 1));
    low = _mm256_add_pd(low, _mm256_mul_pd(y_low, y_low));
    high = _mm256_add_pd(high, _mm256_mul_pd(y_high, y_high));
  }
  double lanes[kSquareLanes];
  _mm256_storeu_pd(lanes, low);
  _mm256_storeu_pd(lanes + 4, high);
  if constexpr (kAddError) {
    add_error_and_square_sum_from(y_out, error, n, whole, lanes);
  } else {
    square_sum_from(x, n, whole, lanes);
  }
  return combine_square_lanes(lanes);
}

inline double onebit_add_error_and_square_sum(float* x, const float* error, size_t n) {
  return onebit_square_sum<true>(x, error, x, n);
}

inline double onebit_square_sum_only(const float* y, size_t n) {
  return onebit_square_sum<false>(y, nullptr, nullptr, n);
}

inline void onebit_compress_signs(const float* y, float scale, size_t n, uint64_t* signs, float* error) {
  const __m256 plus = _mm256_set1_ps(scale), minus = _mm256_set1_ps(-scale), zero = _mm256_setzero_ps();
  const size_t whole = n - n % 64;
  for (size_t base = 0; base < whole; base += 64) {
    uint64_t word = 0;
    for (int g = 0; g < 8; ++g) {
      const __m256 v = _mm256_loadu_ps(y + base + 8 * g);
      const __m256 negative = _mm256_cmp_ps(v, zero, _CMP_LT_OQ);  // false for NaN, as in the scalar code
      word |= uint64_t(~uint32_t(_mm256_movemask_ps(negative)) & 0xFFu) << (8 * g);
      _mm256_storeu_ps(error + base + 8 * g, _mm256_sub_ps(v, _mm256_blendv_ps(plus, minus, negative)));
    }
    signs[base / 64] = word;
  }
  compress_signs_from(y, scale, n, whole, signs, error);
}

inline void onebit_expand_signs(const uint64_t* signs, float scale, size_t n, float* out) {
  const __m256 plus = _mm256_set1_ps(scale), minus = _mm256_set1_ps(-scale);
  const size_t whole = n - n % 64;
  for (size_t base = 0; base < whole; base += 64) {
    const uint64_t word = signs[base / 64];
    for (int g = 0; g < 8; ++g) {
      const __m256 positive = _mm256_castsi256_ps(lanes_from_bits<4>(uint32_t(word >> (8 * g)) & 0xFFu));
      _mm256_storeu_ps(out + base + 8 * g, _mm256_blendv_ps(minus, plus, positive));
    }
  }
  expand_signs_from(signs, scale, n, whole, out);
}

// Sixteen elements per step in four registers of double lanes, each lane adding ±scale_i for
// i = 0, 1, … as the scalar code does (four independent chains hide the additions' latency).
inline void onebit_average_signs(const uint64_t* const* signs, const float* scales, int count, size_t n, float* out) {
  const __m256i select = _mm256_setr_epi64x(1, 2, 4, 8);
  const __m256d ranks = _mm256_set1_pd(double(count));
  const size_t whole = n - n % 64;
  for (size_t base = 0; base < whole; base += 64) {
    for (int g = 0; g < 4; ++g) {
      __m256d sum[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
      for (int i = 0; i < count; ++i) {
        const uint64_t bits = signs[i][base / 64] >> (16 * g);
        const __m256d plus = _mm256_set1_pd(double(scales[i])), minus = _mm256_set1_pd(-double(scales[i]));
        for (int q = 0; q < 4; ++q) {
          const __m256i mask = _mm256_set1_epi64x(static_cast<long long>((bits >> (4 * q)) & 0xFu));
          const __m256i positive = _mm256_cmpeq_epi64(_mm256_and_si256(mask, select), select);
          sum[q] = _mm256_add_pd(sum[q], _mm256_blendv_pd(minus, plus, _mm256_castsi256_pd(positive)));
        }
      }
      for (int q = 0; q < 4; ++q)
        _mm_storeu_ps(out + base + 16 * g + 4 * q, _mm256_cvtpd_ps(_mm256_div_pd(sum[q], ranks)));
    }
  }
  average_signs_from(signs, scales, count, n, whole, out);
}

}  // namespace pride::bits::detail::PRIDE_KERNEL_NS
