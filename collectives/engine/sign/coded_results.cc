#include "collectives/engine/sign/coded_results.h"

#include "collectives/engine/patterns/chunks.h"

namespace pride {

size_t coded_offset(const SignPlan& plan, size_t W, int n, int j) {
  return patterns::chunk_offset(W, n, j, [&](size_t words) { return plan.result_bytes(words); });
}

void encode_result(PlaneOps& ops, const SignPlan& plan, const uint64_t* planes, size_t stride, size_t nwords,
                   uint8_t* out) {
  if (plan.result_coding == ResultCoding::kTrits) {
    ops.encode_trits(planes, stride, nwords, out);
  } else {
    ops.encode_counts(plan.count_code(), planes, stride, nwords, reinterpret_cast<uint32_t*>(out));
  }
}

void decode_result(PlaneOps& ops, const SignPlan& plan, const uint8_t* in, size_t nwords, uint64_t* planes,
                   size_t stride) {
  if (plan.result_coding == ResultCoding::kTrits) {
    ops.decode_trits(in, nwords, planes, stride);
  } else {
    ops.decode_counts(plan.count_code(), reinterpret_cast<const uint32_t*>(in), nwords, planes, stride);
  }
}

}  // namespace pride
