// Bit-sliced comparators (SPEC §4): decide count > k and count == k for 64 elements per word without
// unpacking the counts, scanning the planes from the most significant down. `gt` collects elements
// already known to be greater, `eq` those whose bits above the current plane all matched.
#pragma once

#include <cstddef>
#include <cstdint>

#include "collectives/bits/word_block.h"

namespace pride::bits::detail::PRIDE_KERNEL_NS {

// Binary votes: s = 2 * count - nvotes > 0  <=>  count > nvotes / 2 (integer division), and a tie
// s == 0 needs an even nvotes and count == nvotes / 2. So both come from comparing against the
// constant `half`, whose bits steer the comparator: where half has a 0, a 1 in the count decides
// "greater"; where half has a 1, a 0 in the count decides "less" (drops out of eq).
template <class V>
void vote_from_count(const uint64_t* count, int planes, size_t nwords, uint64_t half, bool even, uint64_t* pos,
                     uint64_t* tie) {
  // A count of `planes` planes is at most 2^planes - 1; if half is beyond that, nothing passes.
  const bool reachable = planes >= 64 || (half >> planes) == 0;
  for_each_block<V>(nwords, [&](auto tag, size_t w) PRIDE_BLOCK_INLINE {
    using B = decltype(tag);
    B gt{};
    B eq = splat_bit<B>(reachable);
    for (int p = planes - 1; p >= 0; --p) {
      const B c = load_block<B>(count + p * nwords + w);
      if (p < 64 && ((half >> p) & 1u)) {
        eq &= c;
      } else {
        gt |= eq & c;
        eq &= ~c;
      }
    }
    store_block(pos + w, gt);
    if (tie) store_block(tie + w, even ? eq : B{});
  });
}

// Ternary votes: s = pos_count - neg_count; the same scan with a variable right-hand side.
template <class V>
void vote_from_counts(const uint64_t* pos_count, const uint64_t* neg_count, int planes, size_t nwords,
                      uint64_t* pos, uint64_t* tie) {
  for_each_block<V>(nwords, [&](auto tag, size_t w) PRIDE_BLOCK_INLINE {
    using B = decltype(tag);
    B gt{};
    B eq = ~B{};
    for (int p = planes - 1; p >= 0; --p) {
      const B a = load_block<B>(pos_count + p * nwords + w);
      const B b = load_block<B>(neg_count + p * nwords + w);
      gt |= eq & a & ~b;
      eq &= ~(a ^ b);
    }
    store_block(pos + w, gt);
    if (tie) store_block(tie + w, eq);
  });
}

}  // namespace pride::bits::detail::PRIDE_KERNEL_NS
