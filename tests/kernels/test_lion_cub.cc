// Lion Cub's fused passes (collectives/bits/lion_cub.h) against the formulas spelled out one element at
// a time: c and m with one rounding per operation, Σ|c| in plain double, q in float32 with libm's
// round-half-even, and the apply against the tested apply_vote on the same signs. Both ISAs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "collectives/bits/lion_cub.h"
#include "tests/kernels/oracle.h"

namespace pride::bits::test {
namespace {

using LionCubTest = IsaTest;

const DType kFloatTypes[] = {DType::kFloat32, DType::kBFloat16};  // float16 stays with torch (lion_cub.h)

float rounded(DType dtype, float f) {
  uint8_t buf[4];
  store_float(dtype, f, buf, 0);
  return to_float(dtype, buf, 0);
}

TEST_P(LionCubTest, InterpolationMomentumAndScales) {
  const double b1 = 0.9, b2 = 0.99;
  for (DType dtype : kFloatTypes) {
    for (size_t n : lengths()) {
      const auto g = random_values(dtype, n);  // ±0, NaN, ±inf and subnormals among them
      auto m = random_values(dtype, n);
      const auto m0 = m;
      std::vector<float> c(n, -7.0f);
      const InterpolationStats stats = lion_cub_interpolate(g.data(), m.data(), dtype, n, b1, b2, c.data());
      auto want_m = m0;
      double abs_sum = 0.0;
      float abs_max = 0.0f;
      for (size_t j = 0; j < n; ++j) {
        const float gj = to_float(dtype, g.data(), j), mj = to_float(dtype, m0.data(), j);
        float want_c = rounded(dtype, rounded(dtype, mj * float(b1)) + rounded(dtype, gj * float(1 - b1)));
        if (std::isnan(want_c)) want_c = 0.0f;  // NaN abstains
        ASSERT_EQ(std::memcmp(&c[j], &want_c, 4), 0) << dtype_name(dtype) << " n=" << n << " j=" << j << ": c "
                                                      << c[j] << ", want " << want_c;
        store_float(dtype, rounded(dtype, mj * float(b2)) + rounded(dtype, gj * float(1 - b2)), want_m.data(), j);
        expect_same_value(dtype, want_m.data(), m.data(), j, "momentum");
        abs_sum += std::fabs(double(want_c));
        abs_max = std::max(abs_max, std::fabs(want_c));
      }
      if (std::isinf(abs_sum)) {
        ASSERT_TRUE(std::isinf(stats.abs_sum)) << n;
      } else {
        ASSERT_NEAR(stats.abs_sum, abs_sum, 1e-12 * abs_sum) << dtype_name(dtype) << " n=" << n;
      }
      ASSERT_EQ(stats.abs_max, abs_max) << dtype_name(dtype) << " n=" << n;
    }
  }
}

// The float32 formula torch's div(c, scale).mul_(s/2).round_().clamp_(−s, s) computes; NaN sends 0.
int8_t expected_level(float c, float scale, int s) {
  float v = c / scale;
  v = v * (float(s) / 2.0f);
  v = std::nearbyint(v);
  if (std::isnan(v)) return 0;
  return static_cast<int8_t>(std::fmin(std::fmax(v, float(-s)), float(s)));
}

TEST_P(LionCubTest, LevelsAreTheClampedRoundedScaledValues) {
  std::mt19937 gen(7);
  for (int s : {1, 2, 31, 42, 63, 127}) {
    for (size_t n : lengths()) {
      std::vector<float> c(n);
      std::normal_distribution<float> normal(0.0f, 1e-3f);
      for (auto& v : c) v = normal(gen);
      if (n > 4) {
        c[0] = INFINITY;
        c[1] = -INFINITY;
        c[2] = -0.0f;
        c[3] = 1e-30f;
      }
      for (float scale : {1e-3f, 3.7e-4f, 1e-9f, INFINITY}) {
        std::vector<int8_t> q(n, 99);
        lion_cub_levels(c.data(), n, scale, s, q.data());
        for (size_t j = 0; j < n; ++j) {
          ASSERT_EQ(int(q[j]), int(expected_level(c[j], scale, s)))
              << "s=" << s << " n=" << n << " j=" << j << " c=" << c[j] << " scale=" << scale;
        }
      }
    }
  }
}

TEST_P(LionCubTest, LevelsRoundHalfToEven) {
  // s = 64 and scale = 32 make v = c exactly (powers of two): the halves must go to the even
  // neighbour, as torch.round does.
  const std::vector<float> c = {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 62.5f, -63.5f, 3.4999998f, 200.0f};
  const std::vector<int> want = {0, 2, 2, 0, -2, -2, 62, -64, 3, 64};
  std::vector<int8_t> q(c.size());
  lion_cub_levels(c.data(), c.size(), 32.0f, 64, q.data());
  for (size_t j = 0; j < c.size(); ++j) EXPECT_EQ(int(q[j]), want[j]) << "c=" << c[j];
}

TEST(LionCub, SignsAndRefusals) {
  const std::vector<float> c = {1.0f, -2.0f, 0.0f, -0.0f, INFINITY, -1e-40f};
  std::vector<int8_t> q(c.size(), 9);
  lion_cub_signs(c.data(), c.size(), q.data());
  EXPECT_EQ(q, (std::vector<int8_t>{1, -1, 0, 0, 1, -1}));
  EXPECT_THROW(lion_cub_levels(c.data(), c.size(), 0.0f, 3, q.data()), std::invalid_argument);
  EXPECT_THROW(lion_cub_levels(c.data(), c.size(), NAN, 3, q.data()), std::invalid_argument);
  EXPECT_THROW(lion_cub_levels(c.data(), c.size(), 1.0f, 128, q.data()), std::invalid_argument);
  EXPECT_THROW(lion_cub_levels(c.data(), c.size(), 1.0f, 0, q.data()), std::invalid_argument);
  uint8_t x[4] = {};
  float cbuf[1];
  EXPECT_THROW(lion_cub_apply_sign(x, DType::kInt8, 1, q.data(), 0.1, 0.0), std::invalid_argument);
  EXPECT_THROW(lion_cub_apply_sign(x, DType::kFloat16, 1, q.data(), 0.1, 0.0), std::invalid_argument);
  EXPECT_THROW(lion_cub_interpolate(x, x, DType::kFloat16, 1, 0.9, 0.99, cbuf), std::invalid_argument);
}

TEST_P(LionCubTest, ApplyIsApplyVoteOnTheSignsOfTheSums) {
  std::mt19937 gen(3);
  std::uniform_int_distribution<int> level(-128, 127);
  for (DType dtype : kFloatTypes) {
    for (double wd : {0.0, 0.1}) {
      for (size_t n : lengths()) {
        std::vector<int8_t> total(n);
        for (auto& t : total) t = int8_t(level(gen) / 40);  // many zeros (ties) among them
        auto pos = dirty_words(words_for(n)), tie = dirty_words(words_for(n));
        std::fill(pos.begin(), pos.end(), 0);
        std::fill(tie.begin(), tie.end(), 0);
        for (size_t j = 0; j < n; ++j) {
          set_bit(pos.data(), j, total[j] > 0);
          set_bit(tie.data(), j, total[j] == 0);
        }
        auto x = random_values(dtype, n);
        auto expected = x;
        apply_vote(expected.data(), dtype, n, pos.data(), tie.data(), 3e-3, wd);
        lion_cub_apply_sign(x.data(), dtype, n, total.data(), 3e-3, wd);
        for (size_t j = 0; j < n; ++j) expect_same_value(dtype, expected.data(), x.data(), j, "lion_cub_apply_sign");
      }
    }
  }
}

PRIDE_INSTANTIATE_ISA_TESTS(LionCubTest);

}  // namespace
}  // namespace pride::bits::test
