// lion_vote: Lion's local step fused with packing its vote, against a per-element oracle with one
// rounding per operation, on both ISAs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "tests/kernels/oracle.h"

namespace pride::bits::test {
namespace {

class LionTest : public IsaTest {};

TEST_P(LionTest, VotesAndMomentumMatchOneRoundingPerOp) {
  const double b1 = 0.9, b2 = 0.99;
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    for (size_t n : lengths()) {
      const auto g = random_values(dtype, n);
      auto m = random_values(dtype, n);
      const auto m0 = m;
      auto pos = dirty_words(words_for(n)), neg = dirty_words(words_for(n)), only = dirty_words(words_for(n));
      auto m_binary = m0;
      lion_vote(g.data(), m.data(), dtype, n, b1, b2, pos.data(), neg.data());
      lion_vote(g.data(), m_binary.data(), dtype, n, b1, b2, only.data(), nullptr);
      for (size_t j = 0; j < n; ++j) {
        auto rounded = [&](float f) {
          uint8_t buf[4];
          store_float(dtype, f, buf, 0);
          return to_float(dtype, buf, 0);
        };
        const float gj = to_float(dtype, g.data(), j), mj = to_float(dtype, m0.data(), j);
        const float c = rounded(rounded(mj * float(b1)) + rounded(gj * float(1 - b1)));
        std::vector<uint8_t> want(4);
        store_float(dtype, rounded(mj * float(b2)) + rounded(gj * float(1 - b2)), want.data(), 0);
        const size_t w = dtype_size(dtype);
        if (!(std::isnan(c))) {
          ASSERT_EQ(bit(pos.data(), j), c > 0) << dtype_name(dtype) << " n=" << n << " j=" << j;
          ASSERT_EQ(bit(neg.data(), j), c < 0) << dtype_name(dtype) << " n=" << n << " j=" << j;
          ASSERT_EQ(bit(only.data(), j), c > 0);
        } else {
          ASSERT_FALSE(bit(pos.data(), j) || bit(neg.data(), j));  // NaN abstains (ternary) / votes −1
        }
        if (!is_nan(dtype, want.data(), 0)) {
          ASSERT_EQ(std::memcmp(m.data() + j * w, want.data(), w), 0) << dtype_name(dtype) << " j=" << j;
        } else if (dtype != DType::kFloat32) {
          // A NaN momentum is stored as torch stores one: bf16 0x7FC0, fp16 0x7E00 with its sign. (The
          // AVX2 code rounds intermediates without canonicalising NaNs: this checks none became a number.)
          uint16_t h;
          std::memcpy(&h, m.data() + j * w, 2);
          if (dtype == DType::kBFloat16) ASSERT_EQ(h, 0x7FC0) << "j=" << j;
          if (dtype == DType::kFloat16) ASSERT_EQ(h & 0x7FFF, 0x7E00) << "j=" << j;
        }
      }
      // The momentum does not depend on the vote kind: the same bits, except that float32 NaNs may
      // carry different payloads (which operand's NaN an add returns depends on the order the compiler
      // chose, and clang's differs between the two kernels).
      for (size_t j = 0; j < n; ++j) {
        const size_t w = dtype_size(dtype);
        if (dtype == DType::kFloat32 && is_nan(dtype, m.data(), j) && is_nan(dtype, m_binary.data(), j)) continue;
        ASSERT_EQ(std::memcmp(m.data() + j * w, m_binary.data() + j * w, w), 0) << dtype_name(dtype) << " j=" << j;
      }
      expect_trailing_zero(pos, n, "pos");
      expect_trailing_zero(neg, n, "neg");
    }
  }
}

PRIDE_INSTANTIATE_ISA_TESTS(LionTest);

}  // namespace
}  // namespace pride::bits::test
