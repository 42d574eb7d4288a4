// Internal: the table of kernel entry points that each ISA translation unit fills and dispatch.cc
// selects from. Element kernels are indexed by DType; a null entry means the dtype is not accepted
// by that kernel (dispatch.cc turns it into std::invalid_argument).
#pragma once

#include <cstddef>
#include <cstdint>

#include "collectives/bits/kernels.h"
#include "collectives/bits/lion_cub.h"

// Before a loop whose iterations touch memory independently (the compiler cannot prove that buffers
// passed as separate pointers never overlap): GCC's ivdep. Clang has no mere hint of the kind (its
// assume_safety forces vectorization and warns on the loops it cannot do), so there it is nothing.
#if defined(__clang__)
#define PRIDE_LOOP_IVDEP
#else
#define PRIDE_LOOP_IVDEP _Pragma("GCC ivdep")
#endif

namespace pride::bits::detail {

constexpr int kNumDTypes = 4;
constexpr int kMaxPlanes = 32;  // counters wider than this would hold more than 2^32 - 1 votes

// Arguments of the mean kernels, resolved once by the dispatcher: s = scale * u - offset, y = s / nranks.
struct MeanParams {
  int scale;
  int64_t offset;
  float nranks;
};

// Arguments of the fused update: x1 = round(x * factor), x2 = round(x1 - lr * delta).
struct ApplyParams {
  float factor;  // float(1.0 - lr * wd), computed in double
  float lr;
};

// Lion's coefficients as float32, each computed in double like torch's python-scalar arguments.
struct LionParams {
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
};

using PackBinaryFn = void (*)(const void* x, size_t n, uint64_t* plane);
using PackTernaryFn = void (*)(const void* x, size_t n, uint64_t* pos, uint64_t* neg);
using UnpackVoteFn = void (*)(const uint64_t* pos, const uint64_t* tie, size_t n, void* y, OutputStores stores);
using UnpackMeanFn = void (*)(const uint64_t* count, int planes, size_t n, const MeanParams& p, void* y);
using ApplyVoteFn = void (*)(void* x, size_t n, const uint64_t* pos, const uint64_t* tie, const ApplyParams& p);
using LionVoteFn = void (*)(const void* g, void* m, size_t n, const LionParams& p, uint64_t* pos, uint64_t* neg);
using ApplyMeanFn = void (*)(void* x, size_t n, const uint64_t* count, int planes, const MeanParams& m,
                             const ApplyParams& p);

// The 1-bit compression of 1-bit Adam and 0/1 Adam (onebit.h has their contracts).
struct OnebitKernels {
  double (*add_error_and_square_sum)(float* x, const float* error, size_t n);
  double (*square_sum)(const float* y, size_t n);
  void (*compress_signs)(const float* y, float scale, size_t n, uint64_t* signs, float* error);
  void (*average_signs)(const uint64_t* const* signs, const float* scales, int count, size_t n, float* out);
  void (*expand_signs)(const uint64_t* signs, float scale, size_t n, float* out);
};

// 1-bit Adam's and 0/1 Adam's fused frozen-variance steps (compressed_adam.h), their scalars as float32
// the way torch casts the optimizers' python floats.
struct AdamLocalParams {
  float weight;                 // 1 − β1, lerp's weight
  float decay_factor;           // 1 − lr·λ
  float eps;
  float neg_step_size;          // −step size, addcdiv's value
  float bias_correction2_sqrt;  // sqrt(1 − β2^t_v)
  bool decay;                   // λ ≠ 0 (torch skips the multiplication otherwise)
  bool bias_corrected;
};
struct AdamSyncParams {
  float eps;
  float neg_lr_sum;  // −Σlr
  bool mask_zero_variance;
  bool set_momentum;  // Σlr > 0
};
struct AdamApplyParams {
  float decay_factor, eps, neg_step_size, bias_correction2_sqrt;
  bool decay, bias_corrected, mask_zero_variance;
};
using AdamLocalStepFn = void (*)(void* p, const void* g, float* m, const float* v, float* acc, size_t n,
                                 const AdamLocalParams& a, float* scaled);
using AdamSyncFn = void (*)(const float* mean, const float* v, float* m, float* anchor, float* acc, void* p, size_t n,
                            const AdamSyncParams& s);

struct KernelTable {
  Isa isa;
  PackBinaryFn pack_binary[kNumDTypes];
  PackTernaryFn pack_ternary[kNumDTypes];
  UnpackVoteFn unpack_vote[kNumDTypes];
  UnpackMeanFn unpack_mean[kNumDTypes];
  ApplyVoteFn apply_vote[kNumDTypes];
  ApplyMeanFn apply_mean[kNumDTypes];
  LionVoteFn lion_vote[kNumDTypes];
  void (*counter_add_plane)(uint64_t* counter, int planes, size_t nwords, const uint64_t* plane);
  void (*counter_add)(uint64_t* acc, int acc_planes, const uint64_t* other, int other_planes, size_t nwords);
  void (*count_planes)(const uint64_t* const* planes, int nplanes, size_t nwords, uint64_t* counter,
                       int counter_planes);
  void (*counter_signed_offset)(const uint64_t* pos, const uint64_t* neg, int planes, size_t nwords,
                                uint64_t offset, uint64_t* out, int out_planes, size_t out_stride);
  void (*vote_from_count)(const uint64_t* count, int planes, size_t nwords, uint64_t half, bool even,
                          uint64_t* pos, uint64_t* tie);
  void (*vote_from_counts)(const uint64_t* pos_count, const uint64_t* neg_count, int planes, size_t nwords,
                           uint64_t* pos, uint64_t* tie);
  size_t (*popcount)(const uint64_t* plane, size_t n);
  size_t (*count_equal)(const uint64_t* a, const uint64_t* b, size_t n);
  OnebitKernels onebit;
  AdamLocalStepFn adam_local_step[kNumDTypes];
  AdamSyncFn adam_sync[kNumDTypes];
  void (*adam_momentum[kNumDTypes])(const void* g, float* m, float* out, size_t n, float weight);
  void (*adam_apply[kNumDTypes])(const float* mean, const float* v, float* m, void* p, size_t n,
                                 const AdamApplyParams& a);
  // The level vote's planes (levels.h): `planes` = level_planes(max_level).
  void (*pack_levels)(const int8_t* q, size_t n, int max_level, int planes, uint64_t* out);
  // Lion Cub's fused passes (lion_cub.h).
  InterpolationStats (*lion_cub_interpolate[kNumDTypes])(const void* g, void* m, size_t n, const LionParams& p,
                                                         float* c);
  void (*lion_cub_levels)(const float* c, size_t n, float scale, int max_level, int8_t* q);
  void (*lion_cub_apply_sign[kNumDTypes])(void* x, size_t n, const int8_t* total, const ApplyParams& a);
};

const KernelTable& portable_table();
const KernelTable& active_table();  // the table of the ISA the kernels dispatch to now
const KernelTable& avx2_table();  // only defined on x86-64 builds; call only when the CPU has AVX2

}  // namespace pride::bits::detail
