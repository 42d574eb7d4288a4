// patterns/chunks.h against plain counting: the chunks tile the buffer in rank order with sizes that
// differ by at most one, and chunk_offset is the running sum of the coded chunk sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>

#include "collectives/bits/trit_coding.h"
#include "collectives/engine/patterns/chunks.h"

namespace pride::patterns {
namespace {

TEST(Chunks, TileTheBufferInRankOrder) {
  for (size_t total : {size_t(0), size_t(1), size_t(7), size_t(64), size_t(1000003)}) {
    for (int parts = 1; parts <= 9; ++parts) {
      size_t next = 0, smallest = total, largest = 0;
      for (int j = 0; j < parts; ++j) {
        const Range r = chunk(total, parts, j);
        EXPECT_EQ(r.begin, next) << total << " in " << parts << ", chunk " << j;
        next = r.end();
        smallest = std::min(smallest, r.size);
        largest = std::max(largest, r.size);
      }
      EXPECT_EQ(next, total) << total << " in " << parts;
      EXPECT_LE(largest - smallest, 1u) << total << " in " << parts;
    }
  }
}

// Trit bytes are not proportional to the words (⌈64·w/5⌉), so the offsets must add each chunk's own.
TEST(Chunks, OffsetsAddEachChunksCodedBytes) {
  for (size_t total : {size_t(0), size_t(3), size_t(5), size_t(17), size_t(4099)}) {
    for (int parts = 1; parts <= 9; ++parts) {
      size_t sum = 0;
      for (int j = 0; j <= parts; ++j) {
        EXPECT_EQ(chunk_offset(total, parts, j, bits::trits::bytes_for_words), sum)
            << total << " words in " << parts << ", chunk " << j;
        if (j < parts) sum += bits::trits::bytes_for_words(chunk(total, parts, j).size);
      }
      // Not the coding of the whole buffer at once, which rounds up once instead of once per chunk.
      EXPECT_GE(sum, bits::trits::bytes_for_words(total));
    }
  }
  // By hand: 17 words in 3 chunks of 5, 6 and 6 words take 64, 77 and 77 bytes (⌈64·w/5⌉).
  EXPECT_EQ(chunk_offset(17, 3, 1, bits::trits::bytes_for_words), 64u);
  EXPECT_EQ(chunk_offset(17, 3, 2, bits::trits::bytes_for_words), 141u);
  EXPECT_EQ(chunk_offset(17, 3, 3, bits::trits::bytes_for_words), 218u);
}

}  // namespace
}  // namespace pride::patterns
