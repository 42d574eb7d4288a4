// The vote predicates of two 16-bit floats at once (bf16 or fp16), in 32-bit integer arithmetic on the
// word that holds them: what the pack kernel runs on the GPU for the 16-bit types, testable on any
// machine (tests/kernels/test_half_pair_signs.cc checks every 16-bit pattern against the oracle).
//
// Why: tested one element at a time (element_traits.h's range checks) the 16-bit ternary pack spent
// some ten integer operations an element and ran at 0.65 of a same-size copy on an H200, against 0.89
// for fp32. Here a pair costs five operations for both planes.
#pragma once

#include <cstdint>

#include "collectives/bits/host_device.h"

namespace pride::bits::cuda {

// Bits 15 and 31 of `pos` (`neg`) are set where the half below them is > 0 (< 0): nonzero, not NaN,
// sign clear (set). inf_bits is the format's +infinity (0x7F80 for bf16, 0x7C00 for fp16), the largest
// magnitude that is not NaN. No sum below carries out of its half: a magnitude is at most 0x7FFF.
PRIDE_HD inline void half_pair_signs(uint32_t word, uint32_t inf_bits, uint32_t& pos, uint32_t& neg) {
  const uint32_t magnitude = word & 0x7FFF7FFFu;
  const uint32_t nonzero = magnitude + 0x7FFF7FFFu;                           // bit 15: magnitude >= 1
  const uint32_t beyond_inf = magnitude + (0x7FFFu - inf_bits) * 0x00010001u;  // bit 15: magnitude > inf
  const uint32_t votes = nonzero & ~beyond_inf & 0x80008000u;
  pos = votes & ~word;
  neg = votes & word;
}

// Bits 15 and 31 of four such words (elements 0 … 7 of 16 bytes, element 2i in word i's low half) as
// bits 0 … 7 in element order.
PRIDE_HD inline uint32_t gather_pair_signs(uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3) {
  const uint32_t even_odd = (w0 >> 15) | (w1 >> 13) | (w2 >> 11) | (w3 >> 9);  // even at 0,2,4,6; odd at 16,18,20,22
  return (even_odd | (even_odd >> 15)) & 0xFFu;
}

}  // namespace pride::bits::cuda

