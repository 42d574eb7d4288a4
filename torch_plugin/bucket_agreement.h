// What the ranks agree on before one bucket of DistributedLion's votes travels (SPEC §2, "The optimizer
// is exact by default"; docs/design.md, "Exact votes and missing gradients"). One MAX-allreduce of a
// fixed 22 × uint32 header per bucket carries:
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
//     at about the binary cost (on the CPU step's planes, or the CUDA step's: device_revote.h). A rank
//     that cannot re-vote says so in the header, and then any abstention sends the bucket ternary;
//   - the longest list of abstaining elements outside the union U that the bucket found at an earlier
//     step and remembered (RememberedUnion), and a digest of that U. When every rank remembers the
//     same U, U is re-voted again without the all-gather of lists, or, if some rank has a few
//     abstentions outside it (bf16's exact cancellations come and go), only those are all-gathered
//     and added to U. Lion's abstentions persist: an element with c == 0 is, all but always, one
//     whose gradient has been exactly 0 on this rank since the momentum started (a dead unit, an input
//     that is always 0), and the set only shrinks as such elements get their first gradient. So lists
//     too long to all-gather every step (the digits CNN: ~1,800 of 58k elements a rank, 362 the limit
//     at N = 4) are all-gathered once, up to 8 times that limit, and re-voted at 2 bits an element of U
//     afterwards instead of the ternary plane. Any U that contains every rank's abstentions gives the
//     exact result (sparse_abstentions.h); the digest makes every rank re-vote the same U;
//   - how many elements of U's part where every rank abstained (RememberedUnion::everywhere) this rank
//     votes at now: that part is not re-voted while none does (its count is 0), and the few where some
//     rank votes again are all-gathered and re-voted from then on.
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
  size_t bucket_numel = 0;         // the bucket's elements (what the list limits scale with)
  // sign_call_digest of the bucket's sign-allreduce (either vote kind): when every rank sent the same,
  // the call skips its own fingerprint check (SignOptions::call_agreed).
  uint64_t call_digest = 0;
  bool wants_ternary = false;      // ternary votes: too many elements of this rank's bucket must abstain
  std::vector<uint8_t> has_grad;   // per tensor of the bucket, in order: 1 if this rank has its gradient
  // The elements of this rank's bucket that abstain (ascending), when it can re-vote them; a rank that
  // cannot sets wants_ternary for any abstention instead. abstaining_complete false: there were more
  // than the list's limit (max_revote_list, or 8 times that with a memory), and `abstaining` is cut.
  bool can_revote = false;
  std::vector<uint32_t> abstaining;
  bool abstaining_complete = true;
  // The abstaining elements outside the bucket's remembered U (ascending; complete: at most the
  // list's limit). outside_complete false also when nothing is remembered for this bucket.
  std::vector<uint32_t> outside_union;
  bool outside_complete = false;
  // The elements of the remembered `everywhere` where this rank votes now (a unit come alive); complete:
  // at most max_revote_list of them.
  std::vector<uint32_t> voting_where_all_abstained;
  bool voting_complete = true;
  uint64_t memory_key = 0;         // remembered_union_key of this bucket
  bool device_memory = false;      // this rank's planes travel from GPU memory (CUDA, UCX device path)
};

struct BucketAgreement {
  bool layouts_agree = true;       // false: nothing else below is meaningful, and nothing may be sent
  bool calls_agree = false;        // every rank sent the same call_digest
  VoteKind votes = VoteKind::kBinary;
  bool all_device_memory = false;  // every rank's planes travel from GPU memory
  std::vector<uint8_t> any_grad;   // per tensor of the bucket: 1 if some rank has its gradient
  // Binary votes only: the union of every rank's abstaining elements, ascending, to re-vote as ternary
  // votes (sign_allreduce_revoting), less abstain_everywhere: those where every rank is known to abstain
  // (their count is 0, nothing sent). Both empty: plain binary votes are exact.
  std::vector<uint32_t> revote;
  std::vector<uint32_t> abstain_everywhere;
};

