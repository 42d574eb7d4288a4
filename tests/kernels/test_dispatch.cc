// ISA selection, small helpers and the statistics kernels.
#include "oracle.h"

namespace pride::bits::test {
namespace {

TEST(Dispatch, ScalarAlwaysSupported) {
  const Isa saved = active_isa();
  EXPECT_TRUE(isa_supported(Isa::kScalar));
  set_isa(Isa::kScalar);
  EXPECT_EQ(active_isa(), Isa::kScalar);
  if (isa_supported(Isa::kAvx2)) {
    set_isa(Isa::kAvx2);
    EXPECT_EQ(active_isa(), Isa::kAvx2);
  } else {
    EXPECT_THROW(set_isa(Isa::kAvx2), std::invalid_argument);
  }
  set_isa(saved);
}

TEST(Dispatch, Helpers) {
  EXPECT_EQ(planes_for(0), 1);
  EXPECT_EQ(planes_for(1), 1);
  EXPECT_EQ(planes_for(2), 2);
  EXPECT_EQ(planes_for(3), 2);
  EXPECT_EQ(planes_for(4), 3);
  EXPECT_EQ(planes_for(1023), 10);
  EXPECT_EQ(planes_for(1024), 11);
  EXPECT_EQ(dtype_size(DType::kFloat32), 4u);
  EXPECT_EQ(dtype_size(DType::kBFloat16), 2u);
  EXPECT_EQ(dtype_size(DType::kInt8), 1u);
  EXPECT_STREQ(dtype_name(DType::kFloat16), "float16");
  EXPECT_EQ(words_for(65), 2u);
  EXPECT_EQ(bytes_for(9), 2u);
}

using StatsTest = IsaTest;

TEST_P(StatsTest, PopcountAndCountEqual) {
  for (size_t n : lengths()) {
    auto a = random_plane(n);
    auto b = random_plane(n);
    // Garbage past n must be ignored.
    if (n % 64) {
      a.back() |= ~uint64_t{0} << (n % 64);
      b.back() &= ~(~uint64_t{0} << (n % 64));
    }
    size_t ones = 0, equal = 0;
    for (size_t j = 0; j < n; ++j) {
      ones += bit(a.data(), j);
      equal += bit(a.data(), j) == bit(b.data(), j);
    }
    EXPECT_EQ(popcount(a.data(), n), ones) << "n=" << n;
    EXPECT_EQ(count_equal(a.data(), b.data(), n), equal) << "n=" << n;
  }
}

PRIDE_INSTANTIATE_ISA_TESTS(StatsTest);

}  // namespace
}  // namespace pride::bits::test
