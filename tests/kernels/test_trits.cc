// Vote results as trits (bits/trits.h) against an oracle written from the definition in
// trit_coding.h, one element at a time: digit 2 where pos, 1 where tie, 0 otherwise; byte b is the
// base-3 number of elements 5b … 5b+4, the first the least significant digit.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "collectives/bits/trits.h"

namespace pride::bits::test {
namespace {

bool bit(const std::vector<uint64_t>& plane, size_t e) { return (plane[e / 64] >> (e % 64)) & 1u; }

// Random pos and tie planes as SignPlan::finalize writes them: never both bits of one element.
void random_vote(size_t nwords, uint32_t seed, std::vector<uint64_t>& pos, std::vector<uint64_t>& tie) {
  std::mt19937_64 rng(seed);
  pos.assign(nwords, 0);
  tie.assign(nwords, 0);
  for (size_t w = 0; w < nwords; ++w) {
    const uint64_t a = rng(), b = rng();
    pos[w] = a & ~b;
    tie[w] = b & (seed % 3 == 0 ? rng() : ~uint64_t(0));  // some runs mostly ties, some few
  }
}

std::vector<uint8_t> oracle_bytes(const std::vector<uint64_t>& pos, const std::vector<uint64_t>& tie) {
  const size_t elements = pos.size() * 64;
  std::vector<uint8_t> out((elements + 4) / 5, 0);
  for (size_t b = 0; b < out.size(); ++b) {
    int value = 0, weight = 1;
    for (size_t k = 0; k < 5; ++k) {
      const size_t e = 5 * b + k;
      const int digit = e >= elements ? 0 : bit(pos, e) ? 2 : bit(tie, e) ? 1 : 0;
      value += digit * weight;
      weight *= 3;
    }
    out[b] = uint8_t(value);
  }
  return out;
}

TEST(Trits, EncodeMatchesTheDefinitionAndDecodesBackExactly) {
  for (size_t nwords : {size_t(1), size_t(2), size_t(4), size_t(5), size_t(6), size_t(7), size_t(13), size_t(1001)}) {
    for (uint32_t seed = 1; seed <= 6; ++seed) {
      std::vector<uint64_t> pos, tie;
      random_vote(nwords, seed * 7919 + uint32_t(nwords), pos, tie);
      const size_t nbytes = trits::bytes_for_words(nwords);
      ASSERT_EQ(nbytes, (nwords * 64 + 4) / 5);
      std::vector<uint8_t> bytes(nbytes + 1, 0xEE);  // one poisoned byte past the end must stay
      encode_trits(pos.data(), tie.data(), nwords, bytes.data());
      EXPECT_EQ(bytes[nbytes], 0xEE) << "encode wrote past its bytes, nwords " << nwords;
      bytes.resize(nbytes);
      ASSERT_EQ(bytes, oracle_bytes(pos, tie)) << "nwords " << nwords << " seed " << seed;
      for (uint8_t b : bytes) ASSERT_LT(b, 243);

      std::vector<uint64_t> pos2(nwords, 0x5A5A5A5A5A5A5A5Aull), tie2(nwords, 0xA5A5A5A5A5A5A5A5ull);
      decode_trits(bytes.data(), nwords, pos2.data(), tie2.data());
      ASSERT_EQ(pos2, pos) << "nwords " << nwords << " seed " << seed;
      ASSERT_EQ(tie2, tie) << "nwords " << nwords << " seed " << seed;
    }
  }
}

// Planes whose pos and tie bits overlap (never written by SignPlan::finalize): pos wins, as encode5's
// digit says, in the five-word blocks and in the words past them alike.
TEST(Trits, PosWinsWhereBothBitsAreSet) {
  for (size_t nwords : {size_t(3), size_t(5), size_t(12)}) {
    std::mt19937_64 rng(nwords);
    std::vector<uint64_t> pos(nwords), tie(nwords);
    for (size_t w = 0; w < nwords; ++w) {
      pos[w] = rng();
      tie[w] = rng() | pos[w];  // every pos bit also a tie bit
    }
    std::vector<uint8_t> bytes(trits::bytes_for_words(nwords));
    encode_trits(pos.data(), tie.data(), nwords, bytes.data());
    ASSERT_EQ(bytes, oracle_bytes(pos, tie)) << "nwords " << nwords;
  }
}

// Every byte value, 0 … 255 (243 … 255 are never written), at every position of a range long enough
// to have whole five-word blocks and words past them: the digits of its base-3 expansion, each mod 3.
TEST(Trits, EveryByteValueDecodesToItsDigitsAtEveryPosition) {
  const size_t nwords = 13;
  std::vector<uint8_t> bytes(trits::bytes_for_words(nwords));
  for (int shift = 0; shift < 256; shift += 37) {
    for (size_t b = 0; b < bytes.size(); ++b) bytes[b] = uint8_t(b * 7 + size_t(shift));
    std::vector<uint64_t> pos(nwords, ~uint64_t(0)), tie(nwords, ~uint64_t(0));
    decode_trits(bytes.data(), nwords, pos.data(), tie.data());
    for (size_t e = 0; e < nwords * 64; ++e) {
      int rest = bytes[e / 5];
      for (size_t k = 0; k < e % 5; ++k) rest /= 3;
      const int digit = rest % 3;
      ASSERT_EQ(bit(pos, e), digit == 2) << "byte " << int(bytes[e / 5]) << " element " << e;
      ASSERT_EQ(bit(tie, e), digit == 1) << "byte " << int(bytes[e / 5]) << " element " << e;
    }
  }
}

TEST(Trits, EveryByteValueDecodesToItsDigits) {
  // One word per byte value: the byte in position 0 holds elements 0..4.
  for (int value = 0; value < 256; ++value) {
    std::vector<uint8_t> bytes(trits::bytes_for_words(1), 0);
    bytes[0] = uint8_t(value);
    uint64_t pos = ~uint64_t(0), tie = ~uint64_t(0);
    decode_trits(bytes.data(), 1, &pos, &tie);
    int rest = value;
    for (int k = 0; k < 5; ++k) {
      const int digit = rest % 3;
      rest /= 3;
      EXPECT_EQ((pos >> k) & 1u, uint64_t(digit == 2)) << "byte " << value << " element " << k;
      EXPECT_EQ((tie >> k) & 1u, uint64_t(digit == 1)) << "byte " << value << " element " << k;
    }
    EXPECT_EQ(pos >> 5, 0u) << "byte " << value;
    EXPECT_EQ(tie >> 5, 0u) << "byte " << value;
  }
}

TEST(Trits, AWordRangeIsEncodedOnItsOwn) {
  // The direct algorithm encodes each owner's chunk by itself: the bytes of words [3, 10) are the
  // encoding of those seven words, whatever precedes them.
  std::vector<uint64_t> pos, tie;
  random_vote(10, 42, pos, tie);
  std::vector<uint8_t> part(trits::bytes_for_words(7));
  encode_trits(pos.data() + 3, tie.data() + 3, 7, part.data());
  EXPECT_EQ(part, oracle_bytes(std::vector<uint64_t>(pos.begin() + 3, pos.end()),
                               std::vector<uint64_t>(tie.begin() + 3, tie.end())));
}

}  // namespace
}  // namespace pride::bits::test
