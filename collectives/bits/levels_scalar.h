// Portable level packing (levels.h): eight int8 values per 64-bit register. Also the tail of the AVX2
// kernel (levels_avx2.h), which must give the same words, and the GPU's (cuda/level_kernels.cu), which
// compiles the two byte-wise helpers below for the device: one source for every side's bits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "collectives/bits/element_traits.h"  // PRIDE_HD

namespace pride::bits::detail::PRIDE_KERNEL_NS {

constexpr uint64_t kLevelLowBits = 0x0101010101010101ull;   // bit 0 of every byte
constexpr uint64_t kLevelHighBits = 0x8080808080808080ull;  // bit 7 of every byte

// u = q + s in each byte of `eight`, with no carry between bytes (SWAR): the low seven bits add, bit 7
// is q's own bit 7 flipped by the carry into it. Exact because every true u is in [0, 2s] ⊂ [0, 254].
PRIDE_HD inline uint64_t offset_level_bytes(uint64_t eight, uint64_t s_bytes) {
  return ((eight & ~kLevelHighBits) + s_bytes) ^ (eight & kLevelHighBits);
}

// Bit p of each of the eight bytes of u, gathered into the low 8 bits (byte i → bit i). After the mask
// every byte is 0 or 1; the multiplier moves byte i's bit to bit 56 + i, and no two partial products
// share a position, so nothing carries into the top byte.
PRIDE_HD inline uint64_t gather_level_bit(uint64_t u, int p) {
  return (((u >> p) & kLevelLowBits) * 0x0102040810204080ull) >> 56;
}

// One word's 64 values (fewer at the end: the rest read as q = −s, so u = 0) into `planes` words
// `nwords` apart.
inline void pack_level_word(const int8_t* q, size_t count, int max_level, int planes, uint64_t* out, size_t nwords) {
  uint64_t bytes[8];
  if (count < 64) std::memset(bytes, -max_level, sizeof bytes);
  std::memcpy(bytes, q, count);
  const uint64_t s_bytes = kLevelLowBits * uint64_t(max_level);
  uint64_t word[8] = {};  // one per plane (planes ≤ 8)
  for (int b = 0; b < 8; ++b) {
    const uint64_t u = offset_level_bytes(bytes[b], s_bytes);
    for (int p = 0; p < planes; ++p) word[p] |= gather_level_bit(u, p) << (8 * b);
  }
  for (int p = 0; p < planes; ++p) out[size_t(p) * nwords] = word[p];
}

inline void pack_levels_scalar(const int8_t* q, size_t n, int max_level, int planes, uint64_t* out) {
  const size_t nwords = (n + 63) / 64;
  for (size_t w = 0; w < nwords; ++w) {
    const size_t begin = w * 64;
    pack_level_word(q + begin, n - begin < 64 ? n - begin : 64, max_level, planes, out + w, nwords);
  }
}

}  // namespace pride::bits::detail::PRIDE_KERNEL_NS
