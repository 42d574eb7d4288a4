// Lion Cub's fused CPU passes (lion_cub.h has the contract), plain loops that each ISA translation unit
// compiles with its own flags: element functions branch-free, tensors restrict, scalars copied out of
// their structs first, so that GCC vectorizes them (compressed_adam_impl.h says why each matters).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "collectives/bits/element_traits.h"
#include "collectives/bits/elementwise_scalar.h"
#include "collectives/bits/kernel_table.h"
#include "collectives/bits/lion_impl.h"

namespace pride::bits::detail::PRIDE_KERNEL_NS {

constexpr size_t kAbsLanes = 8;

// c of element i (NaN made 0: it abstains), m[i] updated: lion_vote's arithmetic (lion_impl.h).
template <class Tr>
inline float lion_cub_element(const typename Tr::T* __restrict__ g, typename Tr::T* __restrict__ m, size_t i,
                              float b1, float omb1, float b2, float omb2) {
  const float c = lion_interpolate<Tr>(g, m, i, b1, omb1, b2, omb2);
  return c == c ? c : 0.0f;
}

// Σ|c| in kAbsLanes double partial sums (element k into lane k % kAbsLanes, in increasing k) and max|c|
// in as many float lanes, kept in GCC vector registers: an array of partial sums went through memory on
// every step, a store-to-load chain that made the pass 2.5x slower than its arithmetic. Vector
// extensions, so that both ISA units compile the same element-wise IEEE operations.
struct AbsStats {
  using Half = double __attribute__((vector_size(32)));  // lanes 0-3 or 4-7
  using Eight = float __attribute__((vector_size(32)));
  Half low = {}, high = {};
  Eight peak = {};

  // Eight elements, c[k .. k + 7], k a multiple of kAbsLanes.
  void add8(const float* c) {
    Eight v;
    std::memcpy(&v, c, sizeof v);
    const Eight a = v < 0.0f ? -v : v;
    low += __builtin_convertvector(__builtin_shufflevector(a, a, 0, 1, 2, 3), Half);
    high += __builtin_convertvector(__builtin_shufflevector(a, a, 4, 5, 6, 7), Half);
    peak = a > peak ? a : peak;
  }

  // The last n % kAbsLanes elements, c[0 .. count), into lanes 0 .. count − 1; then the totals.
  InterpolationStats finish(const float* c, size_t count) const {
    double sums[kAbsLanes];
    float peaks[kAbsLanes];
    std::memcpy(sums, &low, sizeof low);
    std::memcpy(sums + 4, &high, sizeof high);
    std::memcpy(peaks, &peak, sizeof peak);
    for (size_t j = 0; j < count; ++j) {
      const float a = c[j] < 0.0f ? -c[j] : c[j];
      sums[j] += double(a);
      peaks[j] = a > peaks[j] ? a : peaks[j];
    }
    InterpolationStats stats;
    stats.abs_sum = ((sums[0] + sums[1]) + (sums[2] + sums[3])) + ((sums[4] + sums[5]) + (sums[6] + sums[7]));
    for (float p : peaks) stats.abs_max = p > stats.abs_max ? p : stats.abs_max;
    return stats;
  }
};

// Blocks of 64: the arithmetic in one loop (it vectorizes as lion_vote's does), then the block's
// statistics from L1 (a loop that accumulates while it computes does not vectorize).
template <class Tr>
InterpolationStats lion_cub_interpolate(const void* gv, void* mv, size_t n, const LionParams& p, float* __restrict__ c) {
  const auto* __restrict__ g = static_cast<const typename Tr::T*>(gv);
  auto* __restrict__ m = static_cast<typename Tr::T*>(mv);
  const float b1 = p.beta1, omb1 = p.one_minus_beta1, b2 = p.beta2, omb2 = p.one_minus_beta2;
  AbsStats stats;
  constexpr size_t kBlock = 64;
  const size_t whole = n - n % kAbsLanes;
  for (size_t base = 0; base < n; base += kBlock) {
    const size_t end = n - base < kBlock ? n : base + kBlock;
PRIDE_LOOP_IVDEP
    for (size_t i = base; i < end; ++i) c[i] = lion_cub_element<Tr>(g, m, i, b1, omb1, b2, omb2);
    for (size_t k = base; k + kAbsLanes <= end; k += kAbsLanes) stats.add8(c + k);
  }
  return stats.finish(c + whole, n - whole);
}

// Round half to even for |v| ≤ 2^22 without a libm call (the portable unit has no roundps): adding and
// subtracting 1.5·2^23 leaves the integer nearest to v, ties to even, in the default rounding mode.
// -ffp-contract=off and no -ffast-math keep the two operations apart.
inline float round_half_even_small(float v) {
  constexpr float kMagic = 12582912.0f;  // 1.5 · 2^23
  return (v + kMagic) - kMagic;
}

inline void lion_cub_levels(const float* __restrict__ c, size_t n, float scale, int max_level,
                            int8_t* __restrict__ q) {
  const float half = float(max_level) / 2.0f, hi = float(max_level), lo = -hi;
  for (size_t i = 0; i < n; ++i) {
    float v = (c[i] / scale) * half;
    // Clamping before rounding gives the same integer (±s are integers) and keeps v small for the
    // rounding above; a NaN fails both comparisons and becomes 0 below.
    v = v < lo ? lo : v;
    v = v > hi ? hi : v;
    v = round_half_even_small(v);
    v = v == v ? v : 0.0f;
    q[i] = static_cast<int8_t>(static_cast<int>(v));
  }
}

template <class Tr>
void lion_cub_apply_sign(void* xv, size_t n, const int8_t* __restrict__ total, const ApplyParams& given) {
  const ApplyParams a = with_dtype_lr<Tr>(given);
  auto* __restrict__ x = static_cast<typename Tr::T*>(xv);
  for (size_t i = 0; i < n; ++i) {
    const float delta = float(int(total[i] > 0) - int(total[i] < 0));
    x[i] = lion_update<Tr>(x[i], delta, a);
  }
}

}  // namespace pride::bits::detail::PRIDE_KERNEL_NS
