// AVX2 level packing (levels.h): 32 values per register. After q + s, a 16-bit left shift by 7 − p puts
// bit p of every byte in that byte's top bit (the low byte's own bit p, and the high byte's bit 8 + p of
// the lane, its own bit p), where movemask collects it: one instruction per plane and 32 values. The
// partial last word goes through levels_scalar.h. Only included from kernels_avx2.cc (compiled with -mavx2).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "collectives/bits/levels_scalar.h"

namespace pride::bits::detail::PRIDE_KERNEL_NS {

inline void pack_levels_avx2(const int8_t* q, size_t n, int max_level, int planes, uint64_t* out) {
  const size_t nwords = (n + 63) / 64, whole = n / 64;
  const __m256i s = _mm256_set1_epi8(static_cast<char>(max_level));
  for (size_t w = 0; w < whole; ++w) {
    // Wrapping byte adds: every true q + s lies in [0, 254], so the unsigned byte is exact.
    const __m256i low = _mm256_add_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64 * w)), s);
    const __m256i high = _mm256_add_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64 * w + 32)), s);
    for (int p = 0; p < planes; ++p) {
      const __m128i shift = _mm_cvtsi32_si128(7 - p);
      const uint32_t a = uint32_t(_mm256_movemask_epi8(_mm256_sll_epi16(low, shift)));
      const uint32_t b = uint32_t(_mm256_movemask_epi8(_mm256_sll_epi16(high, shift)));
      out[size_t(p) * nwords + w] = uint64_t(a) | uint64_t(b) << 32;
    }
  }
  if (whole < nwords) pack_level_word(q + 64 * whole, n - 64 * whole, max_level, planes, out + whole, nwords);
}

}  // namespace pride::bits::detail::PRIDE_KERNEL_NS
