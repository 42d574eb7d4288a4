// Statistics over packed planes: set bits among the first n elements, and elements where two planes
// agree (used by tests and the engine's self-checks). Bits past n are masked off.
#pragma once

#include <cstddef>
#include <cstdint>

#ifndef PRIDE_KERNEL_NS
#error "define PRIDE_KERNEL_NS before including kernel implementation headers"
#endif

namespace pride::bits::detail::PRIDE_KERNEL_NS {

inline uint64_t tail_mask(size_t n) { return (n % 64) ? (uint64_t{1} << (n % 64)) - 1 : ~uint64_t{0}; }

inline size_t popcount(const uint64_t* plane, size_t n) {
  const size_t nwords = (n + 63) / 64;
  size_t total = 0;
  for (size_t w = 0; w + 1 < nwords; ++w) total += static_cast<size_t>(__builtin_popcountll(plane[w]));
  if (nwords) total += static_cast<size_t>(__builtin_popcountll(plane[nwords - 1] & tail_mask(n)));
  return total;
}

inline size_t count_equal(const uint64_t* a, const uint64_t* b, size_t n) {
  const size_t nwords = (n + 63) / 64;
  size_t total = 0;
  for (size_t w = 0; w + 1 < nwords; ++w) total += static_cast<size_t>(__builtin_popcountll(~(a[w] ^ b[w])));
  if (nwords)
    total += static_cast<size_t>(__builtin_popcountll(~(a[nwords - 1] ^ b[nwords - 1]) & tail_mask(n)));
  return total;
}

}  // namespace pride::bits::detail::PRIDE_KERNEL_NS
