#include "collectives/engine/sign/sign_plan.h"

#include <cstring>

#include "collectives/bits/kernels.h"
#include "collectives/bits/trit_coding.h"

namespace pride {

SignPlan SignPlan::make(int nranks, SignMode mode, VoteKind kind) {
  SignPlan p;
  p.nranks = nranks;
  p.mode = mode;
  p.kind = kind;
  p.counters = kind == VoteKind::kBinary ? 1 : 2;
  p.counts = bits::counts::make_code(uint32_t(kind == VoteKind::kBinary ? nranks + 1 : 2 * int64_t(nranks) + 1));
  if (mode == SignMode::kVote) {
    p.result_planes = (kind == VoteKind::kBinary && nranks % 2 == 1) ? 1 : 2;
  } else if (kind == VoteKind::kBinary) {
    p.result_planes = bits::planes_for(nranks);
    p.mean_scale = 2;
    p.mean_offset = nranks;
  } else {
    p.result_planes = bits::planes_for(2 * int64_t(nranks));
    p.mean_scale = 1;
    p.mean_offset = nranks;
  }
  return p;
}

double SignPlan::result_wire_bits() const {
  switch (result_coding) {
    case ResultCoding::kTrits: return 8.0 / double(bits::trits::kPerByte);
    case ResultCoding::kCounts: return bits::counts::bits_per_element(count_code());
    case ResultCoding::kPlanes: break;
  }
  return double(result_planes);
}

size_t SignPlan::result_bytes(size_t nwords) const {
  switch (result_coding) {
    case ResultCoding::kTrits: return bits::trits::bytes_for_words(nwords);
    case ResultCoding::kCounts: return bits::counts::bytes_for_words(count_code(), nwords);
    case ResultCoding::kPlanes: break;
  }
  return size_t(result_planes) * 8 * nwords;
}

void SignPlan::finalize(const uint64_t* counts, int planes, size_t nwords, uint64_t* result,
                        size_t result_stride) const {
  if (nwords == 0) return;
  const uint64_t* pos = counts;
  const uint64_t* neg = counts + size_t(planes) * nwords;
  if (mode == SignMode::kVote) {
    uint64_t* tie = result_planes == 2 ? result + result_stride : nullptr;
    if (kind == VoteKind::kBinary) {
      bits::vote_from_count(pos, planes, nwords, nranks, result, tie);
    } else {
      bits::vote_from_counts(pos, neg, planes, nwords, result, tie);
    }
    return;
  }
  if (kind == VoteKind::kBinary) {  // the count itself is the result; widen to result_planes
    for (int p = 0; p < result_planes; ++p) {
      uint64_t* dst = result + size_t(p) * result_stride;
      if (p < planes) std::memcpy(dst, pos + size_t(p) * nwords, nwords * 8);
      else std::memset(dst, 0, nwords * 8);
    }
    return;
  }
  bits::counter_signed_offset(pos, neg, planes, nwords, nranks, result, result_planes, result_stride);
}

}  // namespace pride
