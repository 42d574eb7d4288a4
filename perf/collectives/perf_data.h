// Deterministic inputs and exact oracles for the perf tools' -c check.
//
// Element i of rank r's input is a pure function of (seed, r, i), so every rank can regenerate every
// other rank's input and compute the expected result itself: no data moves for the check, and the
// check does not trust the library it checks (no pride kernel is used here).
#pragma once

#include <cstddef>
#include <cstdint>

#include "collectives/bits/kernels.h"

namespace pride::perf {

// Sign-allreduce input: mostly ordinary values of both signs, with +0, -0, NaN and ±inf mixed in, so
// binary and ternary votes differ and the NaN/zero rules of SPEC §2 are exercised at every size.
float sign_input(uint64_t seed, int rank, size_t i);
// Vote of one value (SPEC §2): binary +1 where x > 0 else -1; ternary +1 / -1 / 0 (±0 and NaN abstain).
inline int vote_of(float x, bool ternary) {
  if (x > 0) return 1;
  if (!ternary || x < 0) return -1;
  return 0;
}

// Allreduce input: integer-valued floats in [-1000, 1000]. Any sum of up to 2^14 of them is exact in
// float32, so the result is independent of the reduction order and the check needs no tolerance.
float sum_input(uint64_t seed, int rank, size_t i);

// float -> bf16 / fp16 with round to nearest even (what a cast in torch does); NaN stays NaN.
uint16_t float_to_bf16(float f);
uint16_t float_to_half(float f);
// buf[i] = f converted to dtype (float32, bf16 or fp16).
void store_as(bits::DType dtype, float f, void* buf, size_t i);

}  // namespace pride::perf
