// The level planes (collectives/bits/levels.h) against their definition, element by element: bit p of
// u = q + s, where q is read as a plain int.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "collectives/bits/kernels.h"
#include "collectives/bits/levels.h"
#include "tests/kernels/oracle.h"

namespace pride::bits {
namespace {

TEST(Levels, PlanesHoldTwiceTheMaxLevel) {
  EXPECT_EQ(level_planes(1), 2);     // u ∈ {0, 1, 2}
  EXPECT_EQ(level_planes(31), 6);    // 4 ranks: [0, 62]
  EXPECT_EQ(level_planes(42), 7);    // 3 ranks: [0, 84]
  EXPECT_EQ(level_planes(127), 8);   // 1 rank: [0, 254]
}

using LevelsTest = test::IsaTest;

TEST_P(LevelsTest, PackIsBitPOfTheOffsetValue) {
  std::mt19937 rng(11);
  for (int s : {1, 2, 3, 15, 31, 42, 63, 64, 127}) {
    for (size_t n : {size_t(1), size_t(7), size_t(8), size_t(32), size_t(63), size_t(64), size_t(65), size_t(130),
                     size_t(1001)}) {
      std::uniform_int_distribution<int> level(-s, s);
      std::vector<int8_t> q(n);
      for (auto& v : q) v = int8_t(level(rng));
      q[0] = int8_t(-s);
      q[n - 1] = int8_t(s);
      const int planes = level_planes(s);
      const size_t W = words_for(n);
      std::vector<uint64_t> out(size_t(planes) * W, ~uint64_t(0));
      pack_levels(q.data(), n, s, out.data());
      for (int p = 0; p < planes; ++p) {
        for (size_t k = 0; k < W * 64; ++k) {
          const int want = k < n ? ((int(q[k]) + s) >> p) & 1 : 0;  // bits past n are zero
          const int got = int((out[size_t(p) * W + k / 64] >> (k % 64)) & 1);
          ASSERT_EQ(got, want) << "s " << s << " n " << n << " plane " << p << " element " << k;
        }
      }
    }
  }
}

PRIDE_INSTANTIATE_ISA_TESTS(LevelsTest);

TEST(Levels, WithinChecksBothEnds) {
  std::vector<int8_t> q = {0, 3, -3, 2};
  EXPECT_TRUE(levels_within(q.data(), q.size(), 3));
  EXPECT_FALSE(levels_within(q.data(), q.size(), 2));
  q[1] = -128;
  EXPECT_FALSE(levels_within(q.data(), q.size(), 127));
  q[1] = 127;
  EXPECT_TRUE(levels_within(q.data(), q.size(), 127));
  EXPECT_TRUE(levels_within(q.data(), 0, 1));
}

}  // namespace
}  // namespace pride::bits
