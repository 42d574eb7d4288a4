// The 1-bit compression kernels (onebit.h) of 1-bit Adam and 0/1 Adam: each against its formula
// written one element at a time here, on both ISAs, and the two ISAs against each other bit for bit
// (the scale a rank sends must not depend on which CPU computed it).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "collectives/bits/onebit.h"
#include "tests/kernels/oracle.h"

namespace pride::bits::test {
namespace {

class OnebitTest : public IsaTest {};

std::vector<float> random_floats(size_t n, bool specials) {
  std::vector<float> out(n);
  if (specials) {
    const auto raw = random_values(DType::kFloat32, n);
    if (n) std::memcpy(out.data(), raw.data(), n * sizeof(float));
  } else {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (auto& v : out) v = normal(rng());
  }
  return out;
}

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// Equal bits, or both NaN.
void expect_same(float want, float got, const char* what, size_t n, size_t k) {
  if (std::isnan(want)) {
    ASSERT_TRUE(std::isnan(got)) << what << " n=" << n << " k=" << k;
  } else {
    ASSERT_EQ(bits_of(want), bits_of(got)) << what << " n=" << n << " k=" << k << ": " << want << " vs " << got;
  }
}

TEST_P(OnebitTest, CompressGivesSignBitsAndTheError) {
  for (size_t n : lengths()) {
    const auto y = random_floats(n, /*specials=*/true);
    const float scale = 0.375f + float(n % 7);
    auto signs = dirty_words(words_for(n));
    std::vector<float> error(n, 99.0f);
    compress_signs(y.data(), scale, n, signs.data(), error.data());
    for (size_t k = 0; k < n; ++k) {
      const bool positive = !(y[k] < 0.0f);  // +1 for ≥ 0, −0 and NaN
      ASSERT_EQ(bit(signs.data(), k), positive) << "n=" << n << " k=" << k << " y=" << y[k];
      const float compressed = positive ? scale : -scale;
      expect_same(y[k] - compressed, error[k], "error", n, k);
    }
    expect_trailing_zero(signs, n, "signs");
  }
}

TEST_P(OnebitTest, ExpandGivesPlusOrMinusTheScale) {
  for (size_t n : lengths()) {
    const auto signs = random_plane(n);
    for (float scale : {0.0f, 1.5e-3f, 7.0f}) {
      std::vector<float> out(n, 99.0f);
      expand_signs(signs.data(), scale, n, out.data());
      for (size_t k = 0; k < n; ++k) expect_same(bit(signs.data(), k) ? scale : -scale, out[k], "expand", n, k);
    }
  }
}

TEST_P(OnebitTest, AverageSumsInDoubleInRankOrderAndRoundsOnce) {
  for (int count : {1, 2, 3, 4, 7, 16}) {
    for (size_t n : short_lengths()) {
      std::vector<std::vector<uint64_t>> planes;
      std::vector<const uint64_t*> pointers;
      std::vector<float> scales;
      std::uniform_real_distribution<float> uniform(0.0f, 2.0f);
      for (int i = 0; i < count; ++i) {
        planes.push_back(random_plane(n));
        scales.push_back(i == 1 ? 0.0f : uniform(rng()));  // a rank whose chunk was all zeros sends 0
      }
      for (const auto& p : planes) pointers.push_back(p.data());
      std::vector<float> out(n, 99.0f);
      average_signs(pointers.data(), scales.data(), count, n, out.data());
      for (size_t k = 0; k < n; ++k) {
        double sum = 0.0;
        for (int i = 0; i < count; ++i) sum += bit(planes[size_t(i)].data(), k) ? double(scales[size_t(i)]) : -double(scales[size_t(i)]);
        expect_same(float(sum / count), out[k], "average", n, k);
      }
    }
  }
}

TEST_P(OnebitTest, SquareSumsAreCloseToLongDoubleAndAddTheErrorInFloat) {
  for (size_t n : lengths()) {
    auto x = random_floats(n, /*specials=*/false);
    const auto error = random_floats(n, /*specials=*/false);
    const auto x0 = x;
    long double exact = 0.0L;
    for (size_t k = 0; k < n; ++k) exact += static_cast<long double>(x0[k]) * x0[k];
    EXPECT_NEAR(double(exact), square_sum(x.data(), n), 1e-13 * double(exact)) << "n=" << n;
    const double with_error = add_error_and_square_sum(x.data(), error.data(), n);
    exact = 0.0L;
    for (size_t k = 0; k < n; ++k) {
      const float y = x0[k] + error[k];
      expect_same(y, x[k], "x + error", n, k);
      exact += static_cast<long double>(y) * y;
    }
    EXPECT_NEAR(double(exact), with_error, 1e-13 * double(exact)) << "n=" << n;
  }
  EXPECT_EQ(onebit_scale(0.0, 0), 0.0f);
  EXPECT_EQ(onebit_scale(16.0, 4), 2.0f);
}

PRIDE_INSTANTIATE_ISA_TESTS(OnebitTest);

// Portable and AVX2 results, byte for byte, on values with every special pattern.
TEST(OnebitIsas, AgreeBitForBit) {
  if (!isa_supported(Isa::kAvx2)) GTEST_SKIP() << "no AVX2 on this CPU";
  const Isa saved = active_isa();
  struct Outputs {
    double sum, sum_with_error;
    std::vector<float> x, error, average, expanded;
    std::vector<uint64_t> signs;
  };
  for (size_t n : lengths()) {
    const auto y = random_floats(n, /*specials=*/true), e = random_floats(n, /*specials=*/true);
    const auto other = random_plane(n);
    const float scales[3] = {0.5f, 1.25f, 3.0f};
    Outputs out[2];
    for (int which = 0; which < 2; ++which) {
      set_isa(which == 0 ? Isa::kScalar : Isa::kAvx2);
      Outputs& o = out[which];
      o.x = y;
      o.sum = square_sum(o.x.data(), n);
      o.sum_with_error = add_error_and_square_sum(o.x.data(), e.data(), n);
      o.signs = dirty_words(words_for(n));
      o.error.assign(n, 0.0f);
      compress_signs(o.x.data(), 0.75f, n, o.signs.data(), o.error.data());
      const uint64_t* planes[3] = {o.signs.data(), other.data(), o.signs.data()};
      o.average.assign(n, 0.0f);
      average_signs(planes, scales, 3, n, o.average.data());
      o.expanded.assign(n, 0.0f);
      expand_signs(o.signs.data(), 0.75f, n, o.expanded.data());
    }
    set_isa(saved);
    for (auto [a, b] : {std::pair{out[0].sum, out[1].sum}, std::pair{out[0].sum_with_error, out[1].sum_with_error}}) {
      if (std::isnan(a)) {
        EXPECT_TRUE(std::isnan(b)) << "n=" << n;
      } else {
        EXPECT_EQ(a, b) << "n=" << n;
      }
    }
    EXPECT_EQ(out[0].signs, out[1].signs) << "n=" << n;
    // Equal bits, or NaN on both (a NaN's payload may depend on the order the compiler put the
    // operands of an addition in).
    for (auto member : {&Outputs::x, &Outputs::error, &Outputs::average, &Outputs::expanded})
      for (size_t k = 0; k < n; ++k) expect_same((out[0].*member)[k], (out[1].*member)[k], "portable vs avx2", n, k);
  }
}

}  // namespace
}  // namespace pride::bits::test
