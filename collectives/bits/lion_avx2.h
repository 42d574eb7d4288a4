// AVX2 lion_vote: 8 elements per instruction, for every dtype. bf16 and fp16 widen to float32 exactly,
// and every rounding back is the dtype's round-to-nearest-even (bf16: on the bits; a NaN becomes the
// canonical 0x7FC0 when stored, elementwise_avx2.h says why only then), the same as the portable code,
// so both ISAs produce identical votes and momentum.
// Included only from kernels_avx2.cc (compiled with -mavx2 -mf16c), after elementwise_avx2.h.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "collectives/bits/elementwise_avx2.h"
#include "collectives/bits/lion_impl.h"

namespace pride::bits::detail::PRIDE_KERNEL_NS {

// Every dtype through its lane adapter (elementwise_avx2.h): A::load8 widens 8 elements to float32,
// A::round8 rounds lanes to the dtype's precision (float32: nothing), A::store8 writes them back. For
// float32 the scalar loop spends ~1 cycle per element assembling vote bits one compare at a time,
// which on this kind of host made the step compute-bound (0.93 G elements/s from memory against
// 3.1 in cache); movemask builds 8 bits per instruction.
template <class A>
void lion_vote_avx2(const void* gv, void* mv, size_t n, const LionParams& p, uint64_t* pos, uint64_t* neg) {
  using T = typename A::Scalar::T;
  const auto* g = static_cast<const T*>(gv);
  auto* m = static_cast<T*>(mv);
  const __m256 b1 = _mm256_set1_ps(p.beta1), omb1 = _mm256_set1_ps(p.one_minus_beta1);
  const __m256 b2 = _mm256_set1_ps(p.beta2), omb2 = _mm256_set1_ps(p.one_minus_beta2);
  const __m256 zero = _mm256_setzero_ps();
  const size_t full = n / 64;
  for (size_t w = 0; w < full; ++w) {
    uint64_t up = 0, down = 0;
    for (int k = 0; k < 64; k += 8) {
      const size_t i = 64 * w + size_t(k);
      const __m256 gi = A::load8(g + i), mi = A::load8(m + i);
      // Each product and the sum rounded to the dtype, as lion_interpolate() does.
      const __m256 c = A::round8(_mm256_add_ps(A::round8(_mm256_mul_ps(mi, b1)), A::round8(_mm256_mul_ps(gi, omb1))));
      A::store8(m + i, _mm256_add_ps(A::round8(_mm256_mul_ps(mi, b2)), A::round8(_mm256_mul_ps(gi, omb2))));
      // Ordered comparisons: a NaN c votes neither way, as in the scalar code.
      up |= uint64_t(uint32_t(_mm256_movemask_ps(_mm256_cmp_ps(c, zero, _CMP_GT_OQ)))) << k;
      down |= uint64_t(uint32_t(_mm256_movemask_ps(_mm256_cmp_ps(c, zero, _CMP_LT_OQ)))) << k;
    }
    pos[w] = up;
    if (neg != nullptr) neg[w] = down;
  }
  // The tail (fewer than 64 elements) through the shared element code.
  if (full * 64 < n) {
    lion_vote<typename A::Scalar>(g + full * 64, m + full * 64, n - full * 64, p, pos + full,
                                  neg ? neg + full : nullptr);
  }
}

}  // namespace pride::bits::detail::PRIDE_KERNEL_NS
