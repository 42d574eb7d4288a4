// 1-bit Adam's and 0/1 Adam's steps after the variance froze, fused into one pass each
// (compressed_adam.h has the contract): the CPU loops around compressed_adam_elements.h, compiled by
// each ISA translation unit. Every operation is the float32 operation torch's CPU kernels perform for
// the optimizers' torch code, in the same order:
//
//   m.lerp_(g, w)              torch: fma(w, g − m, m) for w < 0.5, else fma(w − 1, g − m, g)
//   p.mul_(factor)             p·factor, skipped when the weight decay is 0
//   denom = sqrt(v) [/ bc2] + eps
//   p.addcdiv_(m, denom, −s)   p + ((−s)·m) / denom
//   acc.add_(p' − p)           acc + (p' − p), p' the stored parameter widened again
//   t.mul_(v > 0)              t·1 or t·0
//
// except the square root, which is correctly rounded here (as CUDA's) and is not in torch's CPU kernels
// (MKL's vector math).
//
// The AVX2 unit is compiled with FMA instructions and the library with -ffp-contract=off: std::fma
// is the only fused multiply-add, and it rounds once on every ISA (the portable unit calls fmaf).
//
// Each loop has one variant per combination of the per-call switches, takes its tensors as restrict
// parameters and tells GCC they never overlap (ivdep: restrict alone, once the element functions are
// inlined, still left runtime overlap checks that sent the loops down their scalar path), and copies
// its scalars out of the parameter struct first: a branch, a possible alias or a scalar that every
// store could change would each keep it from vectorizing.
#pragma once

#include <cstddef>

#include "collectives/bits/compressed_adam_elements.h"
#include "collectives/bits/kernel_table.h"

