// Bit-sliced counter arithmetic (SPEC §4), shared by both ISA translation units. A counter of P
// planes is stored plane-major: plane p is at counter + p * nwords and holds bit p of every count.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "collectives/bits/kernel_table.h"
#include "collectives/bits/word_block.h"

namespace pride::bits::detail::PRIDE_KERNEL_NS {

// Full adder on whole blocks: a + b + c = sum + 2 * carry, in every bit position.
template <class V>
inline void full_add(V a, V b, V c, V& sum, V& carry) {
  const V u = a ^ b;
  sum = u ^ c;
  carry = (a & b) | (u & c);
}

// Adds c (weight 2^level) into digits [level, ndigits) with a ripple of half adders.
template <class V>
inline void ripple_in(V* digit, int ndigits, int level, V c) {
#pragma GCC unroll 8
  for (int l = level; l < ndigits; ++l) {
    const V t = digit[l] & c;
    digit[l] ^= c;
    c = t;
  }
}

// Loads before stores, as counter_add_fixed (below) explains.
template <class V, int kP>
void counter_add_plane_fixed(uint64_t* counter, size_t nwords, const uint64_t* plane) {
  for_each_block<V>(nwords, [&](auto tag, size_t w) PRIDE_BLOCK_INLINE {
    using B = decltype(tag);
    B a[kP];
#pragma GCC unroll 32
    for (int p = 0; p < kP; ++p) a[p] = load_block<B>(counter + p * nwords + w);
    B c = load_block<B>(plane + w);
#pragma GCC unroll 32
    for (int p = 0; p < kP; ++p) {
      const B t = a[p] & c;
      a[p] ^= c;
      c = t;
    }
#pragma GCC unroll 32
    for (int p = 0; p < kP; ++p) store_block(counter + p * nwords + w, a[p]);
  });
}

constexpr int kFixedCounterPlanes = 8;  // counters of up to 255 votes

template <class V>
void counter_add_plane(uint64_t* counter, int planes, size_t nwords, const uint64_t* plane) {
  if (with_fixed_planes<kFixedCounterPlanes>(
          planes, [&](auto P) { counter_add_plane_fixed<V, P()>(counter, nwords, plane); })) {
    return;
  }
  for_each_block<V>(nwords, [&](auto tag, size_t w) PRIDE_BLOCK_INLINE {
    using B = decltype(tag);
    B c = load_block<B>(plane + w);
    for (int p = 0; p < planes; ++p) {
      uint64_t* word = counter + p * nwords + w;
      const B a = load_block<B>(word);
      store_block(word, a ^ c);
      c = a & c;
    }
  });
}

// A block's planes are all loaded before any is stored. The planes of one counter lie nwords apart,
// usually a multiple of 4 KiB, and a load that follows a store to the same address modulo 4 KiB
// waits on it (4K aliasing): storing plane p and then loading plane p + 1 did so at every plane. With
// the plane count a compile-time constant the block stays in registers.
template <class V, int kP>
void counter_add_fixed(uint64_t* acc, const uint64_t* other, int other_planes, size_t nwords) {
  for_each_block<V>(nwords, [&](auto tag, size_t w) PRIDE_BLOCK_INLINE {
    using B = decltype(tag);
    B a[kP], b[kP];
#pragma GCC unroll 32
    for (int p = 0; p < kP; ++p) {
      a[p] = load_block<B>(acc + p * nwords + w);
      b[p] = p < other_planes ? load_block<B>(other + p * nwords + w) : B{};
    }
    B c{};
#pragma GCC unroll 32
    for (int p = 0; p < kP; ++p) full_add(a[p], b[p], c, a[p], c);
#pragma GCC unroll 32
    for (int p = 0; p < kP; ++p) store_block(acc + p * nwords + w, a[p]);
  });
}

template <class V>
void counter_add(uint64_t* acc, int acc_planes, const uint64_t* other, int other_planes, size_t nwords) {
  if (with_fixed_planes<kFixedCounterPlanes>(
          acc_planes, [&](auto P) { counter_add_fixed<V, P()>(acc, other, other_planes, nwords); })) {
    return;
  }
  for_each_block<V>(nwords, [&](auto tag, size_t w) PRIDE_BLOCK_INLINE {
    using B = decltype(tag);
    B c{};
    for (int p = 0; p < acc_planes; ++p) {
      uint64_t* word = acc + p * nwords + w;
      const B a = load_block<B>(word);
      const B b = p < other_planes ? load_block<B>(other + p * nwords + w) : B{};
      B sum;
      full_add(a, b, c, sum, c);
      store_block(word, sum);
    }
  });
}

// Positional popcount of nplanes planes, Harley–Seal style. Digits hold the running count in binary;
// each pair of input planes goes through one carry-save adder (CSA) with digit 0, which keeps the
// sum bit in digit 0 and emits a carry of weight 2. Carries are not rippled at once: a carry of
// weight 2^l waits in pending[l] until a second one arrives, and the two then go through a CSA with
// digit l, emitting one carry of weight 2^(l+1). That is a binary counter over the pair index k:
// pending[l] is occupied exactly when bit l-1 of k is set, so the chain for pair k runs through its
// trailing one bits. Each input costs about one CSA (5 logic ops) instead of a ripple of log2(N)
// half adders; leftovers are rippled in once at the end of the block.
template <class V>
__attribute__((always_inline)) inline void count_planes_body(const uint64_t* const* planes, int nplanes, size_t nwords, uint64_t* counter,
                  int counter_planes) {
  const int ndigits = nplanes > 0 ? 32 - __builtin_clz(static_cast<unsigned>(nplanes)) : 1;
  const int npairs = nplanes / 2;
  for_each_block<V>(nwords, [&](auto tag, size_t w) PRIDE_BLOCK_INLINE {
    using B = decltype(tag);
    B digit[kMaxPlanes];
    B pending[kMaxPlanes + 1];
#pragma GCC unroll 32
    for (int d = 0; d < ndigits; ++d) digit[d] = B{};
#pragma GCC unroll 16
    for (int k = 0; k < npairs; ++k) {
      B carry;
      full_add(digit[0], load_block<B>(planes[2 * k] + w), load_block<B>(planes[2 * k + 1] + w), digit[0], carry);
      int level = 1;
#pragma GCC unroll 8
      for (unsigned occupied = static_cast<unsigned>(k); (occupied & 1u) != 0; occupied >>= 1, ++level)
        full_add(digit[level], pending[level], carry, digit[level], carry);
      pending[level] = carry;
    }
    if (nplanes & 1) ripple_in(digit, ndigits, 0, load_block<B>(planes[nplanes - 1] + w));
#pragma GCC unroll 8
    for (int level = 1; (npairs >> (level - 1)) != 0; ++level)
      if ((npairs >> (level - 1)) & 1) ripple_in(digit, ndigits, level, pending[level]);
#pragma GCC unroll 8
    for (int p = 0; p < counter_planes; ++p) store_block(counter + p * nwords + w, p < ndigits ? digit[p] : B{});
  });
}

// With nplanes a compile-time constant the loops above unroll completely and digit[] and pending[]
// live in registers; a runtime nplanes keeps them on the stack, which costs several times more per
// word. Common rank counts get their own instantiation.
constexpr int kFixedCounts = 16;

template <class V, int kN>
void count_planes_fixed(const uint64_t* const* planes, size_t nwords, uint64_t* counter, int counter_planes) {
  count_planes_body<V>(planes, kN, nwords, counter, counter_planes);
}

template <class V, size_t... kN>
constexpr auto fixed_count_kernels(std::index_sequence<kN...>) {
  return std::array{&count_planes_fixed<V, static_cast<int>(kN)>...};
}

template <class V>
void count_planes(const uint64_t* const* planes, int nplanes, size_t nwords, uint64_t* counter,
                  int counter_planes) {
  static constexpr auto kFixed = fixed_count_kernels<V>(std::make_index_sequence<kFixedCounts + 1>{});
  if (nplanes <= kFixedCounts) return kFixed[nplanes](planes, nwords, counter, counter_planes);
  count_planes_body<V>(planes, nplanes, nwords, counter, counter_planes);
}

// As counter_add_fixed: every plane of a block loaded before any output plane is stored (the inputs
// and the outputs lie whole planes apart, a multiple of 4 KiB when nwords is), kOut planes in registers.
template <class V, int kOut>
void counter_signed_offset_fixed(const uint64_t* pos, const uint64_t* neg, int planes, size_t nwords, uint64_t offset,
                                 uint64_t* out, size_t out_stride) {
  for_each_block<V>(nwords, [&](auto tag, size_t w) PRIDE_BLOCK_INLINE {
    using B = decltype(tag);
    B a[kOut], b[kOut];
#pragma GCC unroll 32
    for (int p = 0; p < kOut; ++p) {
      const bool in_range = p < planes;
      a[p] = in_range ? load_block<B>(pos + p * nwords + w) : B{};
      b[p] = in_range ? ~load_block<B>(neg + p * nwords + w) : ~B{};
    }
    B c1 = ~B{};
    B c2{};
#pragma GCC unroll 32
    for (int p = 0; p < kOut; ++p) {
      B diff;
      full_add(a[p], b[p], c1, diff, c1);
      full_add(diff, splat_bit<B>(p < 64 && ((offset >> p) & 1u)), c2, a[p], c2);
    }
#pragma GCC unroll 32
    for (int p = 0; p < kOut; ++p) store_block(out + p * out_stride + w, a[p]);
  });
}

// out = pos - neg + offset, as pos + ~neg + 1 + offset modulo 2^out_planes (two's complement, with
// neg zero-extended). The true value lies in [0, 2 * offset], which out_planes holds, so the
// wrap-around is exact. Two carry chains run side by side: c1 for pos + ~neg + 1, c2 for + offset.
// Output plane p at out + p * out_stride.
template <class V>
void counter_signed_offset(const uint64_t* pos, const uint64_t* neg, int planes, size_t nwords, uint64_t offset,
                           uint64_t* out, int out_planes, size_t out_stride) {
  if (with_fixed_planes<kFixedCounterPlanes>(out_planes, [&](auto P) {
        counter_signed_offset_fixed<V, P()>(pos, neg, planes, nwords, offset, out, out_stride);
      })) {
    return;
  }
  for_each_block<V>(nwords, [&](auto tag, size_t w) PRIDE_BLOCK_INLINE {
    using B = decltype(tag);
    B c1 = ~B{};
    B c2{};
    for (int p = 0; p < out_planes; ++p) {
      const bool in_range = p < planes;
      const B a = in_range ? load_block<B>(pos + p * nwords + w) : B{};
      const B b = in_range ? ~load_block<B>(neg + p * nwords + w) : ~B{};
      B diff, sum;
      full_add(a, b, c1, diff, c1);
      full_add(diff, splat_bit<B>(p < 64 && ((offset >> p) & 1u)), c2, sum, c2);
      store_block(out + p * out_stride + w, sum);
    }
  });
}

}  // namespace pride::bits::detail::PRIDE_KERNEL_NS
