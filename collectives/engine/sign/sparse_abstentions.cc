#include "collectives/engine/sign/sparse_abstentions.h"

#include <cstring>
#include <utility>

#include "backend/common/error.h"
#include "collectives/bits/kernels.h"

namespace pride {
namespace {

bool bit(const uint64_t* plane, size_t i) { return (plane[i / 64] >> (i % 64)) & 1; }

void set_bit(uint64_t* plane, size_t i, bool value) {
  const uint64_t mask = uint64_t(1) << (i % 64);
  plane[i / 64] = value ? plane[i / 64] | mask : plane[i / 64] & ~mask;
}

// The binary result re-encoded as the ternary plan's result (see the header): exact wherever no rank
// abstained. Fills out.planes, taking the binary call's planes over where they already are the vote's
// (its sign, then its tie plane; the tie plane is zero where N is odd).
void binary_as_ternary_result(SignResult&& binary, SignResult& out) {
  const size_t W = out.nwords;
  const size_t words = size_t(out.plan.result_planes) * W;
  PRIDE_ENFORCE(binary.borrowed_planes == nullptr, "sign_allreduce_revoting: the binary call's planes are not its own");
  if (out.plan.mode == SignMode::kVote) {
    out.planes = std::move(binary.planes);
    out.planes.resize(words, 0);
    return;
  }
  PRIDE_ENFORCE(out.plan.result_planes == binary.plan.result_planes + 1,
              "sign_allreduce_revoting: mean of {} ranks has {} binary and {} ternary planes", out.plan.nranks,
              binary.plan.result_planes, out.plan.result_planes);
  out.planes.resize(words);
  uint64_t* dst = out.planes.data();
  std::memset(dst, 0, W * 8);  // u = 2c
  for (int p = 0; p < binary.plan.result_planes; ++p) std::memcpy(dst + size_t(p + 1) * W, binary.plane(p), W * 8);
}

}  // namespace

size_t max_revote_list(size_t numel, int nranks) {
  if (nranks <= 1) return 0;
  return numel / (size_t(nranks) * size_t(32 + 2 * nranks));
}

SignResult sign_allreduce_revoting(Communicator& comm, const uint64_t* pos, const uint64_t* neg, size_t numel,
                                   const SignOptions& options, uint32_t dtype_code, const std::vector<uint32_t>& revote,
                                   const std::vector<uint32_t>& abstain_everywhere) {
  for (const auto* list : {&revote, &abstain_everywhere}) {
    const std::vector<uint32_t>& l = *list;
    for (size_t k = 0; k < l.size(); ++k) {
      PRIDE_CHECK_ARG(l[k] < numel && (k == 0 || l[k - 1] < l[k]),
                      "rank {}: sign_allreduce_revoting: {} list not sorted, repeated or past {} elements at {}",
                      comm.rank(), list == &revote ? "re-vote" : "abstain-everywhere", numel, k);
    }
  }
  SignOptions binary_options = options;
  binary_options.votes = VoteKind::kBinary;
  SignResult binary = sign_allreduce_planes(comm, pos, numel, binary_options, dtype_code);

  // This rank's ternary votes at U, packed, and their exact count over all ranks. All-gather: U is small,
  // so one round of latency, not the direct algorithm's two.
  const size_t m = revote.size(), mw = bits::words_for(m);
  std::vector<uint64_t> votes_at(2 * mw, 0);
  for (size_t k = 0; k < m; ++k) {
    set_bit(votes_at.data(), k, bit(pos, revote[k]));
    set_bit(votes_at.data() + mw, k, bit(neg, revote[k]));
  }
  SignOptions ternary_options = options;
  ternary_options.votes = VoteKind::kTernary;
  ternary_options.algorithm = SignAlgorithm::kAllgather;
  ternary_options.call_agreed = false;  // the caller's digest covers the binary call above, not this one
  SignResult fix;
  if (m > 0) fix = sign_allreduce_planes(comm, votes_at.data(), m, ternary_options, dtype_code);

  SignResult out;
  out.plan = SignPlan::make(comm.size(), options.mode, VoteKind::kTernary);
  out.algorithm = binary.algorithm;
  out.numel = numel;
  out.nwords = binary.nwords;
  binary_as_ternary_result(std::move(binary), out);
  for (int p = 0; p < out.plan.result_planes && m > 0; ++p) {
    uint64_t* plane = out.planes.data() + size_t(p) * out.nwords;
    for (size_t k = 0; k < m; ++k) set_bit(plane, revote[k], bit(fix.plane(p), k));
  }
  if (!abstain_everywhere.empty()) {
    // A count of 0 in the ternary result's encoding, as the plan's own finalize writes it (a tie for a
    // vote, u = N for a mean): one word of zero counters, one bit per result plane.
    const uint64_t zero_counters[2] = {0, 0};
    std::vector<uint64_t> zero(size_t(out.plan.result_planes), 0);
    out.plan.finalize(zero_counters, 1, 1, zero.data(), 1);
    for (int p = 0; p < out.plan.result_planes; ++p) {
      uint64_t* plane = out.planes.data() + size_t(p) * out.nwords;
      for (uint32_t e : abstain_everywhere) set_bit(plane, e, zero[size_t(p)] & 1);
    }
  }
  return out;
}

}  // namespace pride
