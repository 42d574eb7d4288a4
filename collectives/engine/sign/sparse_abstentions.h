// Ternary votes that rarely abstain, sent at the cost of binary ones.
//
// A ternary vote (−1, 0 abstains, +1) costs two planes in the reduce phase, a binary one one plane.
// When only a few elements abstain anywhere, the ranks can send binary votes (+1 plane only: an
// abstention reads as −1 there) and then re-vote just the union U of the abstaining elements as
// ternary votes. Outside U no rank abstains, so the binary count is the ternary count; inside U the
// re-vote is. The result is bit for bit the ternary sign-allreduce's, in its encoding:
//   vote: the +1 plane and the tie plane (all zero outside U when N is odd: binary votes cannot tie);
//   mean: u = pos − neg + N, which is 2c for a binary count c: the binary result shifted up one plane.
// Wire cost: the binary call, plus the re-vote of |U| elements (all-gather algorithm). Finding U (an
// all-gather of each rank's abstaining elements) is the caller's: DistributedLion does it as part of
// its bucket agreement (torch_plugin/bucket_agreement.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "collectives/engine/sign/sign_allreduce.h"

namespace pride {

// `pos`, `neg`: this rank's ternary planes, words_for(numel) words each (tail bits zero).
// `revote`: U, sorted, without repeats, every index < numel, the same on every rank. `options.votes` is
// ignored (the result is the ternary one). Every rank must call it with the same U.
// `abstain_everywhere`: elements (sorted, none in U) where the caller knows that every rank abstains:
// their count is 0 without sending anything (DistributedLion's dead units, bucket_agreement.h). Every
// rank must pass the same list; a rank that votes at one of them is not counted there.
SignResult sign_allreduce_revoting(Communicator& comm, const uint64_t* pos, const uint64_t* neg, size_t numel,
                                   const SignOptions& options, uint32_t dtype_code, const std::vector<uint32_t>& revote,
                                   const std::vector<uint32_t>& abstain_everywhere = {});

// The re-vote in its pieces, which the CUDA step shares (torch_plugin/device_revote.h: the binary call and
// the result planes stay on the device, the few bits at U and E travel through the host):
//   1. check_revote_lists: U and E as sign_allreduce_revoting requires them;
//   2. votes_at: this rank's ternary votes at U, packed (the +1 bits, then the −1 bits, words_for(|U|)
//      words each);
//   3. count_revotes: their exact count over the ranks, a ternary sign-allreduce of |U| elements with
//      the all-gather algorithm (U is small: one round of latency, not the direct algorithm's two);
//   4. revote_patch: what the ternary result holds at U (the count) and at E (a count of 0), as bits to
//      write into the binary result re-encoded as the ternary one; apply_revote_patch writes them.
void check_revote_lists(int rank, size_t numel, const std::vector<uint32_t>& revote,
                        const std::vector<uint32_t>& abstain_everywhere);
std::vector<uint64_t> votes_at(const uint64_t* pos, const uint64_t* neg, const std::vector<uint32_t>& revote);
SignResult count_revotes(Communicator& comm, const uint64_t* votes_at, size_t m, const SignOptions& options,
                         uint32_t dtype_code);

struct RevotePatch {
  std::vector<uint32_t> elements;  // U ∪ E, ascending
  // Plane-major: result_planes planes of words() words; bit k of plane p is that result plane's bit at
  // elements[k].
  std::vector<uint64_t> bits;
  int planes = 0;
  size_t words() const { return (elements.size() + 63) / 64; }
};
// `ternary`: the plan of the result (SignPlan::make(N, mode, kTernary)); `counted`: count_revotes' result
// (ignored when U is empty).
RevotePatch revote_patch(const SignPlan& ternary, const SignResult& counted, const std::vector<uint32_t>& revote,
                         const std::vector<uint32_t>& abstain_everywhere);
void apply_revote_patch(const RevotePatch& patch, uint64_t* planes, size_t plane_words);

// Cost rule: re-voting pays for itself while the longest list of abstaining elements on any rank is at
// most this long. Each rank all-gathers that many 32-bit indices, then 2 bits per element of U (at most
// N times the list) in the re-vote: (N − 1) · (32 + 2N) bits per listed element, against the second
// plane's (N − 1) / N bits per element of the bucket that ternary votes cost.
size_t max_revote_list(size_t numel, int nranks);

}  // namespace pride
