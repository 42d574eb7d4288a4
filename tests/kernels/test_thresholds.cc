// Threshold comparators against s = 2 * count - nvotes (binary) and s = pos - neg (ternary).
#include "oracle.h"

namespace pride::bits::test {
namespace {

using ThresholdTest = IsaTest;

TEST_P(ThresholdTest, BinaryVote) {
  for (int nvotes = 0; nvotes <= 64; ++nvotes) {
    for (size_t n : short_lengths()) {
      std::vector<int32_t> count(n);
      for (auto& c : count) c = static_cast<int32_t>(rng()() % (nvotes + 1));
      // Spare planes above planes_for(nvotes) must not matter; counters are sometimes kept wider.
      const int planes = planes_for(nvotes) + static_cast<int>(nvotes % 2);
      const auto counter = encode_counter(count, planes);
      auto pos = dirty_words(words_for(n));
      auto tie = dirty_words(words_for(n));
      vote_from_count(counter.data(), planes, words_for(n), nvotes, pos.data(), tie.data());
      auto pos_only = dirty_words(words_for(n));
      vote_from_count(counter.data(), planes, words_for(n), nvotes, pos_only.data(), nullptr);
      for (size_t j = 0; j < n; ++j) {
        const int s = 2 * count[j] - nvotes;
        ASSERT_EQ(bit(pos.data(), j), s > 0) << "nvotes=" << nvotes << " count=" << count[j];
        ASSERT_EQ(bit(tie.data(), j), s == 0) << "nvotes=" << nvotes << " count=" << count[j];
        ASSERT_EQ(bit(pos_only.data(), j), s > 0);
      }
      if (nvotes > 0) {
        expect_trailing_zero(pos, n, "vote_from_count pos");
        expect_trailing_zero(tie, n, "vote_from_count tie");
      }
    }
  }
}

// A counter narrower than nvotes / 2 needs can never pass the threshold.
TEST_P(ThresholdTest, BinaryVoteCounterTooNarrowForHalf) {
  const size_t n = 100;
  std::vector<int32_t> count(n, 3);
  const auto counter = encode_counter(count, 2);
  auto pos = dirty_words(words_for(n));
  auto tie = dirty_words(words_for(n));
  vote_from_count(counter.data(), 2, words_for(n), 8, pos.data(), tie.data());
  for (size_t j = 0; j < n; ++j) ASSERT_FALSE(bit(pos.data(), j) || bit(tie.data(), j));
}

TEST_P(ThresholdTest, TernaryVote) {
  for (int nranks = 1; nranks <= 64; ++nranks) {
    for (size_t n : short_lengths()) {
      std::vector<int32_t> pc(n), nc(n);
      for (size_t j = 0; j < n; ++j) {
        pc[j] = static_cast<int32_t>(rng()() % (nranks + 1));
        nc[j] = static_cast<int32_t>(rng()() % (nranks - pc[j] + 1));
      }
      const int planes = planes_for(nranks);
      const auto a = encode_counter(pc, planes);
      const auto b = encode_counter(nc, planes);
      auto pos = dirty_words(words_for(n));
      auto tie = dirty_words(words_for(n));
      vote_from_counts(a.data(), b.data(), planes, words_for(n), pos.data(), tie.data());
      for (size_t j = 0; j < n; ++j) {
        const int s = pc[j] - nc[j];
        ASSERT_EQ(bit(pos.data(), j), s > 0) << "nranks=" << nranks << " pos=" << pc[j] << " neg=" << nc[j];
        ASSERT_EQ(bit(tie.data(), j), s == 0) << "nranks=" << nranks << " pos=" << pc[j] << " neg=" << nc[j];
      }
    }
  }
}

PRIDE_INSTANTIATE_ISA_TESTS(ThresholdTest);

}  // namespace
}  // namespace pride::bits::test