// What one bucket's agreements carry from step to step: the union U of abstaining elements found by its
// last all-gather of lists. Only agreed outcomes change it, so it is the same on every rank that took the
// same steps; a rank whose memory differs (a new optimizer, a resumed job) is found by the digest.
struct RememberedUnion {
  // The bucket's place (remembered_union_key). Not the layout digest: that holds the learning rate, which a
  // schedule changes every step. Any U is safe to re-use (coverage and the digest are what exactness
  // needs); the key only keeps a U of another bucket from being tried.
  uint64_t key = 0;
  std::vector<uint32_t> elements;  // U, ascending; empty: nothing remembered
  // The part of U where every rank abstained when U was made (all N lists had it), and still does: it is
  // not re-voted (its count is 0). Elements where some rank votes again (a unit come alive) are listed,
  // all-gathered and taken out of it, as long as they are few.
  std::vector<uint32_t> everywhere;
  uint64_t digest = 0;             // of key and U, compared across ranks
  uint32_t longest = 0;            // the longest list U was made of: a list much shorter now makes a smaller U
  // A refresh from lists longer than max_revote_list is paid back only if the next steps re-use U. Each
  // one that the next agreement could not re-use doubles the number of agreements to wait before the
  // next such refresh (up to 1024).
  bool checking = false;
  uint32_t backoff = 1, wait = 0;
};

// Every RememberedUnion of one DistributedLion param group, per device and dtype (_C.AbstentionMemory), by
// bucket.
struct AbstentionMemory {
  std::vector<RememberedUnion> buckets;
  void reserve(size_t count) {  // before a step: it never resizes while buckets vote
    if (buckets.size() < count) buckets.resize(count);
  }
};

// With a memory, lists up to this many times max_revote_list may be all-gathered (see above).
constexpr size_t kRememberedListFactor = 8;

// The most elements of a bucket (the steps cut larger requests to this): its elements are listed as uint32.
constexpr size_t kMaxBucketElements = size_t{1} << 31;

// How many abstaining elements of a bucket a rank lists for its agreement: max_revote_list, or
// kRememberedListFactor times that with a memory.
size_t abstention_list_limit(size_t bucket_numel, int nranks, bool with_memory);

// How many abstaining elements a rank that lists them all before its agreement (the CUDA step) must be
// able to list for describe_abstentions to decide as the CPU step does from its planes: the list's limit
// plus the size of the union remembered for `key` (abstentions inside it cost the CPU step nothing). A
// rank with more has more than `limit` outside U too, and the same header either way.
size_t abstentions_worth_listing(size_t bucket_numel, int nranks, const RememberedUnion* memory, uint64_t key);

// This rank's exact-vote side of the agreement from a list of its abstaining elements, as the CUDA step
// finds them on the device: `listed` ascending, all of them if `complete`, else none (the device had more
// than it could list). Fills in.can_revote, abstaining, outside_union and voting_where_all_abstained as the
// CPU step does from its planes (abstaining_elements up to `limit`, abstaining_outside_union up to
// `limit`, voting_at up to `short_limit`, i.e. max_revote_list); `memory` (may be null) is this bucket's,
// in.memory_key set.
void describe_abstentions(const std::vector<uint32_t>& listed, bool complete, size_t limit, size_t short_limit,
                          const RememberedUnion* memory, BucketInput& in);

// The abstaining elements of `ranges` in the planes `pos` / `neg` (bucket-relative, as abstaining_elements
// reads them) that `memory`'s U (for this `key`) lacks, into `out`. False, with `out` incomplete, when
// there are more than `limit` or nothing is remembered for `key`.
bool abstaining_outside_union(const RememberedUnion& memory, uint64_t key, const uint64_t* pos, const uint64_t* neg,
                              const WordRanges& ranges, size_t limit, std::vector<uint32_t>& out);

// The elements of `elements` where this rank votes (is not abstaining), into `out`. False, with `out`
// incomplete, when there are more than `limit`.
bool voting_at(const std::vector<uint32_t>& elements, const uint64_t* pos, const uint64_t* neg, size_t limit,
               std::vector<uint32_t>& out);

// The key of a bucket's memory: its first element and size.
uint64_t remembered_union_key(size_t begin, size_t size);

// On the worker, the same on every rank. `memory` (may be null: nothing is remembered) is this bucket's;
// in.outside_union must then hold this rank's abstentions outside it (abstaining_outside_union), and
// in.memory_key its key. The agreement updates it.
BucketAgreement agree_on_bucket(Communicator& comm, const BucketInput& in, RememberedUnion* memory = nullptr);

}  // namespace pride::torch_plugin
