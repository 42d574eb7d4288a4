#include "perf/collectives/perf_data.h"

#include <bit>
#include <cmath>
#include <cstring>

namespace pride::perf {
namespace {

// splitmix64: a counter-based generator, so element i needs no state from elements < i.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t element_hash(uint64_t seed, int rank, size_t i) {
  return mix(mix(seed * 0x100000001B3ull + uint64_t(rank)) ^ uint64_t(i));
}

}  // namespace

float sign_input(uint64_t seed, int rank, size_t i) {
  uint64_t h = element_hash(seed, rank, i);
  switch (h % 16) {
    case 0: return 0.0f;
    case 1: return -0.0f;
    case 2: return std::nanf("");
    case 3: return (h & 64) ? INFINITY : -INFINITY;
    default: return float(int64_t((h >> 8) % 2001) - 1000) / 7.0f;  // nonzero values stay nonzero in fp16/bf16
  }
}

float sum_input(uint64_t seed, int rank, size_t i) {
  return float(int64_t(element_hash(seed, rank, i) % 2001) - 1000);
}

uint16_t float_to_bf16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  // Rounding would carry a NaN's low payload bits into an infinity; keep it a (quiet) NaN.
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((x >> 16) | 0x0040u);
  x += 0x7FFFu + ((x >> 16) & 1u);  // round half to even on the 16 dropped bits
  return uint16_t(x >> 16);
}

uint16_t float_to_half(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  uint32_t a = x & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return sign | 0x7E00u;   // NaN
  if (a >= 0x477FF000u) return sign | 0x7C00u;  // >= 65520 rounds to infinity (65504 is the largest half)
  if (a < 0x38800000u) {
    // Below 2^-14 the result is subnormal: a multiple of 2^-24. Scaling by 2^24 is exact, and
    // nearbyint rounds half to even in the default rounding mode. 1024 correctly encodes 2^-14.
    return sign | uint16_t(std::nearbyint(std::bit_cast<float>(a) * 16777216.0f));
  }
  uint32_t h = ((((a >> 23) - 127 + 15) << 10) | ((a & 0x7FFFFFu) >> 13));
  uint32_t rest = a & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry into the exponent is correct
  return uint16_t(sign | h);
}

void store_as(bits::DType dtype, float f, void* buf, size_t i) {
  switch (dtype) {
    case bits::DType::kFloat32: static_cast<float*>(buf)[i] = f; return;
    case bits::DType::kBFloat16: static_cast<uint16_t*>(buf)[i] = float_to_bf16(f); return;
    case bits::DType::kFloat16: static_cast<uint16_t*>(buf)[i] = float_to_half(f); return;
    case bits::DType::kInt8: static_cast<int8_t*>(buf)[i] = int8_t(f); return;
  }
}

}  // namespace pride::perf
