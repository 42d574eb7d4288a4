// The per-element arithmetic of 1-bit Adam's and 0/1 Adam's fused steps (compressed_adam.h), one
// source for the CPU loops (compressed_adam_impl.h) and the CUDA kernels
// (cuda/compressed_adam_kernels.cu), so that both give the same bits. Every operation is a float32
// operation rounded once: the fused multiply-add of torch's lerp, IEEE square root and division, and
// no other contraction (the CPU units build with -ffp-contract=off; on the GPU every operation is an
// explicitly rounded intrinsic, so no nvcc flag can fuse two).
//
// Included only from an ISA translation unit or a CUDA one, which defines PRIDE_KERNEL_NS first
// (element_traits.h says why).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "collectives/bits/element_traits.h"
#include "collectives/bits/kernel_table.h"

namespace pride::bits::detail::PRIDE_KERNEL_NS {

// One rounding each, on the GPU whatever nvcc's contraction flags (the intrinsics are never fused).
PRIDE_HD inline float add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

PRIDE_HD inline float subtract(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

PRIDE_HD inline float multiply(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

PRIDE_HD inline float fused_multiply_add(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

PRIDE_HD inline float square_root(float x) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(x);
#else
  return std::sqrt(x);
#endif
}

PRIDE_HD inline float divide(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// torch's lerp for a weight shared by every element (ATen's lerp_vec / lerp): with |w| < 0.5,
// fma(w, to − from, from); otherwise fma(w − 1, to − from, to). The choice and the coefficient are the
// loop's constants.
struct Lerp {
  float coefficient;
  bool from_start;
  PRIDE_HD explicit Lerp(float weight)
      : coefficient(weight > -0.5f && weight < 0.5f ? weight : subtract(weight, 1.0f)),
        from_start(weight > -0.5f && weight < 0.5f) {}
  PRIDE_HD float operator()(float from, float to) const {
    return fused_multiply_add(coefficient, subtract(to, from), from_start ? from : to);
  }
};

// The Adam update of one parameter element from its momentum m: decay, then p + (−s·m) / denom.
template <bool kDecay, bool kBiasCorrected>
struct AdamMove {
  float decay_factor, eps, neg_step_size, bias_correction2_sqrt;
  PRIDE_HD float operator()(float p, float m, float root) const {
    const float decayed = kDecay ? multiply(p, decay_factor) : p;
    const float denom = add(kBiasCorrected ? divide(root, bias_correction2_sqrt) : root, eps);
    return add(decayed, divide(multiply(neg_step_size, m), denom));
  }
};

// torch's t.mul_(v > 0): × 1.0 or × 0.0 (a negative value becomes −0). The factor is built from bits
// so that a CPU compiler multiplies in every lane rather than branching.
PRIDE_HD inline float keep_where_variance(float x, float v) {
  return multiply(x, f32_from_bits((0u - static_cast<uint32_t>(v > 0.0f)) & 0x3F800000u));
}

// 0/1 Adam's local step of element i; with kSync the accumulated step in momentum units goes to
// scaled[i] and acc[i] is left as it was.
template <class Tr, bool kHasGrad, bool kDecay, bool kBiasCorrected, bool kSync>
PRIDE_HD inline void zero_one_local_element(typename Tr::T* __restrict__ p, const typename Tr::T* __restrict__ g,
                                            float* __restrict__ m, const float* __restrict__ v,
                                            float* __restrict__ acc, float* __restrict__ scaled, size_t i,
                                            const Lerp& lerp,
                                            const AdamMove<kDecay, kBiasCorrected>& move, float eps) {
  const float mi = lerp(m[i], kHasGrad ? Tr::to_f32(g[i]) : 0.0f);
  m[i] = mi;
  const float before = Tr::to_f32(p[i]);
  const float root = square_root(v[i]);
  const typename Tr::T stored = Tr::from_f32(move(before, mi, root));
  p[i] = stored;
  const float total = add(acc[i], subtract(Tr::to_f32(stored), before));
  if (kSync) {
    scaled[i] = multiply(total, add(root, eps));  // momentum units: × (sqrt(v) + eps), no bias correction
  } else {
    acc[i] = total;
  }
}

// 0/1 Adam's synchronisation of element i from the ranks' mean.
template <class Tr, bool kMask, bool kSetMomentum>
PRIDE_HD inline void zero_one_sync_element(const float* __restrict__ mean, const float* __restrict__ v,
                                           float* __restrict__ m, float* __restrict__ anchor, float* __restrict__ acc,
                                           typename Tr::T* __restrict__ p, size_t i, float eps, float neg_lr_sum) {
  const float x = kMask ? keep_where_variance(mean[i], v[i]) : mean[i];
  if (kSetMomentum) m[i] = divide(x, neg_lr_sum);
  const float a = add(anchor[i], divide(x, add(square_root(v[i]), eps)));
  anchor[i] = a;
  p[i] = Tr::from_f32(a);
  acc[i] = 0.0f;
}

// 1-bit Adam's momentum of element i, also into out[i].
template <class Tr, bool kHasGrad>
PRIDE_HD inline void onebit_momentum_element(const typename Tr::T* __restrict__ g, float* __restrict__ m,
                                             float* __restrict__ out, size_t i, const Lerp& lerp) {
  const float mi = lerp(m[i], kHasGrad ? Tr::to_f32(g[i]) : 0.0f);
  m[i] = mi;
  out[i] = mi;
}

// 1-bit Adam's apply of element i from the ranks' mean.
template <class Tr, bool kMask, bool kDecay, bool kBiasCorrected>
PRIDE_HD inline void onebit_apply_element(const float* __restrict__ mean, const float* __restrict__ v,
                                          float* __restrict__ m, typename Tr::T* __restrict__ p, size_t i,
                                          const AdamMove<kDecay, kBiasCorrected>& move) {
  const float x = kMask ? keep_where_variance(mean[i], v[i]) : mean[i];
  m[i] = x;
  p[i] = Tr::from_f32(move(Tr::to_f32(p[i]), x, square_root(v[i])));
}

}  // namespace pride::bits::detail::PRIDE_KERNEL_NS