namespace pride::bits::detail::PRIDE_KERNEL_NS {

// ---- 0/1 Adam -----------------------------------------------------------------------------------

template <class Tr, bool kHasGrad, bool kDecay, bool kBiasCorrected, bool kSync>
void zero_one_local_elements(typename Tr::T* __restrict__ p, const typename Tr::T* __restrict__ g,
                             float* __restrict__ m, const float* __restrict__ v, float* __restrict__ acc, size_t n,
                             const AdamLocalParams& a, float* __restrict__ scaled) {
  const Lerp lerp(a.weight);
  const AdamMove<kDecay, kBiasCorrected> move{a.decay_factor, a.eps, a.neg_step_size, a.bias_correction2_sqrt};
  const float eps = a.eps;
PRIDE_LOOP_IVDEP
  for (size_t i = 0; i < n; ++i) {
    zero_one_local_element<Tr, kHasGrad, kDecay, kBiasCorrected, kSync>(p, g, m, v, acc, scaled, i, lerp, move, eps);
  }
}

template <class Tr, bool kHasGrad, bool kDecay, bool kBiasCorrected>
void zero_one_local_sync(void* p, const void* g, float* m, const float* v, float* acc, size_t n,
                         const AdamLocalParams& a, float* scaled) {
  auto* pt = static_cast<typename Tr::T*>(p);
  const auto* gt = static_cast<const typename Tr::T*>(g);
  if (scaled != nullptr) {
    zero_one_local_elements<Tr, kHasGrad, kDecay, kBiasCorrected, true>(pt, gt, m, v, acc, n, a, scaled);
  } else {
    zero_one_local_elements<Tr, kHasGrad, kDecay, kBiasCorrected, false>(pt, gt, m, v, acc, n, a, scaled);
  }
}

template <class Tr, bool kHasGrad, bool kDecay>
void zero_one_local_bias(void* p, const void* g, float* m, const float* v, float* acc, size_t n,
                         const AdamLocalParams& a, float* scaled) {
  if (a.bias_corrected) {
    zero_one_local_sync<Tr, kHasGrad, kDecay, true>(p, g, m, v, acc, n, a, scaled);
  } else {
    zero_one_local_sync<Tr, kHasGrad, kDecay, false>(p, g, m, v, acc, n, a, scaled);
  }
}

template <class Tr, bool kHasGrad>
void zero_one_local_decay(void* p, const void* g, float* m, const float* v, float* acc, size_t n,
                          const AdamLocalParams& a, float* scaled) {
  if (a.decay) {
    zero_one_local_bias<Tr, kHasGrad, true>(p, g, m, v, acc, n, a, scaled);
  } else {
    zero_one_local_bias<Tr, kHasGrad, false>(p, g, m, v, acc, n, a, scaled);
  }
}

template <class Tr>
void adam_local_step(void* p, const void* g, float* m, const float* v, float* acc, size_t n, const AdamLocalParams& a,
                     float* scaled) {
  if (g != nullptr) {
    zero_one_local_decay<Tr, true>(p, g, m, v, acc, n, a, scaled);
  } else {
    zero_one_local_decay<Tr, false>(p, g, m, v, acc, n, a, scaled);
  }
}

template <class Tr, bool kMask, bool kSetMomentum>
void zero_one_sync_elements(const float* __restrict__ mean, const float* __restrict__ v, float* __restrict__ m,
                            float* __restrict__ anchor, float* __restrict__ acc, typename Tr::T* __restrict__ p,
                            size_t n, const AdamSyncParams& s) {
  const float eps = s.eps, neg_lr_sum = s.neg_lr_sum;
PRIDE_LOOP_IVDEP
  for (size_t i = 0; i < n; ++i) {
    zero_one_sync_element<Tr, kMask, kSetMomentum>(mean, v, m, anchor, acc, p, i, eps, neg_lr_sum);
  }
}

template <class Tr>
void adam_sync(const float* mean, const float* v, float* m, float* anchor, float* acc, void* p, size_t n,
               const AdamSyncParams& s) {
  auto* pt = static_cast<typename Tr::T*>(p);
  if (s.mask_zero_variance) {
    if (s.set_momentum) zero_one_sync_elements<Tr, true, true>(mean, v, m, anchor, acc, pt, n, s);
    else zero_one_sync_elements<Tr, true, false>(mean, v, m, anchor, acc, pt, n, s);
  } else {
    if (s.set_momentum) zero_one_sync_elements<Tr, false, true>(mean, v, m, anchor, acc, pt, n, s);
    else zero_one_sync_elements<Tr, false, false>(mean, v, m, anchor, acc, pt, n, s);
  }
}

// ---- 1-bit Adam ---------------------------------------------------------------------------------

template <class Tr, bool kHasGrad>
void onebit_momentum_elements(const typename Tr::T* __restrict__ g, float* __restrict__ m, float* __restrict__ out,
                              size_t n, float weight) {
  const Lerp lerp(weight);
PRIDE_LOOP_IVDEP
  for (size_t i = 0; i < n; ++i) onebit_momentum_element<Tr, kHasGrad>(g, m, out, i, lerp);
}

template <class Tr>
void adam_momentum(const void* g, float* m, float* out, size_t n, float weight) {
  const auto* gt = static_cast<const typename Tr::T*>(g);
  if (g != nullptr) onebit_momentum_elements<Tr, true>(gt, m, out, n, weight);
  else onebit_momentum_elements<Tr, false>(gt, m, out, n, weight);
}

template <class Tr, bool kMask, bool kDecay, bool kBiasCorrected>
void onebit_apply_elements(const float* __restrict__ mean, const float* __restrict__ v, float* __restrict__ m,
                           typename Tr::T* __restrict__ p, size_t n, const AdamApplyParams& a) {
  const AdamMove<kDecay, kBiasCorrected> move{a.decay_factor, a.eps, a.neg_step_size, a.bias_correction2_sqrt};
PRIDE_LOOP_IVDEP
  for (size_t i = 0; i < n; ++i) onebit_apply_element<Tr, kMask, kDecay, kBiasCorrected>(mean, v, m, p, i, move);
}

template <class Tr, bool kMask, bool kDecay>
void onebit_apply_bias(const float* mean, const float* v, float* m, typename Tr::T* p, size_t n,
                       const AdamApplyParams& a) {
  if (a.bias_corrected) onebit_apply_elements<Tr, kMask, kDecay, true>(mean, v, m, p, n, a);
  else onebit_apply_elements<Tr, kMask, kDecay, false>(mean, v, m, p, n, a);
}

template <class Tr, bool kMask>
void onebit_apply_decay(const float* mean, const float* v, float* m, typename Tr::T* p, size_t n,
                        const AdamApplyParams& a) {
  if (a.decay) onebit_apply_bias<Tr, kMask, true>(mean, v, m, p, n, a);
  else onebit_apply_bias<Tr, kMask, false>(mean, v, m, p, n, a);
}

template <class Tr>
void adam_apply(const float* mean, const float* v, float* m, void* p, size_t n, const AdamApplyParams& a) {
  auto* pt = static_cast<typename Tr::T*>(p);
  if (a.mask_zero_variance) onebit_apply_decay<Tr, true>(mean, v, m, pt, n, a);
  else onebit_apply_decay<Tr, false>(mean, v, m, pt, n, a);
}

}  // namespace pride::bits::detail::PRIDE_KERNEL_NS
