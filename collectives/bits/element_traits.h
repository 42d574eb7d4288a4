// Scalar element access for the kernels: vote predicates on raw bit patterns and float32 <-> dtype
// conversion with round-to-nearest-even. pride's one implementation of the half-precision
// conversions: the kernels (both ISA paths, whose AVX2 instructions are made to match these bit for
// bit, NaN included), the CUDA kernels and the standard collectives' float16/bfloat16 reductions all
// use them. Narrowing follows torch's c10::Half / c10::BFloat16 exactly (tests compare every half and
// the floats around every rounding boundary), NaN included: a NaN narrows to the canonical quiet NaN.
//
// Included only from an ISA translation unit, which defines PRIDE_KERNEL_NS first: code compiled
// with different -m flags must not share inline symbols, or the linker could hand AVX2 code to the
// portable path.
#pragma once

#include <cstdint>
#include <cstring>

// The CUDA kernels (collectives/bits/cuda/) include this file too, with PRIDE_KERNEL_NS=cuda_device:
// one source for the conversions and predicates on both sides is what makes them bit-identical.
#include "collectives/bits/host_device.h"

#ifndef PRIDE_KERNEL_NS
#error "define PRIDE_KERNEL_NS before including kernel implementation headers"
#endif

namespace pride::bits::detail::PRIDE_KERNEL_NS {

PRIDE_HD inline uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

PRIDE_HD inline float f32_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// bf16 is the top half of a float32: widening is exact.
PRIDE_HD inline float bf16_to_f32(uint16_t h) { return f32_from_bits(uint32_t{h} << 16); }

// Round to nearest even by adding just under half an ulp plus the lowest kept bit, as torch's
// c10::BFloat16 does; NaN becomes torch's canonical 0x7FC0 (adding the bias could carry it to inf).
// Branch-free, so that loops over it vectorize.
PRIDE_HD inline uint16_t f32_to_bf16(float f) {
  const uint32_t u = f32_bits(f);
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>((u & 0x7FFFFFFFu) > 0x7F800000u ? 0x7FC0u : rounded);
}

// Exact widening, as F16C's vcvtph2ps does it: subnormals become normals, a NaN keeps its payload
// and gets the quiet bit.
PRIDE_HD inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  if (exp == 0x1F) return f32_from_bits(sign | 0x7F800000u | (mant << 13) | (mant ? 0x400000u : 0u));
  if (exp == 0) {
    // Subnormal (or zero): mant * 2^-24, exact in float32.
    const float mag = static_cast<float>(mant) * f32_from_bits(0x33800000u);  // 2^-24
    return f32_from_bits(sign | f32_bits(mag));
  }
  return f32_from_bits(sign | ((exp + 112u) << 23) | (mant << 13));
}

// Round to nearest even, as F16C's vcvtps2ph with _MM_FROUND_TO_NEAREST_INT and as torch's
// c10::Half: overflow goes to inf, tiny values to subnormals or zero. A NaN becomes torch's canonical
// quiet NaN 0x7E00 with its sign (vcvtps2ph would keep the payload: the AVX2 path blends it away).
PRIDE_HD inline uint16_t f32_to_f16(float f) {
  const uint32_t u = f32_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return sign | 0x7E00u;
  if (a >= 0x477FF000u) return sign | 0x7C00u;  // >= 65520: halfway to 2^16 or beyond rounds to inf
  if (a >= 0x38800000u) {                        // normal half: rebias the exponent, round 13 bits away
    const uint32_t m = a - 0x38000000u;
    return sign | static_cast<uint16_t>((m + 0xFFFu + ((m >> 13) & 1u)) >> 13);
  }
  const uint32_t exp = a >> 23;
  if (exp < 102) return sign;  // below 2^-25: rounds to zero
  // Subnormal half: the value in units of 2^-24 is mant >> shift; round the dropped bits to even.
  const uint32_t mant = (a & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 126 - exp;  // 14..24
  const uint32_t kept = mant >> shift;
  const uint32_t rest = mant & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  const uint32_t round_up = rest > half || (rest == half && (kept & 1u));
  return sign | static_cast<uint16_t>(kept + round_up);
}

// One struct per DType: storage type, vote predicates on the stored value, float32 conversion.
// pos: x > 0; neg: x < 0. Both are false for ±0 and NaN.
struct F32 {
  using T = float;
  PRIDE_HD static bool pos(T x) { return x > 0.0f; }
  PRIDE_HD static bool neg(T x) { return x < 0.0f; }
  PRIDE_HD static float to_f32(T x) { return x; }
  PRIDE_HD static T from_f32(float f) { return f; }
};

// For the 16-bit formats the predicates work on the bits: +0 is 0x0000, -0 is 0x8000, and the
// magnitudes above the infinity pattern (0x7F80 bf16, 0x7C00 fp16) are NaN.
struct BF16 {
  using T = uint16_t;
  PRIDE_HD static bool pos(T b) { return b >= 0x0001 && b <= 0x7F80; }
  PRIDE_HD static bool neg(T b) { return b >= 0x8001 && b <= 0xFF80; }
  PRIDE_HD static float to_f32(T b) { return bf16_to_f32(b); }
  PRIDE_HD static T from_f32(float f) { return f32_to_bf16(f); }
};

struct F16 {
  using T = uint16_t;
  PRIDE_HD static bool pos(T b) { return b >= 0x0001 && b <= 0x7C00; }
  PRIDE_HD static bool neg(T b) { return b >= 0x8001 && b <= 0xFC00; }
  PRIDE_HD static float to_f32(T b) { return f16_to_f32(b); }
  PRIDE_HD static T from_f32(float f) { return f32_to_f16(f); }
};

// Output only (unpack_vote): -1, 0, +1.
struct I8 {
  using T = int8_t;
  PRIDE_HD static T from_f32(float f) { return static_cast<T>(f); }
};

}  // namespace pride::bits::detail::PRIDE_KERNEL_NS
