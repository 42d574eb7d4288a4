// Lion's local step fused with packing its vote (Distributed Lion, SPEC §1): one pass reads the
// gradient and the momentum, writes the vote bits and the new momentum.
//
//   c = β1·m + (1−β1)·g        vote: c > 0 (binary); or c > 0 / c < 0 (ternary)
//   m ← β2·m + (1−β2)·g
//
// Each product and the sum are float32 operations rounded to the dtype, like torch's
// m.mul(β1) + g.mul(1−β1) on that dtype, so a one-rank Distributed Lion equals plain Lion bit for bit.
// The loops are plain C++; the AVX2 translation unit compiles the same source with AVX2 enabled.
#pragma once

#include <cstddef>
#include <cstdint>

#include "collectives/bits/element_traits.h"
#include "collectives/bits/kernel_table.h"

namespace pride::bits::detail::PRIDE_KERNEL_NS {

// c of element i, and m[i] updated, each product and sum rounded to the dtype: the one arithmetic of
// Lion's local step, which lion_vote and Lion Cub's interpolation (lion_cub_impl.h) share.
template <class Tr>
inline float lion_interpolate(const typename Tr::T* g, typename Tr::T* m, size_t i, float b1, float omb1, float b2,
                              float omb2) {
  auto round = [](float f) { return Tr::to_f32(Tr::from_f32(f)); };
  const float gi = Tr::to_f32(g[i]), mi = Tr::to_f32(m[i]);
  m[i] = Tr::from_f32(round(mi * b2) + round(gi * omb2));
  return round(round(mi * b1) + round(gi * omb1));
}

template <class Tr>
void lion_vote(const void* gv, void* mv, size_t n, const LionParams& p, uint64_t* pos, uint64_t* neg) {
  const auto* g = static_cast<const typename Tr::T*>(gv);
  auto* m = static_cast<typename Tr::T*>(mv);
  for (size_t base = 0; base < n; base += 64) {
    const size_t count = n - base < 64 ? n - base : 64;
    // Arithmetic first, in a branch-free loop the compiler vectorizes; then the bits.
    float c[64];
    for (size_t i = 0; i < count; ++i) {
      c[i] = lion_interpolate<Tr>(g, m, base + i, p.beta1, p.one_minus_beta1, p.beta2, p.one_minus_beta2);
    }
    uint64_t up = 0, down = 0;
    for (size_t i = 0; i < count; ++i) {
      up |= uint64_t{c[i] > 0.0f} << i;
      down |= uint64_t{c[i] < 0.0f} << i;
    }
    pos[base / 64] = up;
    if (neg != nullptr) neg[base / 64] = down;
  }
}

}  // namespace pride::bits::detail::PRIDE_KERNEL_NS
