#include "collectives/engine/compressed/onebit_ops.h"

#include "collectives/bits/onebit.h"
#include "collectives/engine/call_description.h"

namespace pride {

double HostOnebitOps::add_worker_error() { return bits::add_error_and_square_sum(x_, worker_error_, numel_); }

void HostOnebitOps::compress_worker(float scale, patterns::Range elements, uint64_t* signs) {
  bits::compress_signs(x_ + elements.begin, scale, elements.size, signs, worker_error_ + elements.begin);
}

double HostOnebitOps::average_owner(const uint64_t* const* signs, const float* scales, int count, size_t n) {
  // Two floats to a word of the workspace; the key is the collective's own (call_description.h).
  average_ = reinterpret_cast<float*>(workspace_.get<uint64_t>({kOnebitAllreduceOp, 100}, (n + 1) / 2));
  bits::average_signs(signs, scales, count, n, average_);
  return bits::add_error_and_square_sum(average_, server_error_, n);
}

void HostOnebitOps::compress_owner(float scale, size_t n, uint64_t* signs) {
  bits::compress_signs(average_, scale, n, signs, server_error_);
}

void HostOnebitOps::expand(const uint64_t* signs, float scale, patterns::Range elements) {
  bits::expand_signs(signs, scale, elements.size, x_ + elements.begin);
}

}  // namespace pride
