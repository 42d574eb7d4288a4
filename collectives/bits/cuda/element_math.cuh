// The float32 arithmetic of the element kernels on the device, spelled with the _rn intrinsics so that
// nothing is contracted into an FMA or approximated: each operation rounds exactly as the CPU's
// separate float32 operations do (elementwise_scalar.h, lion_impl.h).
#pragma once

#include "collectives/bits/cuda/device_elements.cuh"

namespace pride::bits::cuda::device {

// s = scale * u - offset; mean = float32(s) / float32(nranks), one correctly rounded division.
struct MeanArgs {
  int scale;
  int64_t offset;
  float nranks;
};

__device__ inline float mean_value(uint32_t u, const MeanArgs& m) {
  const long long s = (long long)m.scale * (long long)u - m.offset;
  return __fdiv_rn(__ll2float_rn(s), m.nranks);
}

// The counts of one lane's elements [first, first + kVec<T>) from `planes` planes of half-words.
template <class T>
__device__ inline void counts_at(const uint32_t* count32, int planes, size_t plane_halves, size_t first,
                                 uint32_t (&u)[kVec<T>]) {
#pragma unroll
  for (int k = 0; k < kVec<T>; ++k) u[k] = 0;
  for (int p = 0; p < planes; ++p) {
    const uint32_t bits = lane_bits<T>(count32 + size_t(p) * plane_halves, first);
#pragma unroll
    for (int k = 0; k < kVec<T>; ++k) u[k] |= ((bits >> k) & 1u) << p;
  }
}

// x ← x·factor − lr·delta, two roundings to the dtype (kernels.h, apply_vote); lr already rounded to
// the dtype like torch's add_(alpha).
struct ApplyArgs {
  float factor;
  float lr;
};

template <class Tr>
__device__ inline typename Tr::T lion_update(typename Tr::T x, float delta, const ApplyArgs& a) {
  const float x1 = Tr::to_f32(Tr::from_f32(__fmul_rn(Tr::to_f32(x), a.factor)));
  return Tr::from_f32(__fsub_rn(x1, __fmul_rn(a.lr, delta)));
}

// Lion's coefficients, each computed in double on the host and rounded to float32 (kernel_table.h).
struct LionArgs {
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
};

template <class Tr>
__device__ inline float round_to(float f) {
  return Tr::to_f32(Tr::from_f32(f));
}

// c = β1·m + (1−β1)·g for the vote, and the new momentum β2·m + (1−β2)·g, rounding like lion_impl.h.
template <class Tr>
__device__ inline float lion_step(typename Tr::T g, typename Tr::T& m, const LionArgs& p) {
  const float gi = Tr::to_f32(g), mi = Tr::to_f32(m);
  const float c = round_to<Tr>(__fadd_rn(round_to<Tr>(__fmul_rn(mi, p.beta1)), round_to<Tr>(__fmul_rn(gi, p.one_minus_beta1))));
  m = Tr::from_f32(__fadd_rn(round_to<Tr>(__fmul_rn(mi, p.beta2)), round_to<Tr>(__fmul_rn(gi, p.one_minus_beta2))));
  return c;
}

}  // namespace pride::bits::cuda::device
