// 0/1 Adam's frozen-variance steps fused into one pass each (compressed_adam.h has the contract).
// The loops are plain C++ compiled by each ISA translation unit; every operation is the float32
// operation torch's CPU kernels perform for the optimizer's torch code, in the same order, so the fused
// step and the torch one give the same bits:
//
//   m.lerp_(g, w)              torch: fma(w, g − m, m) for w < 0.5, else fma(w − 1, g − m, g)
//   p.mul_(factor)             p·factor, skipped when the weight decay is 0
//   denom = sqrt(v) [/ bc2] + eps
//   p.addcdiv_(m, denom, −s)   p + ((−s)·m) / denom
//   acc.add_(p' − p)           acc + (p' − p), p' the stored parameter widened again
//
// The AVX2 unit is compiled with FMA instructions and the library with -ffp-contract=off: std::fma
// is the only fused multiply-add, and it rounds once on every ISA (the portable unit calls fmaf).
#pragma once

#include <cmath>
#include <cstddef>

#include "collectives/bits/element_traits.h"
#include "collectives/bits/kernel_table.h"

namespace pride::bits::detail::PRIDE_KERNEL_NS {

// torch's lerp for a weight shared by every element (ATen's lerp_vec / lerp): with |w| < 0.5,
// fma(w, to − from, from); otherwise fma(w − 1, to − from, to). The choice and the coefficient are the
// loop's constants, so the element loop has no branch.
struct Lerp {
  float coefficient;
  bool from_start;
  explicit Lerp(float weight) : coefficient(std::fabs(weight) < 0.5f ? weight : weight - 1.0f),
                                from_start(std::fabs(weight) < 0.5f) {}
  float operator()(float from, float to) const { return std::fma(coefficient, to - from, from_start ? from : to); }
};

// One variant per combination of the per-call switches, so that the element loop has no branch and
// vectorizes.
// The tensors never overlap (restrict parameters), and the scalars are copied out of `a` first:
// otherwise every store could change them, and the loop would reload them instead of vectorizing.
template <class Tr, bool kHasGrad, bool kDecay, bool kBiasCorrected, bool kSync>
void adam_local_step_elements(typename Tr::T* __restrict__ p, const typename Tr::T* __restrict__ g,
                              float* __restrict__ m, const float* __restrict__ v, float* __restrict__ acc, size_t n,
                              const AdamLocalParams& a, float* __restrict__ scaled) {
  const Lerp lerp(a.weight);
  const float decay_factor = a.decay_factor, eps = a.eps, neg_step_size = a.neg_step_size;
  const float bias_correction2_sqrt = a.bias_correction2_sqrt;
  for (size_t i = 0; i < n; ++i) {
    const float gi = kHasGrad ? Tr::to_f32(g[i]) : 0.0f;
    const float mi = lerp(m[i], gi);
    m[i] = mi;
    const float before = Tr::to_f32(p[i]);
    const float decayed = kDecay ? before * decay_factor : before;
    const float root = std::sqrt(v[i]);
    const float denom = (kBiasCorrected ? root / bias_correction2_sqrt : root) + eps;
    const typename Tr::T stored = Tr::from_f32(decayed + (neg_step_size * mi) / denom);
    p[i] = stored;
    const float total = acc[i] + (Tr::to_f32(stored) - before);
    if (kSync) {
      scaled[i] = total * (root + eps);  // momentum units: × (sqrt(v) + eps), no bias correction
    } else {
      acc[i] = total;
    }
  }
}

template <class Tr, bool kHasGrad, bool kDecay, bool kBiasCorrected, bool kSync>
void adam_local_step_loop(void* p, const void* g, float* m, const float* v, float* acc, size_t n,
                          const AdamLocalParams& a, float* scaled) {
  adam_local_step_elements<Tr, kHasGrad, kDecay, kBiasCorrected, kSync>(
      static_cast<typename Tr::T*>(p), static_cast<const typename Tr::T*>(g), m, v, acc, n, a, scaled);
}

template <class Tr, bool kHasGrad, bool kDecay, bool kBiasCorrected>
void adam_local_step_sync(void* p, const void* g, float* m, const float* v, float* acc, size_t n,
                          const AdamLocalParams& a, float* scaled) {
  if (scaled != nullptr) {
    adam_local_step_loop<Tr, kHasGrad, kDecay, kBiasCorrected, true>(p, g, m, v, acc, n, a, scaled);
  } else {
    adam_local_step_loop<Tr, kHasGrad, kDecay, kBiasCorrected, false>(p, g, m, v, acc, n, a, scaled);
  }
}

template <class Tr, bool kHasGrad, bool kDecay>
void adam_local_step_bias(void* p, const void* g, float* m, const float* v, float* acc, size_t n,
                          const AdamLocalParams& a, float* scaled) {
  if (a.bias_corrected) {
    adam_local_step_sync<Tr, kHasGrad, kDecay, true>(p, g, m, v, acc, n, a, scaled);
  } else {
    adam_local_step_sync<Tr, kHasGrad, kDecay, false>(p, g, m, v, acc, n, a, scaled);
  }
}

template <class Tr, bool kHasGrad>
void adam_local_step_decay(void* p, const void* g, float* m, const float* v, float* acc, size_t n,
                           const AdamLocalParams& a, float* scaled) {
  if (a.decay) {
    adam_local_step_bias<Tr, kHasGrad, true>(p, g, m, v, acc, n, a, scaled);
  } else {
    adam_local_step_bias<Tr, kHasGrad, false>(p, g, m, v, acc, n, a, scaled);
  }
}

template <class Tr>
void adam_local_step(void* p, const void* g, float* m, const float* v, float* acc, size_t n, const AdamLocalParams& a,
                     float* scaled) {
  if (g != nullptr) {
    adam_local_step_decay<Tr, true>(p, g, m, v, acc, n, a, scaled);
  } else {
    adam_local_step_decay<Tr, false>(p, g, m, v, acc, n, a, scaled);
  }
}

template <class Tr, bool kMask, bool kSetMomentum>
void adam_sync_elements(const float* __restrict__ mean, const float* __restrict__ v, float* __restrict__ m,
                        float* __restrict__ anchor, float* __restrict__ acc, typename Tr::T* __restrict__ p, size_t n,
                        const AdamSyncParams& s) {
  const float eps = s.eps, neg_lr_sum = s.neg_lr_sum;
  for (size_t i = 0; i < n; ++i) {
    // torch's mul by the bool mask v > 0: × 1.0 or × 0.0 (a negative value becomes −0). The factor
    // is built from bits so that the compiler multiplies in every lane rather than branching.
    const float keep = f32_from_bits((0u - static_cast<uint32_t>(v[i] > 0.0f)) & 0x3F800000u);
    const float x = kMask ? mean[i] * keep : mean[i];
    if (kSetMomentum) m[i] = x / neg_lr_sum;
    const float a = anchor[i] + x / (std::sqrt(v[i]) + eps);
    anchor[i] = a;
    p[i] = Tr::from_f32(a);
    acc[i] = 0.0f;
  }
}

template <class Tr, bool kMask, bool kSetMomentum>
void adam_sync_loop(const float* mean, const float* v, float* m, float* anchor, float* acc, void* p, size_t n,
                    const AdamSyncParams& s) {
  adam_sync_elements<Tr, kMask, kSetMomentum>(mean, v, m, anchor, acc, static_cast<typename Tr::T*>(p), n, s);
}

template <class Tr>
void adam_sync(const float* mean, const float* v, float* m, float* anchor, float* acc, void* p, size_t n,
               const AdamSyncParams& s) {
  if (s.mask_zero_variance) {
    if (s.set_momentum) adam_sync_loop<Tr, true, true>(mean, v, m, anchor, acc, p, n, s);
    else adam_sync_loop<Tr, true, false>(mean, v, m, anchor, acc, p, n, s);
  } else {
    if (s.set_momentum) adam_sync_loop<Tr, false, true>(mean, v, m, anchor, acc, p, n, s);
    else adam_sync_loop<Tr, false, false>(mean, v, m, anchor, acc, p, n, s);
  }
}

}  // namespace pride::bits::detail::PRIDE_KERNEL_NS
