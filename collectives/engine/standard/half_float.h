// float16 and bfloat16 as bit patterns, converted to and from float with round-to-nearest-even,
// bit-for-bit like torch's c10::Half and c10::BFloat16 (which the tests check exhaustively). The
// reduction kernels compute every half-precision op in float and round after each one, as torch does.
#pragma once

#include <bit>
#include <cstdint>

namespace pride::half {

inline float fp16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) {
    // Infinity, or a NaN that comes out quiet (torch's conversion sets the quiet bit too).
    return std::bit_cast<float>(sign | 0x7f800000u | (mantissa ? 0x400000u | (mantissa << 13) : 0u));
  }
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in float.
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  // Normal: rebias the exponent from 15 to 127.
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

inline uint16_t float_to_fp16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) return sign | (magnitude > 0x7f800000u ? 0x7e00 : 0x7c00);  // NaN -> quiet
  // 65520 (0x477ff000) is the midpoint between the largest half, 65504, and 2^16; the tie goes to the
  // even neighbour, which is infinity.
  if (magnitude >= 0x477ff000u) return sign | 0x7c00;
  if (magnitude < 0x38800000u) {
    // Below 2^-14: the result is a subnormal m * 2^-24 (or zero). 2^-25 (0x33000000) and below round
    // to zero; exactly 2^-25 is a tie that goes to the even 0.
    if (magnitude <= 0x33000000u) return sign;
    const uint32_t exponent = magnitude >> 23;  // 102..112
    const uint32_t significand = (magnitude & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exponent;      // f * 2^24 = significand * 2^(exponent - 126)
    uint32_t m = significand >> shift;
    const uint32_t rest = significand & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (m & 1))) ++m;  // m == 0x400 is the smallest normal: fine
    return sign | static_cast<uint16_t>(m);
  }
  // Normal: rebias the exponent (subtract 112 << 23) and drop 13 mantissa bits, rounding to nearest
  // even; a carry out of the mantissa correctly bumps the exponent.
  uint32_t h = (magnitude - 0x38000000u) >> 13;
  const uint32_t rest = magnitude & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1))) ++h;
  return sign | static_cast<uint16_t>(h);
}

inline float bf16_to_float(uint16_t b) { return std::bit_cast<float>(uint32_t(b) << 16); }

inline uint16_t float_to_bf16(float f) {
  if (f != f) return 0x7fc0;  // NaN: torch returns the canonical quiet NaN, sign dropped
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  // Adding 0x7fff (plus one when the kept part is odd) carries into bit 16 exactly when the dropped
  // half is above the midpoint, or at it with an odd kept part: round to nearest even.
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

}  // namespace pride::half
