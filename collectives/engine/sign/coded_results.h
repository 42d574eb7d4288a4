// Result chunks in their coded form (SignPlan::result_coding: trits or packed counts), for the
// algorithms that all-gather result chunks: the direct algorithm among all ranks, hier among the
// nodes. Each owner encodes its chunk of a range of W words split into n chunks (patterns::chunk),
// the chunks lie chunk-major in one byte buffer, and every rank decodes the others' back into planes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "collectives/engine/sign/plane_ops.h"
#include "collectives/engine/sign/sign_plan.h"

namespace pride {

// Where chunk j starts in the buffer; coded_offset(plan, W, n, n) is the buffer's size. Chunks of
// packed counts start at multiples of 4 bytes (their limbs).
size_t coded_offset(const SignPlan& plan, size_t W, int n, int j);

// The result_planes planes of nwords words (`stride` words apart) into plan.result_bytes(nwords)
// bytes, and back. plan.result_coding must not be kPlanes.
void encode_result(PlaneOps& ops, const SignPlan& plan, const uint64_t* planes, size_t stride, size_t nwords,
                   uint8_t* out);
void decode_result(PlaneOps& ops, const SignPlan& plan, const uint8_t* in, size_t nwords, uint64_t* planes,
                   size_t stride);

}  // namespace pride
