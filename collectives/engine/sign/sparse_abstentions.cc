#include "collectives/engine/sign/sparse_abstentions.h"

#include <algorithm>
#include <cstring>
#include <iterator>
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

void check_revote_lists(int rank, size_t numel, const std::vector<uint32_t>& revote,
                        const std::vector<uint32_t>& abstain_everywhere) {
  for (const auto* list : {&revote, &abstain_everywhere}) {
    const std::vector<uint32_t>& l = *list;
    for (size_t k = 0; k < l.size(); ++k) {
      PRIDE_CHECK_ARG(l[k] < numel && (k == 0 || l[k - 1] < l[k]),
                      "rank {}: sign_allreduce_revoting: {} list not sorted, repeated or past {} elements at {}",
                      rank, list == &revote ? "re-vote" : "abstain-everywhere", numel, k);
    }
  }
  // Disjoint: an element in both would get two values, and the CPU patch and the device scatter would
  // keep different ones. Both lists are sorted, so one walk finds a shared element.
  for (size_t u = 0, e = 0; u < revote.size() && e < abstain_everywhere.size();) {
    PRIDE_CHECK_ARG(revote[u] != abstain_everywhere[e],
                    "rank {}: sign_allreduce_revoting: element {} is both re-voted and abstained everywhere", rank,
                    revote[u]);
    if (revote[u] < abstain_everywhere[e]) ++u; else ++e;
  }
}

std::vector<uint64_t> votes_at(const uint64_t* pos, const uint64_t* neg, const std::vector<uint32_t>& revote) {
  const size_t m = revote.size(), mw = bits::words_for(m);
  std::vector<uint64_t> out(2 * mw, 0);
  for (size_t k = 0; k < m; ++k) {
    set_bit(out.data(), k, bit(pos, revote[k]));
    set_bit(out.data() + mw, k, bit(neg, revote[k]));
  }
  return out;
}

SignResult count_revotes(Communicator& comm, const uint64_t* votes_at, size_t m, const SignOptions& options,
                         uint32_t dtype_code) {
  SignOptions ternary_options = options;
  ternary_options.votes = VoteKind::kTernary;
  ternary_options.algorithm = SignAlgorithm::kAllgather;
  ternary_options.call_agreed = false;  // the caller's digest covers the binary call, not this one
  return sign_allreduce_planes(comm, votes_at, m, ternary_options, dtype_code);
}

RevotePatch revote_patch(const SignPlan& ternary, const SignResult& counted, const std::vector<uint32_t>& revote,
                         const std::vector<uint32_t>& abstain_everywhere) {
  RevotePatch patch;
  patch.planes = ternary.result_planes;
  // A count of 0 in the ternary result's encoding, as the plan's own finalize writes it (a tie for a
  // vote, u = N for a mean): one word of zero counters, one bit per result plane.
  const uint64_t zero_counters[2] = {0, 0};
  std::vector<uint64_t> zero(size_t(ternary.result_planes), 0);
  if (!abstain_everywhere.empty()) ternary.finalize(zero_counters, 1, 1, zero.data(), 1);
  patch.elements.reserve(revote.size() + abstain_everywhere.size());
  std::merge(revote.begin(), revote.end(), abstain_everywhere.begin(), abstain_everywhere.end(),
             std::back_inserter(patch.elements));
  const size_t pw = patch.words();
  patch.bits.assign(size_t(patch.planes) * pw, 0);
  size_t u = 0;  // the next element of U: its count is bit u of the counted planes
  for (size_t k = 0; k < patch.elements.size(); ++k) {
    const bool in_revote = u < revote.size() && revote[u] == patch.elements[k];
    for (int p = 0; p < patch.planes; ++p) {
      const bool value = in_revote ? bit(counted.plane(p), u) : (zero[size_t(p)] & 1) != 0;
      set_bit(patch.bits.data() + size_t(p) * pw, k, value);
    }
    if (in_revote) ++u;
  }
  return patch;
}

void apply_revote_patch(const RevotePatch& patch, uint64_t* planes, size_t plane_words) {
  const size_t pw = patch.words();
  for (int p = 0; p < patch.planes; ++p) {
    uint64_t* plane = planes + size_t(p) * plane_words;
    const uint64_t* values = patch.bits.data() + size_t(p) * pw;
    for (size_t k = 0; k < patch.elements.size(); ++k) set_bit(plane, patch.elements[k], bit(values, k));
  }
}

SignResult sign_allreduce_revoting(Communicator& comm, const uint64_t* pos, const uint64_t* neg, size_t numel,
                                   const SignOptions& options, uint32_t dtype_code, const std::vector<uint32_t>& revote,
                                   const std::vector<uint32_t>& abstain_everywhere) {
  check_revote_lists(comm.rank(), numel, revote, abstain_everywhere);
  SignOptions binary_options = options;
  binary_options.votes = VoteKind::kBinary;
  SignResult binary = sign_allreduce_planes(comm, pos, numel, binary_options, dtype_code);

  // This rank's ternary votes at U, and their exact count over all ranks.
  const size_t m = revote.size();
  SignResult counted;
  if (m > 0) counted = count_revotes(comm, votes_at(pos, neg, revote).data(), m, options, dtype_code);

  SignResult out;
  out.plan = SignPlan::make(comm.size(), options.mode, VoteKind::kTernary);
  out.algorithm = binary.algorithm;
  out.numel = numel;
  out.nwords = binary.nwords;
  binary_as_ternary_result(std::move(binary), out);
  apply_revote_patch(revote_patch(out.plan, counted, revote, abstain_everywhere), out.planes.data(), out.nwords);
  return out;
}

}  // namespace pride
