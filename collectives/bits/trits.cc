#include "collectives/bits/trits.h"

#include <array>

namespace pride::bits {
namespace {

// decode5 of every byte, once: decoding is a table lookup and two shifts per five elements.
const std::array<uint32_t, 256>& decode_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (int b = 0; b < 256; ++b) t[size_t(b)] = trits::decode5(uint8_t(b));
    return t;
  }();
  return table;
}

// encode5 of every (pos5, tie5) pair.
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
  const auto& table = encode_table();
  const size_t nbytes = trits::bytes_for_words(nwords);
  for (size_t b = 0; b < nbytes; ++b) {
    const size_t first = b * trits::kPerByte;
    out[b] = table[trits::bits5(pos, nwords, first) | trits::bits5(tie, nwords, first) << 5];
  }
}

void decode_trits(const uint8_t* in, size_t nwords, uint64_t* pos, uint64_t* tie) {
  const uint32_t* table = decode_table().data();
  const size_t nbytes = trits::bytes_for_words(nwords);
  for (size_t w = 0; w < nwords; ++w) trits::decode_word(in, nbytes, w, table, pos + w, tie + w);
}

}  // namespace pride::bits
