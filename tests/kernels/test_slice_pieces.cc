// The multi-tensor kernels' pieces of a slice (collectives/bits/cuda/slice_pieces.h), run here on the
// CPU: for every count and number of pieces, the pieces tile [0, count) in order, none longer than
// ⌈count / pieces⌉, so every item is handled once and the blocks' shares stay even.
#include <gtest/gtest.h>

#include "collectives/bits/cuda/slice_pieces.h"

namespace pride::bits::cuda {
namespace {

TEST(SlicePieces, TileEveryCountInOrderWithoutOverlapOrGap) {
  for (uint32_t pieces = 1; pieces <= 17; ++pieces) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{2}, size_t{7}, size_t{8}, size_t{9}, size_t{63},
                         size_t{64}, size_t{65}, size_t{511}, size_t{512}, size_t{2048}, size_t{1} << 16,
                         (size_t{1} << 16) + 3, size_t{5000000007}}) {
      const size_t longest = (count + pieces - 1) / pieces;
      size_t next = 0;
      for (uint32_t p = 0; p < pieces; ++p) {
        size_t begin = 0, end = 0;
        piece_range(count, p, pieces, begin, end);
        ASSERT_EQ(begin, next) << "count " << count << ", piece " << p << " of " << pieces;
        ASSERT_LE(begin, end);
        ASSERT_LE(end - begin, longest);
        next = end;
      }
      ASSERT_EQ(next, count) << "count " << count << ", " << pieces << " pieces";
    }
  }
  // The default: a full slice of 2^16 float32 elements is 512 lion steps, 64 to a piece.
  size_t begin = 0, end = 0;
  piece_range(512, kSlicePieces - 1, kSlicePieces, begin, end);
  EXPECT_EQ(begin, 448u);
  EXPECT_EQ(end, 512u);
}

}  // namespace
}  // namespace pride::bits::cuda
