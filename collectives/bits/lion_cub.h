// Lion Cub's quantized step on the CPU (Ishikawa et al., arXiv 2411.16462; pride.optim.DistributedLion
// with aggregation="int8" or "levels"), fused: the torch operations it replaces made about ten passes over
// each parameter, these make three.
//
//   1. lion_cub_interpolate: c = β1·m + (1−β1)·g and m ← β2·m + (1−β2)·g with lion_vote's arithmetic
//      (lion_impl.h: one rounding to the dtype per operation), c widened to float32 with NaN made 0
//      (it abstains), and in the same pass Σ|c| (in double) and max|c|: the "l1" and "linf" scales.
//   2. lion_cub_signs / lion_cub_levels: q = sign(c), or q = clamp(round(c / scale · s/2), −s, s) in
//      float32, one rounding per operation and round half to even, as torch's
//      div(c, scale).mul_(s / 2).round_().clamp_(−s, s) computes it; NaN (c = ±inf over an infinite
//      scale) sends 0.
//   3. lion_cub_apply_sign: from the ranks' int8 sums (or their signs), x ← x·(1 − lr·λ) − lr·sign(Σq),
//      the rounding of apply_vote (kernels.h), so replicas stay bitwise identical.
//
// float32 and bfloat16 only: float16's exact conversions (element_traits.h) have branches that keep these
// loops scalar, several times slower than torch's vectorized operations, which float16 parameters keep.
//
// Σ|c| goes into eight partial sums, element k into partial k % 8 in increasing k, combined pairwise: a
// fixed order, so both ISAs give the same scale (and, in double, a mean within an ulp of float64's).
#pragma once

#include <cstddef>
#include <cstdint>

#include "collectives/bits/kernels.h"

namespace pride::bits {

struct InterpolationStats {
  double abs_sum = 0.0;  // Σ|c| in double, in the fixed order above
  float abs_max = 0.0f;  // max|c| (inf if any c is infinite)
};

// Pass 1 over n elements of g and m (dtype float32 or bfloat16; invalid_argument otherwise); c: n float32
// values.
InterpolationStats lion_cub_interpolate(const void* g, void* m, DType dtype, size_t n, double beta1, double beta2,
                                        float* c);

// Pass 2: q = sign(c) ∈ {−1, 0, +1}.
void lion_cub_signs(const float* c, size_t n, int8_t* q);
// Pass 2: q = clamp(round(c / scale · max_level/2), −max_level, max_level). scale > 0 (inf allowed),
// max_level in [1, 127]; invalid_argument otherwise.
void lion_cub_levels(const float* c, size_t n, float scale, int max_level, int8_t* q);

// Pass 3: x ← round(round(x·(1 − lr·λ)) − lr·sign(total[k])), x of dtype float32 or bfloat16.
void lion_cub_apply_sign(void* x, DType dtype, size_t n, const int8_t* total, double lr, double wd);

}  // namespace pride::bits
