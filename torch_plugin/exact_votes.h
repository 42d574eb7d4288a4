// The optimizer's exact sign semantics (SPEC §2, "The optimizer is exact by default"): an element whose
// local update c is exactly 0 (or NaN) abstains, as sign(0) = 0 in Algorithm 1 and in plain Lion. Binary
// votes cannot abstain (0 would vote −1 and drift the parameter by lr every step), ternary votes can but
// cost twice the reduce-phase traffic. So each bucket is packed with both planes, every rank says
// whether its bucket has an abstention, and the bucket travels with ternary votes only when some rank
// has one; otherwise as binary votes, which then mean exactly the same thing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "collectives/engine/sign/sign_allreduce.h"

namespace pride::torch_plugin {

// How DistributedLion votes: the adaptive exact default, or one kind always.
enum class LionVotes : uint8_t { kExact, kBinary, kTernary };
LionVotes parse_lion_votes(const std::string& s);  // "exact" | "binary" | "ternary"; ValueError otherwise

// (first word, elements) of each tensor piece of a bucket, words relative to the bucket's planes.
using WordRanges = std::vector<std::pair<size_t, size_t>>;

// Whether any element of `ranges` has neither its +1 (pos) nor its −1 (neg) bit set.
bool any_abstention(const uint64_t* pos, const uint64_t* neg, const WordRanges& ranges);

// On the worker: one bucket's sign-allreduce with the vote kind every rank agrees on. `votes` holds the
// +1 plane then the −1 plane (nwords each); `abstains` is this rank's any_abstention(). A one-byte MAX
// allreduce decides; the bucket then goes as ternary votes, or as binary votes (the +1 plane alone).
SignResult sign_allreduce_exact(Communicator& comm, const uint64_t* votes, size_t numel, SignOptions options,
                                bool abstains, uint64_t* planes_out);

}  // namespace pride::torch_plugin
