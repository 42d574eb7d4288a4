#include "collectives/bits/trits.h"

#include <array>
#include <cstring>

namespace pride::bits {
namespace {

// Five plane words hold 320 elements, exactly 64 trit bytes: the words of a range go five at a time
// (a block), each block's bytes in eight groups of eight bytes (40 elements). On a little-endian
// machine a plane is a bit stream in byte order (element e is bit e % 8 of byte e / 8), so the 40
// elements of group i start at byte 5i of the block's words, and a group is one unaligned 64-bit load.
// The words past the last whole block (at most four) take the definition (trit_coding.h).
constexpr size_t kBlockWords = 5;
constexpr size_t kBlockBytes = kBlockWords * 64 / trits::kPerByte;  // 64
constexpr size_t kGroups = 8;
constexpr uint64_t kLow40 = (uint64_t(1) << 40) - 1;
constexpr uint64_t kByteLowBits = 0x0101010101010101ull;
constexpr bool kLittleEndian = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;

uint64_t load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
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
  tie5 &= ~pos5;
  uint64_t value = 0;
  for (int k = 4; k >= 0; --k) {
    const uint64_t digit = (((pos5 >> k) & kByteLowBits) << 1) | ((tie5 >> k) & kByteLowBits);
    value = value + (value << 1) + digit;  // value · 3 + digit
  }
  return value;
}

// decode5 of every byte, as pos5 | tie5 << 32: a group's eight entries, each shifted to its five-bit
// place, add up to 20 pos bits and 20 tie bits per half group without overlapping.
const std::array<uint64_t, 256>& decode_table() {
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
  const size_t blocks = kLittleEndian ? nwords / kBlockWords : 0;
  for (size_t k = 0; k < blocks; ++k) {
    // The block's words with eight zero bytes after them, so that the last group's load stays inside.
    uint8_t p[kBlockWords * 8 + 8] = {}, t[kBlockWords * 8 + 8] = {};
    std::memcpy(p, pos + k * kBlockWords, kBlockWords * 8);
    std::memcpy(t, tie + k * kBlockWords, kBlockWords * 8);
    for (size_t i = 0; i < kGroups; ++i) {
      const uint64_t value = encode_group(spread5(load64(p + 5 * i) & kLow40), spread5(load64(t + 5 * i) & kLow40));
      std::memcpy(out + k * kBlockBytes + 8 * i, &value, 8);
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
  const uint64_t* table = decode_table().data();
  const size_t blocks = kLittleEndian ? nwords / kBlockWords : 0;
  for (size_t k = 0; k < blocks; ++k) {
    // Group i's 40 bits go to byte 5i with an eight-byte store; the next group's store overwrites the
    // three zero bytes past them.
    uint8_t p[kBlockWords * 8 + 8], t[kBlockWords * 8 + 8];
    const uint8_t* bytes = in + k * kBlockBytes;
    for (size_t i = 0; i < kGroups; ++i) {
      const uint8_t* g = bytes + 8 * i;
      const uint64_t low = table[g[0]] | table[g[1]] << 5 | table[g[2]] << 10 | table[g[3]] << 15;
      const uint64_t high = table[g[4]] | table[g[5]] << 5 | table[g[6]] << 10 | table[g[7]] << 15;
      const uint64_t pos40 = (low & 0xFFFFFull) | (high & 0xFFFFFull) << 20;
      const uint64_t tie40 = (low >> 32) | (high >> 32) << 20;
      std::memcpy(p + 5 * i, &pos40, 8);
      std::memcpy(t + 5 * i, &tie40, 8);
    }
    std::memcpy(pos + k * kBlockWords, p, kBlockWords * 8);
    std::memcpy(tie + k * kBlockWords, t, kBlockWords * 8);
  }
  // The rest from the definition's word decoder, over the whole range's bytes (a word there reads only
  // the bytes of its own elements, all past the last block).
  const size_t nbytes = trits::bytes_for_words(nwords);
  const uint32_t* both = decode5_table().data();
  for (size_t w = blocks * kBlockWords; w < nwords; ++w) trits::decode_word(in, nbytes, w, both, pos + w, tie + w);
}

}  // namespace pride::bits
