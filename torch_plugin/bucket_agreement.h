// What the ranks agree on before one bucket of DistributedLion's votes travels (SPEC §2, "The optimizer
// is exact by default"; docs/design.md, "Exact votes and missing gradients"). One MAX-allreduce of a
// fixed 13 × uint32 header per bucket carries:
//   - the layout digest (every parameter's shape, dtype and place, and the hyper-parameters), sent as d
//     and ~d: under MAX both come back intact only if every rank sent the same d, so every rank learns
//     at once that the ranks run different models (and the header's size never depends on the layout);
//   - the same for a digest of the bucket's sign-allreduce call (its fingerprint for either vote kind,
//     per-rank settings included): when the ranks agree, that call skips its own fingerprint check, one
//     round of small messages fewer per bucket, which on a busy link wait behind the data in flight;
//   - whether some rank needs ternary votes in this bucket: many elements that must abstain (exact
//     votes: c == 0 or NaN, sign(0) = 0 as in plain Lion), or a tensor whose gradient it lacks (any vote
//     kind: a rank that did not reach a branch abstains rather than voting);
//   - whether some rank lacks a gradient in this bucket. Only then a second MAX-allreduce, one byte per
//     tensor of the bucket, tells which tensors have a gradient on any rank: one that has none anywhere
//     takes no step at all (no weight decay either), as in torch's optimizers;
//   - whether every rank's planes travel from GPU memory (the CUDA step's device-memory path): only then
//     does the bucket go in one segment on one host (distributed_lion_cuda.cc);
//   - the longest list of abstaining elements any rank has, when each has only a few. Only then an
//     all-gather of the lists (padded to that length) gives every rank their union U, and the bucket
//     travels as binary votes with U re-voted as ternary ones (sparse_abstentions.h): the exact result
//     at about the binary cost. A rank that cannot re-vote (the CUDA step, so far) says so in the
//     header, and then any abstention sends the bucket ternary.
// Binary votes cannot abstain (a 0 bit votes −1), ternary votes can but cost twice the reduce-phase
// traffic, so a bucket travels as binary votes (re-voting the few abstentions) unless some rank needs
// ternary ones.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "backend/communicator.h"
#include "collectives/engine/sign/sign_types.h"

namespace pride::torch_plugin {

// How DistributedLion votes: the adaptive exact default, or one kind always.
enum class LionVotes : uint8_t { kExact, kBinary, kTernary };
LionVotes parse_lion_votes(const std::string& s);  // "exact" | "binary" | "ternary"; ValueError otherwise

// (first word, elements) of each tensor piece of a bucket, words relative to the bucket's planes.
using WordRanges = std::vector<std::pair<size_t, size_t>>;

// The elements of `ranges` (bucket-relative indices, ascending) that have neither their +1 (pos) nor
// their −1 (neg) bit set, into `out`. False, with `out` incomplete, when there are more than `limit`.
bool abstaining_elements(const uint64_t* pos, const uint64_t* neg, const WordRanges& ranges, size_t limit,
                         std::vector<uint32_t>& out);

// Binary votes (the +1 plane; a 0 bit votes −1) rewritten as ternary planes: neg = ~pos inside `ranges`,
// both planes 0 (abstain) elsewhere. `nwords` words each.
void binary_as_ternary(uint64_t* pos, uint64_t* neg, size_t nwords, const WordRanges& ranges);

// What this rank brings to one bucket's agreement.
struct BucketInput {
  uint64_t layout_digest = 0;
  // sign_call_digest of the bucket's sign-allreduce (either vote kind): when every rank sent the same,
  // the call skips its own fingerprint check (SignOptions::call_agreed).
  uint64_t call_digest = 0;
  bool wants_ternary = false;      // ternary votes: too many elements of this rank's bucket must abstain
  std::vector<uint8_t> has_grad;   // per tensor of the bucket, in order: 1 if this rank has its gradient
  // The elements of this rank's bucket that abstain (ascending, at most max_revote_list), when it can
  // re-vote them; a rank that cannot sets wants_ternary for any abstention instead.
  bool can_revote = false;
  std::vector<uint32_t> abstaining;
  bool device_memory = false;      // this rank's planes travel from GPU memory (CUDA, UCX device path)
};

struct BucketAgreement {
  bool layouts_agree = true;       // false: nothing else below is meaningful, and nothing may be sent
  bool calls_agree = false;        // every rank sent the same call_digest
  VoteKind votes = VoteKind::kBinary;
  bool all_device_memory = false;  // every rank's planes travel from GPU memory
  std::vector<uint8_t> any_grad;   // per tensor of the bucket: 1 if some rank has its gradient
  // Binary votes only: the union of every rank's abstaining elements, ascending, to re-vote as ternary
  // votes (sign_allreduce_revoting). Empty: plain binary votes are exact.
  std::vector<uint32_t> revote;
};

// On the worker, the same on every rank.
BucketAgreement agree_on_bucket(Communicator& comm, const BucketInput& in);

}  // namespace pride::torch_plugin
