// AVX2 lion_vote for bfloat16: 8 elements per instruction. bf16 widens to float32 exactly (a shift),
// and every rounding back is round-to-nearest-even on the bits with NaN made 0x7FC0, the same as the
// portable f32_to_bf16, so both ISAs produce identical votes and momentum.
// Included only from kernels_avx2.cc (compiled with -mavx2).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "collectives/bits/lion_impl.h"

namespace pride::bits::detail::PRIDE_KERNEL_NS {

// float32 lanes rounded to bf16 precision, still as float32 (low 16 bits zero).
inline __m256 round_to_bf16(__m256 f) {
  const __m256i u = _mm256_castps_si256(f);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), lsb);
  r = _mm256_and_si256(r, _mm256_set1_epi32(int(0xFFFF0000u)));
  const __m256i magnitude = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
  const __m256i nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7F800000));
  return _mm256_castsi256_ps(_mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FC00000), nan));
}

inline __m256 load_bf16(const uint16_t* p) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

// Stores lanes already rounded to bf16 precision (their low halves are zero).
inline void store_bf16(uint16_t* p, __m256 f) {
  const __m256i hi = _mm256_srli_epi32(_mm256_castps_si256(f), 16);
  const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(hi), _mm256_extracti128_si256(hi, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed);
}

inline void lion_vote_bf16_avx2(const void* gv, void* mv, size_t n, const LionParams& p, uint64_t* pos,
                                uint64_t* neg) {
  const auto* g = static_cast<const uint16_t*>(gv);
  auto* m = static_cast<uint16_t*>(mv);
  const __m256 b1 = _mm256_set1_ps(p.beta1), omb1 = _mm256_set1_ps(p.one_minus_beta1);
  const __m256 b2 = _mm256_set1_ps(p.beta2), omb2 = _mm256_set1_ps(p.one_minus_beta2);
  const __m256 zero = _mm256_setzero_ps();
  const size_t full = n / 64;
  for (size_t w = 0; w < full; ++w) {
    uint64_t up = 0, down = 0;
    for (int k = 0; k < 64; k += 8) {
      const size_t i = 64 * w + size_t(k);
      const __m256 gi = load_bf16(g + i), mi = load_bf16(m + i);
      const __m256 c = round_to_bf16(
          _mm256_add_ps(round_to_bf16(_mm256_mul_ps(mi, b1)), round_to_bf16(_mm256_mul_ps(gi, omb1))));
      const __m256 next =
          round_to_bf16(_mm256_add_ps(round_to_bf16(_mm256_mul_ps(mi, b2)), round_to_bf16(_mm256_mul_ps(gi, omb2))));
      store_bf16(m + i, next);
      up |= uint64_t(_mm256_movemask_ps(_mm256_cmp_ps(c, zero, _CMP_GT_OQ))) << k;
      down |= uint64_t(_mm256_movemask_ps(_mm256_cmp_ps(c, zero, _CMP_LT_OQ))) << k;
    }
    pos[w] = up;
    if (neg != nullptr) neg[w] = down;
  }
  // The tail (fewer than 64 elements) through the shared element code.
  if (full * 64 < n) {
    lion_vote<BF16>(g + full * 64, m + full * 64, n - full * 64, p, pos + full, neg ? neg + full : nullptr);
  }
}

}  // namespace pride::bits::detail::PRIDE_KERNEL_NS
