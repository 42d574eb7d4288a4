// Blocks of 64-bit plane words for the counter and threshold kernels. The kernels are templates over
// the block type V: a GCC vector of words (uint64_t __attribute__((vector_size(...)))) for the body,
// and plain uint64_t for the last nwords % lanes words. The vector extension compiles to whatever
// the translation unit's -m flags allow (SSE2 or NEON in the portable build, AVX2 in the other).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#ifndef PRIDE_KERNEL_NS
#error "define PRIDE_KERNEL_NS before including kernel implementation headers"
#endif

namespace pride::bits::detail::PRIDE_KERNEL_NS {

template <class V>
constexpr size_t kLanes = sizeof(V) / sizeof(uint64_t);

template <class V>
inline V load_block(const uint64_t* p) {
  V v;
  std::memcpy(&v, p, sizeof v);  // unaligned: callers' buffers are only 8-byte aligned
  return v;
}

template <class V>
inline void store_block(uint64_t* p, V v) {
  std::memcpy(p, &v, sizeof v);
}

template <class V>
inline V splat_bit(bool bit) {
  return bit ? ~V{} : V{};
}

// Block bodies are lambdas called once per block. GCC does not always inline the larger ones (nor
// this driver), and a call per 4 words costs more than the work and hides constant arguments from
// the body, so both are marked always_inline.
#define PRIDE_BLOCK_INLINE __attribute__((always_inline))

// Calls body(V{}, w) for every full block of V at word w, then body(uint64_t{}, w) for the rest;
// the first argument only carries the block type.
template <class V, class Body>
PRIDE_BLOCK_INLINE inline void for_each_block(size_t nwords, Body&& body) {
  size_t w = 0;
  for (; w + kLanes<V> <= nwords; w += kLanes<V>) body(V{}, w);
  for (; w < nwords; ++w) body(uint64_t{}, w);
}

template <class Fn, int... kI>
inline bool with_fixed_planes_of(int planes, Fn& fn, std::integer_sequence<int, kI...>) {
  return ((planes == kI + 1 ? (fn(std::integral_constant<int, kI + 1>{}), true) : false) || ...);
}

// Calls fn(std::integral_constant<int, P>{}) with P = planes when planes is in [1, kMax] and returns
// true; returns false, fn not called, otherwise. For kernels whose loops over a counter's planes unroll
// into registers when P is known at compile time; wider counters take their general loop.
template <int kMax, class Fn>
inline bool with_fixed_planes(int planes, Fn&& fn) {
  return with_fixed_planes_of(planes, fn, std::make_integer_sequence<int, kMax>{});
}

}  // namespace pride::bits::detail::PRIDE_KERNEL_NS
