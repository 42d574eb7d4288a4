// The bit kernels of kernels.h on the GPU, for device tensors: same layout (element j is bit j % 64 of
// word j / 64), same semantics, and the same bits as the CPU kernels for every input, ±0, NaN and inf
// included (the element conversions are element_traits.h itself, compiled for the device; float32
// arithmetic is done without contraction into FMA, as on the CPU).
//
// Every function launches asynchronously on `stream` and returns the launch status; pointers are
// device pointers unless the comment says otherwise. Vectorised 16-byte loads and stores where a
// buffer is 16-byte aligned, grid-stride loops, no atomics.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "collectives/bits/compressed_adam.h"
#include "collectives/bits/count_coding.h"
#include "collectives/bits/kernels.h"

namespace pride::bits::cuda {

// ---- Pack -------------------------------------------------------------------------------------
// plane[words_for(n)]: bit j = (x[j] > 0); bits past n are zero. float32/bf16/fp16 input.
cudaError_t pack_binary(const void* x, DType dtype, size_t n, uint64_t* plane, cudaStream_t stream);
// pos: x > 0, neg: x < 0 (±0 and NaN abstain).
cudaError_t pack_ternary(const void* x, DType dtype, size_t n, uint64_t* pos, uint64_t* neg, cudaStream_t stream);

// ---- Levels: small signed integers as bit planes (as bits/levels.h) ----------------------------------
// q (int8, n values) as the level_planes(max_level) planes of u = q + max_level, plane p at
// out + p·words_for(n), bits past n zero; and, in the same pass, *out_of_range (a device word) = 1 if
// some q lies outside [−max_level, max_level], else 0 (the planes are then meaningless).
// max_level in [1, 127], else cudaErrorInvalidValue.
cudaError_t pack_levels(const int8_t* q, size_t n, int max_level, uint64_t* out, uint32_t* out_of_range,
                        cudaStream_t stream);

// ---- Bit-sliced counters: the owner's count -----------------------------------------------------
// counter = the sum of nplanes vote planes (planes: a HOST array of nplanes device pointers, at most
// kMaxCountPlanes), as counter_planes >= planes_for(nplanes) planes of nwords words, plane-major.
constexpr int kMaxCountPlanes = 256;
cudaError_t count_planes(const uint64_t* const* planes, int nplanes, size_t nwords, uint64_t* counter,
                         int counter_planes, cudaStream_t stream);

// ---- Thresholds (as kernels.h) ----------------------------------------------------------------------
cudaError_t vote_from_count(const uint64_t* count, int planes, size_t nwords, int64_t nvotes, uint64_t* pos,
                            uint64_t* tie, cudaStream_t stream);
cudaError_t vote_from_counts(const uint64_t* pos_count, const uint64_t* neg_count, int planes, size_t nwords,
                             uint64_t* pos, uint64_t* tie, cudaStream_t stream);
// Output plane p at out + p * out_stride (0: nwords), as bits::counter_signed_offset.
cudaError_t counter_signed_offset(const uint64_t* pos, const uint64_t* neg, int planes, size_t nwords, int64_t offset,
                                  uint64_t* out, int out_planes, size_t out_stride, cudaStream_t stream);

// ---- Unpack --------------------------------------------------------------------------------------
// y[j] = +1 where pos, else 0 where tie (tie may be null), else -1. float32/bf16/fp16/int8 output.
cudaError_t unpack_vote(const uint64_t* pos, const uint64_t* tie, size_t n, void* y, DType dtype,
                        cudaStream_t stream);
// y[j] = float32(scale*u - offset) / float32(nranks) cast to dtype, u the count of element j.
cudaError_t unpack_mean(const uint64_t* count, int planes, size_t n, int scale, int64_t offset, int64_t nranks,
                        void* y, DType dtype, cudaStream_t stream);

// ---- Vote results as trits, five to a byte (trit_coding.h; as bits/trits.h) ------------------------
cudaError_t encode_trits(const uint64_t* pos, const uint64_t* tie, size_t nwords, uint8_t* out, cudaStream_t stream);
cudaError_t decode_trits(const uint8_t* in, size_t nwords, uint64_t* pos, uint64_t* tie, cudaStream_t stream);

// ---- Mean results as counts packed in base B (count_coding.h; as bits/packed_counts.h) ------------
// code.planes planes, `stride` words apart, nwords words each. A code that counts::make_code did not
// make: cudaErrorInvalidValue.
cudaError_t encode_counts(const counts::CountCode& code, const uint64_t* planes, size_t stride, size_t nwords,
                          uint32_t* out, cudaStream_t stream);
cudaError_t decode_counts(const counts::CountCode& code, const uint32_t* in, size_t nwords, uint64_t* planes,
                          size_t stride, cudaStream_t stream);

// ---- Re-voting a few elements (as engine/sign/sparse_abstentions.h's votes_at and apply_revote_patch) --
// `at`: m element indices, ascending, without repeats. out: the +1 bits at them, then the −1 bits, each
// words_for(m) words (bit k is element at[k]).
cudaError_t gather_vote_bits(const uint64_t* pos, const uint64_t* neg, const uint32_t* at, size_t m, uint64_t* out,
                             cudaStream_t stream);
// For each of nplanes planes (plane_words words apart): the bit of element at[k] ← bit k of that plane's
// words_for(m) words of `values` (plane-major); every other bit is left as it is.
cudaError_t scatter_plane_bits(uint64_t* planes, int nplanes, size_t plane_words, const uint32_t* at, size_t m,
                               const uint64_t* values, cudaStream_t stream);

// ---- Fused apply of the update (Distributed Lion), as kernels.h ----------------------------------
cudaError_t apply_vote(void* x, DType dtype, size_t n, const uint64_t* pos, const uint64_t* tie, double lr,
                       double wd, cudaStream_t stream);
cudaError_t apply_mean(void* x, DType dtype, size_t n, const uint64_t* count, int planes, int scale, int64_t offset,
                       int64_t nranks, double lr, double wd, cudaStream_t stream);

// ---- Lion's local step fused with packing its vote, as kernels.h ----------------------------------
cudaError_t lion_vote(const void* g, void* m, DType dtype, size_t n, double beta1, double beta2, uint64_t* pos,
                      uint64_t* neg, cudaStream_t stream);

// ---- The 1-bit compression of 1-bit Adam and 0/1 Adam, as bits/onebit.h ---------------------------
// Signs (+1 for y ≥ 0, −0 and NaN), errors, averages and expansions are the CPU kernels' bits. Sums of
// squares are double, in an order of their own: each thread's grid-stride elements in order, the
// block's threads pairwise, the blocks in order. The same on every run on a given GPU, but not the
// CPU's eight lanes, so a scale may differ from a CPU rank's in its last bit (which is harmless: each
// chunk's result is still decided once, by its owner, for every rank).
constexpr int kSquareSumBlocks = 1024;
// x = x + error (error null: x as it is); then *sum = Σ x² (both device). partials: kSquareSumBlocks
// doubles of device scratch.
cudaError_t add_error_and_square_sum(float* x, const float* error, size_t n, double* partials, double* sum,
                                     cudaStream_t stream);
// signs[words_for(n)] of y and error = y − scale·sign(y).
cudaError_t compress_signs(const float* y, float scale, size_t n, uint64_t* signs, float* error, cudaStream_t stream);
// out = (Σ_i ±scales[i]) / count in double, rounded once. signs: a HOST array of `count` (at most
// kMaxCountPlanes) device pointers; scales: a HOST array.
cudaError_t average_signs(const uint64_t* const* signs, const float* scales, int count, size_t n, float* out,
                          cudaStream_t stream);
// out = ±scale from the sign bits.
cudaError_t expand_signs(const uint64_t* signs, float scale, size_t n, float* out, cudaStream_t stream);

// ---- 1-bit Adam's and 0/1 Adam's fused steps, as bits/compressed_adam.h ---------------------------
// The CPU kernels' arithmetic (compressed_adam_elements.h), so the same bits. float32/bf16/fp16 p and g
// (g may be null), float32 state; one launch per call.
cudaError_t zero_one_adam_local_step(void* p, const void* g, DType dtype, float* m, const float* v, float* acc,
                                     size_t n, const AdamLocalStep& step, float* scaled, cudaStream_t stream);
cudaError_t zero_one_adam_sync(const float* mean, const float* v, float* m, float* anchor, float* acc, void* p,
                               DType dtype, size_t n, const AdamSync& sync, cudaStream_t stream);
cudaError_t onebit_adam_momentum(const void* g, DType dtype, float* m, size_t n, double beta1, float* out,
                                 cudaStream_t stream);
cudaError_t onebit_adam_apply(const float* mean, const float* v, float* m, void* p, DType dtype, size_t n,
                              const AdamApply& apply, cudaStream_t stream);

}  // namespace pride::bits::cuda
