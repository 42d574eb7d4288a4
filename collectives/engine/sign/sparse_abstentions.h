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

// Cost rule: re-voting pays for itself while the longest list of abstaining elements on any rank is at
// most this long. Each rank all-gathers that many 32-bit indices, then 2 bits per element of U (at most
// N times the list) in the re-vote: (N − 1) · (32 + 2N) bits per listed element, against the second
// plane's (N − 1) / N bits per element of the bucket that ternary votes cost.
size_t max_revote_list(size_t numel, int nranks);

}  // namespace pride
