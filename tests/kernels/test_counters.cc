// Bit-sliced counters against int32 sums of the votes, computed one element at a time.
#include "oracle.h"

namespace pride::bits::test {
namespace {

using CounterTest = IsaTest;

struct Votes {
  std::vector<std::vector<uint64_t>> planes;
  std::vector<int32_t> count;  // number of set bits per element, the oracle
};

Votes random_votes(int nranks, size_t n) {
  Votes v;
  v.count.assign(n, 0);
  for (int r = 0; r < nranks; ++r) {
    // Vary the density so that counts near 0 and near nranks both occur.
    v.planes.push_back(random_plane(n, 0.1 + 0.8 * (r % 5) / 4.0));
    for (size_t j = 0; j < n; ++j) v.count[j] += bit(v.planes.back().data(), j);
  }
  return v;
}

std::vector<const uint64_t*> pointers(const Votes& v) {
  std::vector<const uint64_t*> ptrs;
  for (const auto& p : v.planes) ptrs.push_back(p.data());
  return ptrs;
}

TEST_P(CounterTest, CountPlanesOneToSixtyFourRanks) {
  for (int nranks = 1; nranks <= 64; ++nranks) {
    for (size_t n : short_lengths()) {
      const Votes v = random_votes(nranks, n);
      const auto ptrs = pointers(v);
      // One spare plane, prefilled with ones: it must come back zero.
      const int planes = planes_for(nranks) + 1;
      auto counter = dirty_words(planes * words_for(n));
      count_planes(ptrs.data(), nranks, words_for(n), counter.data(), planes);
      ASSERT_EQ(decode_counter(counter.data(), planes, n), v.count) << "nranks=" << nranks << " n=" << n;
    }
  }
}

TEST_P(CounterTest, CountPlanesManyRanks) {
  for (int nranks : {0, 127, 128, 129, 255, 256, 257, 1023, 1024}) {
    const size_t n = 300;
    const Votes v = random_votes(nranks, n);
    const auto ptrs = pointers(v);
    const int planes = planes_for(nranks);
    auto counter = dirty_words(planes * words_for(n));
    count_planes(ptrs.data(), nranks, words_for(n), counter.data(), planes);
    ASSERT_EQ(decode_counter(counter.data(), planes, n), v.count) << "nranks=" << nranks;
  }
}

TEST_P(CounterTest, CountPlanesLongVectors) {
  for (int nranks : {3, 4, 8}) {
    for (size_t n : lengths()) {
      const Votes v = random_votes(nranks, n);
      const auto ptrs = pointers(v);
      const int planes = planes_for(nranks);
      auto counter = dirty_words(planes * words_for(n));
      count_planes(ptrs.data(), nranks, words_for(n), counter.data(), planes);
      ASSERT_EQ(decode_counter(counter.data(), planes, n), v.count) << "nranks=" << nranks << " n=" << n;
    }
  }
}

TEST_P(CounterTest, AddPlaneOneByOne) {
  // Counters of 1 to 10 planes: up to 8 each have a kernel of their own, wider ones the general loop.
  for (int nranks : {1, 2, 3, 7, 8, 15, 16, 31, 40, 64, 255, 300, 700}) {
    for (size_t n : lengths()) {
      if (n > 5000 && nranks > 8) continue;  // keep the suite fast
      const Votes v = random_votes(nranks, n);
      const int planes = planes_for(nranks);
      std::vector<uint64_t> counter(planes * words_for(n), 0);
      for (const auto& plane : v.planes) counter_add_plane(counter.data(), planes, words_for(n), plane.data());
      ASSERT_EQ(decode_counter(counter.data(), planes, n), v.count) << "nranks=" << nranks << " n=" << n;
    }
  }
}

TEST_P(CounterTest, AddCounters) {
  // Counters of 2 to 10 planes: each width up to 8 has a kernel of its own (counter_add_fixed), wider
  // ones take the general loop.
  for (int nranks : {2, 3, 7, 12, 17, 22, 27, 32, 37, 42, 47, 52, 57, 62, 64, 100, 255, 256, 700}) {
    for (size_t n : short_lengths()) {
      // Split the ranks unevenly so that the narrower counter has fewer planes.
      const int left = nranks / 3 + 1;
      const Votes a = random_votes(left, n);
      const Votes b = random_votes(nranks - left, n);
      const int acc_planes = planes_for(nranks);
      const int other_planes = planes_for(nranks - left);
      std::vector<int32_t> sum(n);
      for (size_t j = 0; j < n; ++j) sum[j] = a.count[j] + b.count[j];
      auto acc = encode_counter(a.count, acc_planes);
      const auto other = encode_counter(b.count, other_planes);
      counter_add(acc.data(), acc_planes, other.data(), other_planes, words_for(n));
      ASSERT_EQ(decode_counter(acc.data(), acc_planes, n), sum) << "nranks=" << nranks << " n=" << n;
    }
  }
  // One plane each, sums of at most 1: the other counter's ones only where the first has zeros.
  for (size_t n : short_lengths()) {
    const Votes a = random_votes(1, n);
    std::vector<int32_t> b_count(n), sum(n);
    for (size_t j = 0; j < n; ++j) {
      b_count[j] = a.count[j] == 0 ? int32_t(j % 3 == 0) : 0;
      sum[j] = a.count[j] + b_count[j];
    }
    auto acc = encode_counter(a.count, 1);
    const auto other = encode_counter(b_count, 1);
    counter_add(acc.data(), 1, other.data(), 1, words_for(n));
    ASSERT_EQ(decode_counter(acc.data(), 1, n), sum) << "one plane, n=" << n;
  }
}

TEST_P(CounterTest, SignedOffset) {
  // Up to 64 ranks the output's planes (≤ 8) are fixed at compile time; 128 and 300 take the general loop.
  for (int nranks : {1, 2, 3, 4, 7, 8, 16, 33, 64, 128, 300}) {
    for (size_t n : lengths()) {
      if (n > 5000) continue;
      // Ternary votes: each rank is +1, -1 or abstains, so pos + neg <= nranks.
      std::vector<int32_t> pos(n), neg(n), expected(n);
      for (size_t j = 0; j < n; ++j) {
        pos[j] = static_cast<int32_t>(rng()() % (nranks + 1));
        neg[j] = static_cast<int32_t>(rng()() % (nranks - pos[j] + 1));
        expected[j] = pos[j] - neg[j] + nranks;
      }
      const int planes = planes_for(nranks);
      const int out_planes = planes_for(2 * nranks);
      const auto p = encode_counter(pos, planes);
      const auto m = encode_counter(neg, planes);
      auto out = dirty_words(out_planes * words_for(n));
      counter_signed_offset(p.data(), m.data(), planes, words_for(n), nranks, out.data(), out_planes);
      ASSERT_EQ(decode_counter(out.data(), out_planes, n), expected) << "nranks=" << nranks << " n=" << n;
      // Planes `stride` words apart (the result planes of a whole segment): the same words in place,
      // and the words between the planes untouched.
      const size_t W = words_for(n), stride = W + 3;
      const auto before = dirty_words(out_planes * stride);
      auto strided = before;
      counter_signed_offset(p.data(), m.data(), planes, W, nranks, strided.data(), out_planes, stride);
      for (int q = 0; q < out_planes; ++q) {
        for (size_t w = 0; w < stride; ++w) {
          const uint64_t want = w < W ? out[size_t(q) * W + w] : before[size_t(q) * stride + w];
          ASSERT_EQ(strided[size_t(q) * stride + w], want) << "nranks=" << nranks << " n=" << n << " plane " << q
                                                           << " word " << w << " of stride " << stride;
        }
      }
    }
  }
}

TEST_P(CounterTest, RejectsBadShapes) {
  uint64_t a[4] = {}, b[4] = {};
  EXPECT_THROW(counter_add(a, 1, b, 2, 1), std::invalid_argument);
  EXPECT_THROW(counter_add_plane(a, 0, 1, b), std::invalid_argument);
  const uint64_t* planes[3] = {a, a, a};
  EXPECT_THROW(count_planes(planes, 3, 1, b, 1), std::invalid_argument);  // 3 needs 2 planes
  EXPECT_THROW(counter_signed_offset(a, b, 1, 2, 1, a, 2, 1), std::invalid_argument);  // stride below nwords
}

PRIDE_INSTANTIATE_ISA_TESTS(CounterTest);

}  // namespace
}  // namespace pride::bits::test
