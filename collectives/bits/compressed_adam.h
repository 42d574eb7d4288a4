// 1-bit Adam's and 0/1 Adam's steps after the variance froze (Tang et al. 2021, Lu et al. 2023;
// pride.optim.OneBitAdam and ZeroOneAdam), fused: one pass over each parameter for each half of a step
// instead of the five to ten torch operations (and their temporaries) of the unfused step. Parameters
// and gradients in float32, bfloat16 or float16; the momentum m, the frozen variance v, 0/1 Adam's
// accumulated step acc and its anchor (the parameters at the last synchronisation) in float32. Every
// element is computed in float32, rounded as torch's CPU kernels round the optimizers' torch code
// (compressed_adam_impl.h lists the operations), with a correctly rounded square root.
//
// The Adam update below is  p' = round(p·(1 − lr·λ) − s·m / d),  d = sqrt(v) / sqrt(1 − β2^t_v) + eps
// with bias correction (s = lr / (1 − β1^t)), d = sqrt(v) + eps and s = lr without.
//
// 0/1 Adam, a local step:
//
//   m ← lerp(m, g, 1 − β1);   p ← p';   acc ← acc + (p' − p)
//
// A synchronisation step adds to that: the accumulated step in momentum units, acc·(sqrt(v) + eps),
// goes to `scaled` (the compressed allreduce's input) instead of back to acc. Once the allreduce has
// turned it into the ranks' mean u:
//
//   u ← u·[v > 0]            (mask_zero_variance)
//   m ← u / (−Σlr)           (when Σlr > 0)
//   anchor ← anchor + u / (sqrt(v) + eps);  p ← round(anchor);  acc ← 0
//
// 1-bit Adam, a compressed step: m ← lerp(m, g, 1 − β1) also written to `out` (the allreduce's input);
// then from the ranks' mean u:  m ← u·[v > 0] (mask_zero_variance);  p ← p'.
#pragma once

#include <cstddef>

#include "collectives/bits/kernels.h"

namespace pride::bits {

struct AdamLocalStep {
  double lr = 1e-3;
  double beta1 = 0.9;
  double eps = 1e-8;
  double weight_decay = 0.0;
  double step_size = 1e-3;                // lr, or lr / (1 − β1^t) with bias correction
  double bias_correction2_sqrt = 1.0;     // sqrt(1 − β2^t_v); 1 without bias correction
  bool bias_correction = false;
};

// One local step over n elements. `g` may be null (no gradient: g = 0). `scaled` null: acc is updated;
// otherwise this is a synchronisation step and acc·(sqrt(v) + eps) is written to `scaled` (acc itself
// is then left for adam_sync to clear). Throws std::invalid_argument for an int8 dtype.
void zero_one_adam_local_step(void* p, const void* g, DType dtype, float* m, const float* v, float* acc, size_t n,
                              const AdamLocalStep& step, float* scaled);

struct AdamSync {
  double eps = 1e-8;
  double lr_sum = 0.0;                    // Σ lr since the last synchronisation; m is kept when it is 0
  bool mask_zero_variance = true;
};

// The synchronisation's second half, from the compressed allreduce's result `mean` (n floats).
void zero_one_adam_sync(const float* mean, const float* v, float* m, float* anchor, float* acc, void* p, DType dtype,
                        size_t n, const AdamSync& sync);

// 1-bit Adam's first half over n elements: the momentum, also written to `out`. `g` may be null (g = 0).
void onebit_adam_momentum(const void* g, DType dtype, float* m, size_t n, double beta1, float* out);

struct AdamApply {
  double lr = 1e-3;
  double eps = 1e-8;
  double weight_decay = 0.0;
  double step_size = 1e-3;
  double bias_correction2_sqrt = 1.0;
  bool bias_correction = false;
  bool mask_zero_variance = true;
};

// 1-bit Adam's second half, from the compressed allreduce's result `mean` (n floats).
void onebit_adam_apply(const float* mean, const float* v, float* m, void* p, DType dtype, size_t n,
                       const AdamApply& apply);

}  // namespace pride::bits
