#include "torch_plugin/exact_votes.h"

#include <c10/util/Exception.h>

#include "collectives/engine/standard/collectives.h"

namespace pride::torch_plugin {

LionVotes parse_lion_votes(const std::string& s) {
  if (s == "exact") return LionVotes::kExact;
  if (s == "binary") return LionVotes::kBinary;
  if (s == "ternary") return LionVotes::kTernary;
  TORCH_CHECK_VALUE(false, "pride DistributedLion: votes must be 'exact', 'binary' or 'ternary', got '", s, "'");
}

bool any_abstention(const uint64_t* pos, const uint64_t* neg, const WordRanges& ranges) {
  for (const auto& [first, count] : ranges) {
    const size_t words = (count + 63) / 64;
    for (size_t i = 0; i < words; ++i) {
      uint64_t silent = ~(pos[first + i] | neg[first + i]);
      if (i + 1 == words && count % 64 != 0) silent &= (uint64_t(1) << (count % 64)) - 1;  // bits past the piece
      if (silent != 0) return true;
    }
  }
  return false;
}

SignResult sign_allreduce_exact(Communicator& comm, const uint64_t* votes, size_t numel, SignOptions options,
                                bool abstains, uint64_t* planes_out) {
  uint8_t anyone = abstains ? 1 : 0;
  allreduce(comm, &anyone, 1, ScalarType::kUInt8, ReduceOp::kMax);
  options.votes = anyone ? VoteKind::kTernary : VoteKind::kBinary;
  constexpr uint32_t kLionDtypeCode = 0x11;
  return planes_out ? sign_allreduce_planes(comm, votes, numel, options, kLionDtypeCode, planes_out)
                    : sign_allreduce_planes(comm, votes, numel, options, kLionDtypeCode);
}

}  // namespace pride::torch_plugin
