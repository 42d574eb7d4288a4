// Mean-mode counts packed in base B (bits/packed_counts.h) against an oracle written from the
// definition in count_coding.h, one element at a time: element e's count is Σ_p bit e of plane p · 2^p;
// limb l is the base-B number of the counts of elements k·l … k·l + k − 1, the first the least
// significant digit, k the most with B^k <= 2^32. The oracle does its arithmetic in 64 bits, with
// none of the header's tricks (no magic division, no per-plane digit sums, no tables).
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "collectives/bits/packed_counts.h"

namespace pride::bits::test {
namespace {

int oracle_per_limb(uint64_t base) {
  int k = 0;
  for (uint64_t power = base; power <= (uint64_t(1) << 32); power *= base) ++k;
  return k;
}

int oracle_planes(uint64_t base) {
  int r = 0;
  while ((uint64_t(1) << r) < base) ++r;
  return r;
}

// R planes of nwords words, `stride` apart (the gaps poisoned), each element a random count < base.
struct RandomCounts {
  RandomCounts(uint32_t base, size_t nwords, size_t stride, uint32_t seed) : base(base), nwords(nwords), stride(stride) {
    const int R = oracle_planes(base);
    planes.assign(size_t(R) * stride, 0xC3C3C3C3C3C3C3C3ull);
    for (int p = 0; p < R; ++p) {
      for (size_t w = 0; w < nwords; ++w) planes[size_t(p) * stride + w] = 0;
    }
    std::mt19937_64 rng(seed);
    counts.resize(nwords * 64);
    for (size_t e = 0; e < counts.size(); ++e) {
      // Some runs favour the extremes, where the top digit and the carries are exercised.
      const uint64_t pick = rng();
      counts[e] = seed % 3 == 0 && pick % 4 == 0 ? uint32_t(base - 1 - (pick >> 8) % 2) : uint32_t(pick % base);
      for (int p = 0; p < R; ++p) planes[size_t(p) * stride + e / 64] |= uint64_t((counts[e] >> p) & 1u) << (e % 64);
    }
  }
  std::vector<uint32_t> oracle_limbs() const {
    const size_t k = size_t(oracle_per_limb(base));
    std::vector<uint32_t> out((counts.size() + k - 1) / k);
    for (size_t l = 0; l < out.size(); ++l) {
      uint64_t value = 0, weight = 1;
      for (size_t j = 0; j < k; ++j, weight *= base) {
        const size_t e = l * k + j;
        value += (e < counts.size() ? counts[e] : 0) * weight;
      }
      EXPECT_LT(value, uint64_t(1) << 32);
      out[l] = uint32_t(value);
    }
    return out;
  }
  uint32_t base;
  size_t nwords, stride;
  std::vector<uint64_t> planes;
  std::vector<uint32_t> counts;
};

const uint32_t kBases[] = {2, 3, 4, 5, 6, 7, 9, 11, 13, 17, 33, 65, 129, 257, 700, 1025, 1625, 3000, 4097, 70001};

TEST(PackedCounts, TheCodeHoldsAsManyCountsAsFitA32BitLimb) {
  for (uint32_t base : kBases) {
    const counts::CountCode c = counts::make_code(base);
    EXPECT_EQ(c.per_limb, oracle_per_limb(base)) << "base " << base;
    EXPECT_EQ(c.planes, oracle_planes(base)) << "base " << base;
  }
  // The densities the docs quote, worked by hand: 5^13 = 1220703125 <= 2^32 < 5^14; 3^20 = 9^10 =
  // 3486784401 <= 2^32 < 3^21; 17^7 = 410338673 <= 2^32 < 17^8 = 6975757441.
  EXPECT_EQ(counts::make_code(5).per_limb, 13);
  EXPECT_EQ(counts::make_code(3).per_limb, 20);
  EXPECT_EQ(counts::make_code(9).per_limb, 10);
  EXPECT_EQ(counts::make_code(17).per_limb, 7);
  EXPECT_EQ(counts::bytes_for_words(counts::make_code(5), 13), size_t(4 * 64));
}

// Exact for every 32-bit value by Lemire, Kaser and Kurz's theorem; checked here at the edges and at
// random values for every base up to 300 and a sample up to 70000.
TEST(PackedCounts, DivisionByTheBaseIsExactAtTheEdgesAndAtRandom) {
  std::mt19937_64 rng(7);
  for (uint32_t base = 2; base < 70000; base += base < 300 ? 1 : 97) {
    const counts::CountCode c = counts::make_code(base);
    const uint32_t edges[] = {0, 1, base - 1, base, base + 1, 2 * base - 1, 0x7FFFFFFFu, 0x80000000u,
                              0xFFFFFFFEu, 0xFFFFFFFFu, uint32_t(0xFFFFFFFFu / base * base), uint32_t(0xFFFFFFFFu / base * base - 1)};
    for (uint32_t v : edges) ASSERT_EQ(counts::divide(c, v), v / base) << v << " / " << base;
    for (int i = 0; i < 200; ++i) {
      const uint32_t v = uint32_t(rng());
      ASSERT_EQ(counts::divide(c, v), v / base) << v << " / " << base;
    }
  }
}

TEST(PackedCounts, EncodeMatchesTheDefinitionAndDecodesBackExactly) {
  for (uint32_t base : kBases) {
    const counts::CountCode c = counts::make_code(base);
    for (size_t nwords : {size_t(1), size_t(2), size_t(3), size_t(5), size_t(7), size_t(13), size_t(64), size_t(1001)}) {
      for (uint32_t seed = 1; seed <= 3; ++seed) {
        const size_t stride = nwords + seed % 2 * 3;  // planes back to back, and with a gap
        const RandomCounts in(base, nwords, stride, seed * 7919 + base + uint32_t(nwords));
        const std::vector<uint32_t> want = in.oracle_limbs();
        ASSERT_EQ(counts::limbs_for_words(c, nwords), want.size()) << "base " << base;
        std::vector<uint32_t> limbs(want.size() + 1, 0xEEEEEEEEu);  // one poisoned limb past the end must stay
        encode_counts(c, in.planes.data(), stride, nwords, limbs.data());
        EXPECT_EQ(limbs.back(), 0xEEEEEEEEu) << "encode wrote past its limbs, base " << base;
        limbs.pop_back();
        ASSERT_EQ(limbs, want) << "base " << base << " nwords " << nwords << " seed " << seed;
        for (size_t l = 0; l < want.size(); ++l) {  // the header's definition, which the GPU runs
          ASSERT_EQ(counts::encode_limb(c, in.planes.data(), stride, nwords, l), want[l]) << "base " << base;
        }

        std::vector<uint64_t> back(in.planes.size(), 0x5A5A5A5A5A5A5A5Aull);
        for (size_t i = 0; i < back.size(); ++i) {
          if (i % stride >= nwords) back[i] = in.planes[i];  // the gaps hold what the input's do
        }
        std::vector<uint64_t> by_word = back;
        decode_counts(c, limbs.data(), nwords, back.data(), stride);
        ASSERT_EQ(back, in.planes) << "base " << base << " nwords " << nwords << " seed " << seed;
        for (size_t w = 0; w < nwords; ++w) counts::decode_word(c, limbs.data(), limbs.size(), w, by_word.data(), stride);
        ASSERT_EQ(by_word, in.planes) << "decode_word, base " << base << " nwords " << nwords;
      }
    }
  }
}

TEST(PackedCounts, AnyLimbDecodesToDigitsBelowTheBaseInsideTheRange) {
  // Limbs never written by encode_counts (up to 2^32 − 1, past B^k − 1): each of the k digits is
  // taken mod B, as the definition says, the tables agree with it, and nothing spills outside the
  // R planes' nwords words.
  std::mt19937_64 rng(11);
  for (uint32_t base : kBases) {
    const counts::CountCode c = counts::make_code(base);
    const size_t nwords = 3, stride = 5, k = size_t(c.per_limb);
    std::vector<uint32_t> limbs(counts::limbs_for_words(c, nwords));
    for (auto& l : limbs) l = rng() % 4 == 0 ? 0xFFFFFFFFu : uint32_t(rng());
    std::vector<uint64_t> planes(size_t(c.planes) * stride, 0x0123456789ABCDEFull);
    decode_counts(c, limbs.data(), nwords, planes.data(), stride);
    for (int p = 0; p < c.planes; ++p) {
      for (size_t w = nwords; w < stride; ++w) ASSERT_EQ(planes[size_t(p) * stride + w], 0x0123456789ABCDEFull);
    }
    for (size_t e = 0; e < nwords * 64; ++e) {
      uint64_t v = limbs[e / k];
      for (size_t j = 0; j < e % k; ++j) v /= base;
      const uint64_t digit = v % base;
      for (int p = 0; p < c.planes; ++p) {
        ASSERT_EQ((planes[size_t(p) * stride + e / 64] >> (e % 64)) & 1u, (digit >> p) & 1u)
            << "base " << base << " element " << e << " plane " << p;
      }
    }
  }
}

TEST(PackedCounts, EveryBaseUpTo4096AgreesWithTheDefinition) {
  // The CPU's tables (one set per base, up to 4096) against the header's definition, which the GPU
  // runs: random counts, and limbs never written (the largest, B^k and its neighbours, random ones).
  std::mt19937_64 rng(5);
  for (uint32_t base = 2; base <= 4096; ++base) {
    const counts::CountCode c = counts::make_code(base);
    const size_t nwords = 1 + base % 3, stride = nwords + 1;
    const RandomCounts in(base, nwords, stride, base);
    const size_t nlimbs = counts::limbs_for_words(c, nwords);
    std::vector<uint32_t> limbs(nlimbs);
    encode_counts(c, in.planes.data(), stride, nwords, limbs.data());
    for (size_t l = 0; l < nlimbs; ++l) {
      ASSERT_EQ(limbs[l], counts::encode_limb(c, in.planes.data(), stride, nwords, l)) << "base " << base;
    }
    uint64_t power = 1;
    for (int j = 0; j < c.per_limb; ++j) power *= base;
    const uint32_t odd_limbs[] = {0xFFFFFFFFu, uint32_t(power - 1), uint32_t(power), uint32_t(power + 1), uint32_t(rng())};
    for (size_t l = 0; l < nlimbs; ++l) {
      if (l % 2 == 1) limbs[l] = odd_limbs[(l / 2 + base) % 5];
    }
    std::vector<uint64_t> fast(size_t(c.planes) * stride, 0x77), defined = fast;
    decode_counts(c, limbs.data(), nwords, fast.data(), stride);
    for (size_t w = 0; w < nwords; ++w) counts::decode_word(c, limbs.data(), nlimbs, w, defined.data(), stride);
    ASSERT_EQ(fast, defined) << "base " << base;
  }
}

TEST(PackedCounts, AWordRangeIsEncodedOnItsOwn) {
  // The direct algorithm encodes each owner's chunk by itself: the limbs of words [3, 10) are the
  // encoding of those seven words, whatever precedes them.
  const counts::CountCode c = counts::make_code(5);
  const RandomCounts all(5, 10, 10, 42);
  const RandomCounts part_only = [&] {
    RandomCounts r(5, 7, 7, 1);
    for (int p = 0; p < c.planes; ++p) {
      for (size_t w = 0; w < 7; ++w) r.planes[size_t(p) * 7 + w] = all.planes[size_t(p) * 10 + 3 + w];
    }
    r.counts.assign(all.counts.begin() + 3 * 64, all.counts.end());
    return r;
  }();
  std::vector<uint32_t> part(counts::limbs_for_words(c, 7));
  encode_counts(c, all.planes.data() + 3, 10, 7, part.data());
  EXPECT_EQ(part, part_only.oracle_limbs());
}

}  // namespace
}  // namespace pride::bits::test
