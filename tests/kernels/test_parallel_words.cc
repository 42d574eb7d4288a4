// parallel_words: every word of the range exactly once, in parts on whole cache lines, on as many
// threads as asked and the work allows; a part's exception reaches the caller; and packing split this
// way gives the bits of one call.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "collectives/bits/kernels.h"
#include "collectives/bits/parallel_words.h"
#include "tests/kernels/oracle.h"

namespace pride::bits::test {
namespace {

TEST(ParallelWords, CoversEveryWordOnceOnWholeLines) {
  for (size_t nwords : {size_t(0), size_t(1), size_t(7), kMinWordsPerThread - 1, 2 * kMinWordsPerThread + 3,
                        10 * kMinWordsPerThread + 13}) {
    for (int threads : {0, 1, 2, 3, 8}) {
      std::vector<std::atomic<int>> seen(nwords);
      std::mutex m;
      std::set<std::thread::id> ids;
      std::vector<std::pair<size_t, size_t>> parts;
      parallel_words(nwords, threads, [&](size_t first, size_t count) {
        for (size_t w = first; w < first + count; ++w) seen[w]++;
        std::lock_guard<std::mutex> lock(m);
        ids.insert(std::this_thread::get_id());
        parts.emplace_back(first, count);
      });
      for (size_t w = 0; w < nwords; ++w) ASSERT_EQ(seen[w].load(), 1) << "word " << w << " of " << nwords;
      const size_t expected = std::max<size_t>(1, std::min<size_t>(size_t(std::max(threads, 1)),
                                                                   nwords / kMinWordsPerThread));
      EXPECT_EQ(ids.size(), nwords == 0 ? 0 : expected) << nwords << " words, " << threads << " threads";
      for (const auto& [first, count] : parts) {
        EXPECT_EQ(first % 8, 0u) << "a part starts inside a cache line";
        (void)count;
      }
    }
  }
}

TEST(ParallelWords, RethrowsAPartsException) {
  EXPECT_THROW(parallel_words(4 * kMinWordsPerThread, 4,
                              [](size_t first, size_t) {
                                if (first > 0) throw std::runtime_error("part failed");
                              }),
               std::runtime_error);
}

TEST(ParallelWords, SplitPackingEqualsOneCall) {
  const size_t n = 64 * 3 * kMinWordsPerThread + 37;
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    const auto x = random_values(dtype, n);
    const size_t W = words_for(n);
    std::vector<uint64_t> whole(W), split(W, ~uint64_t{0});
    pack_binary(x.data(), dtype, n, whole.data());
    parallel_words(W, 3, [&](size_t first, size_t words) {
      const size_t begin = first * 64, count = std::min(n, (first + words) * 64) - begin;
      pack_binary(x.data() + begin * dtype_size(dtype), dtype, count, split.data() + first);
    });
    EXPECT_EQ(split, whole) << dtype_name(dtype);
  }
}

}  // namespace
}  // namespace pride::bits::test
