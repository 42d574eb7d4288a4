// The CUDA pack kernel's 16-bit predicates (collectives/bits/cuda/half_pair_signs.h), run here on the
// CPU: every bf16 and fp16 bit pattern, in either half of the word and beside every kind of neighbour,
// against the oracle's exact widening and a float comparison (> 0, < 0; NaN neither).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "collectives/bits/cuda/half_pair_signs.h"
#include "tests/kernels/oracle.h"

namespace pride::bits::test {
namespace {

struct Format {
  DType dtype;
  uint32_t inf_bits;
};

float widen(DType dtype, uint16_t bits) {
  uint8_t raw[2];
  std::memcpy(raw, &bits, 2);
  return to_float(dtype, raw, 0);
}

class HalfPairSigns : public ::testing::TestWithParam<Format> {};

TEST_P(HalfPairSigns, EveryPatternInEitherHalfMatchesTheOracle) {
  const Format f = GetParam();
  // Neighbours: zeros, the extremes of each class, NaNs and infinities of both signs.
  const uint16_t neighbours[] = {0x0000, 0x8000, 0x0001, 0x8001, 0x7FFF, 0xFFFF, uint16_t(f.inf_bits),
                                 uint16_t(f.inf_bits | 0x8000), uint16_t(f.inf_bits + 1), uint16_t(f.inf_bits - 1),
                                 0x3C00, 0xBF80};
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float value = widen(f.dtype, uint16_t(b));
    const bool want_pos = value > 0.0f, want_neg = value < 0.0f;
    for (uint16_t other : neighbours) {
      const float other_value = widen(f.dtype, other);
      for (int high = 0; high < 2; ++high) {
        const uint32_t word = high ? (b << 16) | other : (uint32_t{other} << 16) | b;
        uint32_t pos = 0, neg = 0;
        cuda::half_pair_signs(word, f.inf_bits, pos, neg);
        const int mine = high ? 31 : 15, theirs = high ? 15 : 31;
        ASSERT_EQ(((pos >> mine) & 1u) != 0, want_pos) << std::hex << "bits 0x" << b << " beside 0x" << other;
        ASSERT_EQ(((neg >> mine) & 1u) != 0, want_neg) << std::hex << "bits 0x" << b << " beside 0x" << other;
        ASSERT_EQ(((pos >> theirs) & 1u) != 0, other_value > 0.0f) << std::hex << "0x" << other << " beside 0x" << b;
        ASSERT_EQ(((neg >> theirs) & 1u) != 0, other_value < 0.0f) << std::hex << "0x" << other << " beside 0x" << b;
        ASSERT_EQ(pos & ~0x80008000u, 0u);
        ASSERT_EQ(neg & ~0x80008000u, 0u);
      }
    }
  }
}

TEST_P(HalfPairSigns, SixteenBytesGatherInElementOrder) {
  const Format f = GetParam();
  for (int trial = 0; trial < 20000; ++trial) {
    const std::vector<uint8_t> x = random_values(f.dtype, 8);  // ±0, NaN, inf, subnormals among them
    uint32_t words[4];
    std::memcpy(words, x.data(), 16);
    uint32_t pos[4], neg[4];
    for (int i = 0; i < 4; ++i) cuda::half_pair_signs(words[i], f.inf_bits, pos[i], neg[i]);
    uint32_t want_pos = 0, want_neg = 0;
    for (int k = 0; k < 8; ++k) {
      const float v = to_float(f.dtype, x.data(), size_t(k));
      want_pos |= uint32_t{v > 0.0f} << k;
      want_neg |= uint32_t{v < 0.0f} << k;
    }
    ASSERT_EQ(cuda::gather_pair_signs(pos[0], pos[1], pos[2], pos[3]), want_pos);
    ASSERT_EQ(cuda::gather_pair_signs(neg[0], neg[1], neg[2], neg[3]), want_neg);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, HalfPairSigns,
                         ::testing::Values(Format{DType::kBFloat16, 0x7F80}, Format{DType::kFloat16, 0x7C00}),
                         [](const auto& info) { return info.param.dtype == DType::kBFloat16 ? "bf16" : "fp16"; });

}  // namespace
}  // namespace pride::bits::test
