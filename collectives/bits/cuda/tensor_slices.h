// Distributed Lion's two fused halves over many tensors in one launch each. The optimizer treats its
// parameters as one flat index space in which every tensor starts on a 64-element boundary (see
// torch_plugin/distributed_lion.h); a TensorSlice is a piece of one tensor, at most kSliceElements
// long, and the plane words its bits occupy. Blocks take pieces of slices in turn (slice_pieces.h), so
// a step over a hundred tensors costs two launches instead of two hundred.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "collectives/bits/kernels.h"

namespace pride::bits::cuda {

constexpr uint32_t kSliceElements = 1u << 16;

struct TensorSlice {
  const void* in;  // lion_vote: the gradient; apply: the parameters (read and written)
  void* inout;     // lion_vote: the momentum (read and written); apply: the parameters
  uint64_t word;   // the slice's first word in the planes (its flat index / 64)
  uint32_t count;  // elements, at most kSliceElements
  uint32_t aligned;  // every pointer of the slice is 16-byte aligned (vector access)
};

// A piece of one tensor for Lion's whole step in one pass (lion_local_slices): its gradient, momentum
// and parameters, at most kSliceElements long.
struct LocalSlice {
  const void* g;
  void* m;
  void* x;
  uint32_t count;    // elements, at most kSliceElements
  uint32_t aligned;  // g, m and x all 16-byte aligned (vector access)
};

// slices: a DEVICE array. pos/neg (neg may be null) receive the votes at each slice's words; the
// words a slice covers are written whole (bits past its last element zero).
cudaError_t lion_vote_slices(const TensorSlice* slices, size_t nslices, DType dtype, double beta1, double beta2,
                             uint64_t* pos, uint64_t* neg, cudaStream_t stream);
// x ← x·(1 − lr·wd) − lr·Δ for every slice, Δ from the result planes (as apply_vote / apply_mean;
// count plane p starts at count + p * plane_words).
cudaError_t apply_vote_slices(const TensorSlice* slices, size_t nslices, DType dtype, const uint64_t* pos,
                              const uint64_t* tie, double lr, double wd, cudaStream_t stream);
cudaError_t apply_mean_slices(const TensorSlice* slices, size_t nslices, DType dtype, const uint64_t* count,
                              int planes, size_t plane_words, int scale, int64_t offset, int64_t nranks, double lr,
                              double wd, cudaStream_t stream);

// Lion's whole step where the vote is this rank's own (a world of one, or G-Lion's step on averaged
// gradients): one pass reads g, m and x and writes m and x, with no planes between. The same bits as
// lion_vote_slices, the vote of one rank and apply_vote_slices: Δ = +1 where c > 0, −1 where c < 0;
// where c is 0 or NaN, 0 with ternary votes (the rank abstains, a tie) and −1 with binary ones (its 0
// bit votes −1). With one rank the mean of the votes is the vote, so this serves mode "mean" too.
cudaError_t lion_local_slices(const LocalSlice* slices, size_t nslices, DType dtype, double beta1, double beta2,
                              bool ternary, double lr, double wd, cudaStream_t stream);

// The elements of the slices that have neither their +1 (pos) nor their −1 (neg) bit set (elements that
// must abstain), as plane indices (word·64 + bit). How many there are in all is added to *count (a device
// word the caller zeroed); the list holds the first `capacity` places, and is complete when *count <=
// capacity. Slice s's elements, ascending, are list[runs[2s]] … list[runs[2s] + runs[2s + 1] − 1] (those
// places below capacity); the slices' runs lie in no particular order, so reading the runs in slice order
// gives the elements in slice order (ascending, for slices in ascending order of their words).
cudaError_t list_abstentions_slices(const TensorSlice* slices, size_t nslices, const uint64_t* pos,
                                    const uint64_t* neg, uint32_t* list, uint32_t capacity, uint32_t* count,
                                    uint32_t* runs, cudaStream_t stream);
// Binary votes (pos; a 0 bit votes −1) rewritten as ternary planes inside the slices' elements:
// neg = ~pos there. Words outside every slice are left alone (the caller zeroed both planes there).
cudaError_t binary_as_ternary_slices(const TensorSlice* slices, size_t nslices, uint64_t* pos, uint64_t* neg,
                                     cudaStream_t stream);

}  // namespace pride::bits::cuda
