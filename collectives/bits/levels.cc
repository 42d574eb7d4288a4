#include "collectives/bits/levels.h"

#include <cstring>

#include "collectives/bits/kernels.h"

namespace pride::bits {
namespace {

constexpr uint64_t kLowBits = 0x0101010101010101ull;   // bit 0 of every byte
constexpr uint64_t kHighBits = 0x8080808080808080ull;  // bit 7 of every byte

// u = q + s in each byte of `eight`, with no carry between bytes (SWAR): the low seven bits add, bit 7
// is q's own bit 7 flipped by the carry into it. Exact because every true u is in [0, 2s] ⊂ [0, 254].
uint64_t offset_bytes(uint64_t eight, uint64_t s_bytes) {
  return ((eight & ~kHighBits) + s_bytes) ^ (eight & kHighBits);
}

// Bit p of each of the eight bytes of u, gathered into the low 8 bits (byte i → bit i). After the mask
// every byte is 0 or 1; the multiplier moves byte i's bit to bit 56 + i, and no two partial products
// share a position, so nothing carries into the top byte.
uint64_t gather_bit(uint64_t u, int p) { return (((u >> p) & kLowBits) * 0x0102040810204080ull) >> 56; }

}  // namespace

int level_planes(int max_level) { return planes_for(2 * int64_t(max_level)); }

bool levels_within(const int8_t* q, size_t n, int max_level) {
  int8_t lo = 0, hi = 0;
  for (size_t k = 0; k < n; ++k) {  // a min/max reduction the compiler vectorizes
    lo = q[k] < lo ? q[k] : lo;
    hi = q[k] > hi ? q[k] : hi;
  }
  return -int(lo) <= max_level && int(hi) <= max_level;
}

void pack_levels(const int8_t* q, size_t n, int max_level, uint64_t* out) {
  const int planes = level_planes(max_level);
  const size_t nwords = words_for(n);
  const uint64_t s_bytes = kLowBits * uint64_t(max_level);
  for (size_t w = 0; w < nwords; ++w) {
    const size_t begin = w * 64, count = n - begin < 64 ? n - begin : 64;
    uint64_t bytes[8] = {};  // the word's 64 values; bytes past n are q = −s, so u = 0 there
    if (count == 64) {
      std::memcpy(bytes, q + begin, 64);
    } else {
      std::memset(bytes, -max_level, sizeof bytes);
      std::memcpy(bytes, q + begin, count);
    }
    uint64_t word[8] = {};  // one per plane (planes ≤ 8)
    for (int b = 0; b < 8; ++b) {
      const uint64_t u = offset_bytes(bytes[b], s_bytes);
      for (int p = 0; p < planes; ++p) word[p] |= gather_bit(u, p) << (8 * b);
    }
    for (int p = 0; p < planes; ++p) out[size_t(p) * nwords + w] = word[p];
  }
}

}  // namespace pride::bits
