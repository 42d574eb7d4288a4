#include "collectives/engine/sign/sign_types.h"

#include "backend/common/error.h"

namespace pride {

const char* name(SignMode mode) { return mode == SignMode::kVote ? "vote" : "mean"; }
const char* name(VoteKind kind) { return kind == VoteKind::kBinary ? "binary" : "ternary"; }
const char* name(SignAlgorithm algorithm) {
  switch (algorithm) {
    case SignAlgorithm::kAuto: return "auto";
    case SignAlgorithm::kRing: return "ring";
    case SignAlgorithm::kTree: return "tree";
    case SignAlgorithm::kDirect: return "direct";
    case SignAlgorithm::kAllgather: return "allgather";
    case SignAlgorithm::kHier: return "hier";
  }
  return "?";
}

SignMode parse_sign_mode(const std::string& s) {
  if (s == "vote") return SignMode::kVote;
  if (s == "mean") return SignMode::kMean;
  throw InvalidArgument("mode must be \"vote\" or \"mean\", got \"" + s + "\"");
}

VoteKind parse_vote_kind(const std::string& s) {
  if (s == "binary") return VoteKind::kBinary;
  if (s == "ternary") return VoteKind::kTernary;
  throw InvalidArgument("votes must be \"binary\" or \"ternary\", got \"" + s + "\"");
}

SignAlgorithm parse_sign_algorithm(const std::string& s) {
  for (auto a : {SignAlgorithm::kAuto, SignAlgorithm::kRing, SignAlgorithm::kTree, SignAlgorithm::kDirect,
                 SignAlgorithm::kAllgather, SignAlgorithm::kHier}) {
    if (s == name(a)) return a;
  }
  throw InvalidArgument("the algorithm must be one of auto, ring, tree, direct, allgather, hier; "
                        "got \"" + s + "\"");
}

}  // namespace pride
