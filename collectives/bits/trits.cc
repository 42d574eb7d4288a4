#include "collectives/bits/trits.h"

#include <array>

namespace pride::bits {
namespace {

// Five plane words hold 320 elements, exactly 64 trit bytes: the words of a range go five at a time
// (a block), each block's bytes in eight groups of eight bytes (40 elements, bits 40i … 40i+39 of the
// block). A group is cut from the words, or put back into them, with shifts alone. The words past
// the last whole block (at most four) take the definition (trit_coding.h).
constexpr size_t kBlockWords = 5;
constexpr size_t kBlockBytes = kBlockWords * 64 / trits::kPerByte;  // 64
constexpr size_t kGroups = 8;
constexpr uint64_t kLow40 = (uint64_t(1) << 40) - 1;

// The eight 40-bit groups of five words.
void cut_groups(const uint64_t* w, uint64_t* g) {
  g[0] = w[0] & kLow40;
  g[1] = (w[0] >> 40 | w[1] << 24) & kLow40;
  g[2] = (w[1] >> 16) & kLow40;
  g[3] = (w[1] >> 56 | w[2] << 8) & kLow40;
  g[4] = (w[2] >> 32 | w[3] << 32) & kLow40;
  g[5] = (w[3] >> 8) & kLow40;
  g[6] = (w[3] >> 48 | w[4] << 16) & kLow40;
  g[7] = w[4] >> 24;
}

// The inverse: five words from eight groups of 40 bits (nothing above bit 39 in any).
void join_groups(const uint64_t* g, uint64_t* w) {
  w[0] = g[0] | g[1] << 40;
  w[1] = g[1] >> 24 | g[2] << 16 | g[3] << 56;
  w[2] = g[3] >> 8 | g[4] << 32;
  w[3] = g[4] >> 32 | g[5] << 8 | g[6] << 48;
  w[4] = g[6] >> 16 | g[7] << 24;
}

// 40 bits into eight bytes of five bits each (bits 5j … 5j+4 to byte j), by halving: two 20-bit
// halves 32 bits apart, four 10-bit quarters 16 apart, eight 5-bit groups 8 apart.
uint64_t spread5(uint64_t x) {
  x = (x & 0xFFFFFull) | ((x & 0xFFFFF00000ull) << 12);
  x = (x & 0x000003FF000003FFull) | ((x & 0x000FFC00000FFC00ull) << 6);
  return (x & 0x001F001F001F001Full) | ((x & 0x03E003E003E003E0ull) << 3);
}

// Eight trit bytes from eight bytes of five pos bits and five tie bits: Horner's rule from digit 4
// down, in every byte at once. Every partial value is at most 242 (pos and tie never both set, since
// pos wins, as in encode5), so no byte carries into the next.
uint64_t encode_group(uint64_t pos5, uint64_t tie5) {
  constexpr uint64_t kByteLowBits = 0x0101010101010101ull;
  tie5 &= ~pos5;
  uint64_t value = 0;
  for (int k = 4; k >= 0; --k) {
    const uint64_t digit = (((pos5 >> k) & kByteLowBits) << 1) | ((tie5 >> k) & kByteLowBits);
    value = value + (value << 1) + digit;  // value · 3 + digit
  }
  return value;
}

// decode5 of every byte, as pos5 | tie5 << 32: four entries, each shifted to its five-bit place and
// OR-ed together, give a half group's 20 pos bits and 20 tie bits without overlapping.
const std::array<uint64_t, 256>& group_decode_table() {
  static const std::array<uint64_t, 256> table = [] {
    std::array<uint64_t, 256> t{};
    for (int b = 0; b < 256; ++b) {
      const uint32_t both = trits::decode5(uint8_t(b));
      t[size_t(b)] = uint64_t(both & 31u) | uint64_t(both >> 5) << 32;
    }
    return t;
  }();
  return table;
}

// The tables of the words past the last block: decode5 of every byte, and encode5 of every (pos5, tie5)
// pair.
const std::array<uint32_t, 256>& decode5_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (int b = 0; b < 256; ++b) t[size_t(b)] = trits::decode5(uint8_t(b));
    return t;
  }();
  return table;
}

const std::array<uint8_t, 1024>& encode_table() {
  static const std::array<uint8_t, 1024> table = [] {
    std::array<uint8_t, 1024> t{};
    for (uint32_t i = 0; i < 1024; ++i) t[i] = trits::encode5(i & 31u, i >> 5);
    return t;
  }();
  return table;
}

}  // namespace

void encode_trits(const uint64_t* pos, const uint64_t* tie, size_t nwords, uint8_t* out) {
  const size_t blocks = nwords / kBlockWords;
  for (size_t k = 0; k < blocks; ++k) {
    uint64_t p[kGroups], t[kGroups];
    cut_groups(pos + k * kBlockWords, p);
    cut_groups(tie + k * kBlockWords, t);
    for (size_t i = 0; i < kGroups; ++i) {
      const uint64_t value = encode_group(spread5(p[i]), spread5(t[i]));
      uint8_t* group = out + k * kBlockBytes + 8 * i;
      for (int j = 0; j < 8; ++j) group[j] = uint8_t(value >> (8 * j));  // one store on little-endian
    }
  }
  const auto& table = encode_table();
  const size_t nbytes = trits::bytes_for_words(nwords);
  for (size_t b = blocks * kBlockBytes; b < nbytes; ++b) {
    const size_t first = b * trits::kPerByte;
    out[b] = table[trits::bits5(pos, nwords, first) | trits::bits5(tie, nwords, first) << 5];
  }
}

void decode_trits(const uint8_t* in, size_t nwords, uint64_t* pos, uint64_t* tie) {
  const uint64_t* table = group_decode_table().data();
  const size_t blocks = nwords / kBlockWords;
  for (size_t k = 0; k < blocks; ++k) {
    uint64_t p[kGroups], t[kGroups];
    const uint8_t* bytes = in + k * kBlockBytes;
    for (size_t i = 0; i < kGroups; ++i) {
      const uint8_t* g = bytes + 8 * i;
      const uint64_t low = table[g[0]] | table[g[1]] << 5 | table[g[2]] << 10 | table[g[3]] << 15;
      const uint64_t high = table[g[4]] | table[g[5]] << 5 | table[g[6]] << 10 | table[g[7]] << 15;
      p[i] = (low & 0xFFFFFull) | (high & 0xFFFFFull) << 20;
      t[i] = (low >> 32) | (high >> 32) << 20;
    }
    join_groups(p, pos + k * kBlockWords);
    join_groups(t, tie + k * kBlockWords);
  }
  // The rest from the definition's word decoder, over the whole range's bytes (a word there reads only
  // the bytes of its own elements, all past the last block).
  const size_t nbytes = trits::bytes_for_words(nwords);
  const uint32_t* both = decode5_table().data();
  for (size_t w = blocks * kBlockWords; w < nwords; ++w) trits::decode_word(in, nbytes, w, both, pos + w, tie + w);
}

}  // namespace pride::bits
