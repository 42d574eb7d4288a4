// How the multi-tensor kernels (tensor_slices.h) share a launch's slices among their blocks: each
// slice is cut into kSlicePieces runs of nearly equal length, and blocks take pieces in turn. Testable
// on any machine (tests/kernels/test_slice_pieces.cc).
//
// Why: blocks used to take whole slices (up to 2^16 elements, 768 KiB of a float32 Lion step's
// traffic). A bucket whose slice count is just above a multiple of the grid then ended with a round in
// which a fraction of the blocks had work (350M parameters in 1 GiB buckets: the second bucket's
// roughly 1300 slices on the 1056 blocks of an H100), and the blocks in flight at once spread over
// 1056 slices, about 270 MiB of each float32 tensor. With pieces, a launch's last round is an eighth
// as long and the pieces in flight span an eighth of that. Not yet timed on a GPU when written
// (2026-11-27): bench_cuda_kernels' *_slices rows against its whole-tensor rows say what it gives.
#pragma once

#include <cstddef>
#include <cstdint>

#include "collectives/bits/host_device.h"

namespace pride::bits::cuda {

constexpr uint32_t kSlicePieces = 8;

// Items [begin, end) of piece `piece` of `pieces` (piece < pieces) when `count` items are cut in
// order: runs of ⌈count / pieces⌉, the last ones shorter or empty. The pieces tile [0, count).
PRIDE_HD inline void piece_range(size_t count, uint32_t piece, uint32_t pieces, size_t& begin, size_t& end) {
  const size_t per = (count + pieces - 1) / pieces;
  begin = piece * per < count ? piece * per : count;
  end = begin + per < count ? begin + per : count;
}

}  // namespace pride::bits::cuda
