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

template <class Tr>
void lion_vote(const void* gv, void* mv, size_t n, const LionParams& p, uint64_t* pos, uint64_t* neg) {
  const auto* g = static_cast<const typename Tr::T*>(gv);
  auto* m = static_cast<typename Tr::T*>(mv);
  auto round = [](float f) { return Tr::to_f32(Tr::from_f32(f)); };
  for (size_t base = 0; base < n; base += 64) {
    const size_t count = n - base < 64 ? n - base : 64;
    // Arithmetic first, in a branch-free loop the compiler vectorizes; then the bits.
    float c[64];
    for (size_t i = 0; i < count; ++i) {
      const float gi = Tr::to_f32(g[base + i]);
      const float mi = Tr::to_f32(m[base + i]);
      c[i] = round(round(mi * p.beta1) + round(gi * p.one_minus_beta1));
      m[base + i] = Tr::from_f32(round(mi * p.beta2) + round(gi * p.one_minus_beta2));
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
