// The float32 arithmetic of the element kernels on the device, spelled with the _rn intrinsics so that
// nothing is contracted into an FMA or approximated: each operation rounds exactly as the CPU's
// separate float32 operations do (elementwise_scalar.h, lion_impl.h).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "collectives/bits/cuda/device_elements.cuh"

namespace pride::bits::cuda::device {

// float32 → dtype on the device by the hardware's conversion (cvt.rn): the value element_traits.h's
// integer code gives for every float that is not NaN, as both are IEEE round-to-nearest-even with
// overflow to infinity and subnormal results; a NaN becomes a quiet NaN of its sign (0x7FC0 for bf16,
// as the CPU writes it; sign | 0x7E00 for fp16) where the hardware would give 0x7FFF. What reaches
// narrow() from the Lion and apply kernels is the GPU's arithmetic, whose NaN is always positive, so
// their fp16 NaN is 0x7E00 (kernel tests check it); the CPU's x86 arithmetic can make a negative NaN
// (inf − inf gives 0xFFC00000), whose fp16 is 0xFE00. NaN bits are therefore not part of the CPU/GPU
// bit-exactness (the kernel tests compare NaN as NaN); every other value is. The integer code is what bounded the
// 16-bit Lion kernels: some sixty integer operations an element, and Hopper issues 32-bit integer
// operations at half its float rate (bf16 lion_vote ran at 0.43 of a copy on an H200), while each
// conversion here is one instruction.
template <class Tr>
__device__ inline typename Tr::T narrow(float f) {
  return Tr::from_f32(f);
}
// bf16 by the paired conversion (cvt.rn.bf16x2.f32): on sm_90 the single one compiles to the slow F2F,
// the pair to F2FP, an ordinary ALU instruction.
__device__ inline __nv_bfloat162 to_bf16_pair(float a, float b) { return __floats2bfloat162_rn(a, b); }
template <>
__device__ inline uint16_t narrow<BF16>(float f) {
  return f != f ? uint16_t{0x7FC0} : __bfloat16_as_ushort(__low2bfloat16(to_bf16_pair(f, f)));
}
template <>
__device__ inline uint16_t narrow<F16>(float f) {
  if (f != f) return uint16_t((__float_as_uint(f) >> 16) & 0x8000u) | uint16_t{0x7E00};
  return __half_as_ushort(__float2half_rn(f));
}

// dtype → float32, exact, by the hardware's conversion. Every widened value goes straight into float32
// arithmetic, and the GPU's arithmetic returns its canonical NaN whatever NaN comes in (where the CPU
// keeps an operand's sign and payload: the kernel tests compare NaN as NaN), so keeping a NaN's bits
// here or in round_to() below would change no output; only narrow() writes NaN bits out. Skipping
// it saved fp16's Lion step a third of its instructions (it ran at 0.60 of a copy on an H200 with the
// CPU's NaN bits spelled out per element).
template <class Tr>
__device__ inline float widen(typename Tr::T x) {
  return Tr::to_f32(x);
}
template <>
__device__ inline float widen<F16>(uint16_t x) {
  return __half2float(__ushort_as_half(x));
}

// f rounded to the dtype and back: what the CPU's separate dtype operations leave in float32. A NaN
// stays a NaN (its bits are the hardware's: the result feeds arithmetic, as widen()'s do).
template <class Tr>
__device__ inline float round_to(float f) {
  return Tr::to_f32(Tr::from_f32(f));
}
template <>
__device__ inline float round_to<F32>(float f) {
  return f;
}
template <>
__device__ inline float round_to<BF16>(float f) {
  return __low2float(to_bf16_pair(f, f));
}
template <>
__device__ inline float round_to<F16>(float f) {
  return __low2float(__floats2half2_rn(f, f));
}

// round_to() of two values at once: one paired conversion for the 16-bit formats.
template <class Tr>
__device__ inline void round_pair(float& a, float& b) {
  a = round_to<Tr>(a);
  b = round_to<Tr>(b);
}
template <>
__device__ inline void round_pair<BF16>(float& a, float& b) {
  const __nv_bfloat162 r = to_bf16_pair(a, b);
  a = __low2float(r);
  b = __high2float(r);
}
template <>
__device__ inline void round_pair<F16>(float& a, float& b) {
  const __half2 r = __floats2half2_rn(a, b);
  a = __low2float(r);
  b = __high2float(r);
}

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

// A count of `planes` planes takes one of 2^planes values, and so does the mean. With up to this many
// planes (N up to 2047 ranks) the mean kernels tabulate them per block in shared memory first, so an
// element costs a table read instead of a correctly rounded division (unpack_mean ran at 0.24 of a
// copy's bandwidth on an H200 dividing per element). The table holds the values the division gives.
constexpr int kMaxMeanTablePlanes = 11;

__host__ __device__ inline size_t mean_table_bytes(int planes, size_t value_bytes) {
  return planes <= kMaxMeanTablePlanes ? (size_t{1} << planes) * value_bytes : 0;
}

// table[u] = value(mean_value(u, m)) for every count u of `planes` planes, by the whole block, which it
// synchronises: every thread of the block must call it.
template <class V, class Fn>
__device__ inline void tabulate_means(V* table, int planes, const MeanArgs& m, Fn value) {
  for (uint32_t u = threadIdx.x; u < (1u << planes); u += blockDim.x) table[u] = value(mean_value(u, m));
  __syncthreads();
}

// The counts of one lane's elements [first, first + kVec<T>) from `planes` planes of half-words. Up to
// kMaxMeanTablePlanes planes the loads are unrolled and issued together, so the lane waits for memory
// once, not once per plane (a loop with a run-time bound waited for each load in turn: unpack_mean ran
// at 0.35 of a same-size copy on an H200 with 3 planes); more planes take the loop.
template <class T>
__device__ inline void counts_at(const uint32_t* count32, int planes, size_t plane_halves, size_t first,
                                 uint32_t (&u)[kVec<T>]) {
#pragma unroll
  for (int k = 0; k < kVec<T>; ++k) u[k] = 0;
  if (planes <= kMaxMeanTablePlanes) {
    uint32_t bits[kMaxMeanTablePlanes];
#pragma unroll
    for (int p = 0; p < kMaxMeanTablePlanes; ++p) {
      bits[p] = p < planes ? lane_bits<T>(count32 + size_t(p) * plane_halves, first) : 0u;
    }
#pragma unroll
    for (int p = 0; p < kMaxMeanTablePlanes; ++p) {
      if (p >= planes) break;
#pragma unroll
      for (int k = 0; k < kVec<T>; ++k) u[k] |= ((bits[p] >> k) & 1u) << p;
    }
    return;
  }
  for (int p = 0; p < planes; ++p) {
    const uint32_t bits = lane_bits<T>(count32 + size_t(p) * plane_halves, first);
#pragma unroll
    for (int k = 0; k < kVec<T>; ++k) u[k] |= ((bits >> k) & 1u) << p;
  }
}

// counts_at with the plane count known when compiling: P loads issued together and P bit moves per
// element, nothing predicated. With the count a run-time value, counts_at's unrolled loads carry a
// predicate and a 64-bit address computation each for all kMaxMeanTablePlanes planes, used or not:
// 768 SASS instructions in the fp32 unpack_mean kernel, which ran at 0.62 of a same-size copy on an
// H100 with 3 planes. The kernels take this path up to kFixedCountPlanes planes.
constexpr int kFixedCountPlanes = 8;  // a binary mean of up to 255 ranks, a ternary one of up to 127

template <class T, int P>
__device__ inline void counts_at_fixed(const uint32_t* count32, size_t plane_halves, size_t first,
                                       uint32_t (&u)[kVec<T>]) {
  static_assert(P >= 1 && P <= kFixedCountPlanes, "counts_at_fixed: 1 to kFixedCountPlanes planes");
  uint32_t bits[P];
#pragma unroll
  for (int p = 0; p < P; ++p) bits[p] = lane_bits<T>(count32 + size_t(p) * plane_halves, first);
#pragma unroll
  for (int k = 0; k < kVec<T>; ++k) {
    uint32_t v = 0;
#pragma unroll
    for (int p = 0; p < P; ++p) v |= ((bits[p] >> k) & 1u) << p;
    u[k] = v;
  }
}

// x ← x·factor − lr·delta, two roundings to the dtype (kernels.h, apply_vote); lr already rounded to
// the dtype like torch's add_(alpha).
struct ApplyArgs {
  float factor;
  float lr;
};

// lr rounded to the dtype like torch's add_(alpha); the decay factor stays float32 like mul_'s scalar.
template <class Tr>
inline ApplyArgs apply_args(double lr, double wd) {
  return {float(1.0 - lr * wd), Tr::to_f32(Tr::from_f32(float(lr)))};
}

template <class Tr>
__device__ inline typename Tr::T lion_update(typename Tr::T x, float delta, const ApplyArgs& a) {
  const float x1 = round_to<Tr>(__fmul_rn(widen<Tr>(x), a.factor));
  return narrow<Tr>(__fsub_rn(x1, __fmul_rn(a.lr, delta)));
}

// Lion's coefficients, each computed in double on the host and rounded to float32 (kernel_table.h).
struct LionArgs {
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
};

inline LionArgs lion_args(double beta1, double beta2) {
  return {float(beta1), float(1.0 - beta1), float(beta2), float(1.0 - beta2)};
}

// c = β1·m + (1−β1)·g for the vote, and the new momentum β2·m + (1−β2)·g, rounding like lion_impl.h.
template <class Tr>
__device__ inline float lion_step(typename Tr::T g, typename Tr::T& m, const LionArgs& p) {
  const float gi = widen<Tr>(g), mi = widen<Tr>(m);
  float c_m = __fmul_rn(mi, p.beta1), c_g = __fmul_rn(gi, p.one_minus_beta1);
  float m_m = __fmul_rn(mi, p.beta2), m_g = __fmul_rn(gi, p.one_minus_beta2);
  round_pair<Tr>(c_m, c_g);
  round_pair<Tr>(m_m, m_g);
  m = narrow<Tr>(__fadd_rn(m_m, m_g));
  return round_to<Tr>(__fadd_rn(c_m, c_g));
}

}  // namespace pride::bits::cuda::device
