// The two ring phases the bandwidth-optimal collectives are built from: a reduce-scatter that leaves
// rank r with the reduction of block r, and an all-gather that hands every rank's block to every rank.
// Each moves (N-1)/N of the buffer per rank, the lower bound, in N-1 steps.
#pragma once

#include <cstddef>
#include <vector>

#include "backend/communicator.h"
#include "collectives/engine/standard/collectives.h"

namespace pride::standard {

// A buffer cut into one block per rank: block b covers units [offset[b], offset[b] + count[b]).
// A unit is an element for reductions and a byte for the byte-level collectives.
struct Blocks {
  std::vector<size_t> offset;
  std::vector<size_t> count;
  size_t largest() const;
};
// `total` units over n ranks as evenly as possible: the first total % n blocks get one unit more.
Blocks even_blocks(size_t total, int n);
// Blocks of the given sizes, packed in rank order.
Blocks blocks_of(const std::vector<size_t>& counts);

// Reduces block r of every rank's `in` into this rank's `out` (count[r] elements). `out` may be
// block r of `in` itself (in-place allreduce); nothing else of `in` is written.
//
// Reduction order, the same for every element of block b whatever the rank: the partial starts as
// rank b+1's input and travels the ring, each rank combining (partial, own input) in that operand
// order, so block b is ((x[b+1] op x[b+2]) op ...) op x[b]. Only the owner computes the final value,
// so what the all-gather later copies is the same bits everywhere.
//
// Scratch memory is two segments of kSegmentBytes: the buffer is processed in rounds, round j
// reducing segment j of every block around the whole ring.
void ring_reduce_scatter(Collective& c, const void* in, void* out, const Blocks& blocks, ScalarType type,
                         ReduceOp op, uint32_t phase);

// All-gather in place: `buf` holds every block at `blocks` (units of `unit` bytes) and this rank's
// block is already there. Blocks travel in pipeline segments, so a large block streams around the
// ring rather than stopping at every hop.
void ring_allgather(Collective& c, void* buf, const Blocks& blocks, size_t unit, uint32_t phase);

}  // namespace pride::standard
