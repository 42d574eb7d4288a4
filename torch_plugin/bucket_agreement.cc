#include "torch_plugin/bucket_agreement.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "collectives/engine/standard/collectives.h"

namespace pride::torch_plugin {

LionVotes parse_lion_votes(const std::string& s) {
  if (s == "exact") return LionVotes::kExact;
  if (s == "binary") return LionVotes::kBinary;
  if (s == "ternary") return LionVotes::kTernary;
  TORCH_CHECK_VALUE(false, "pride DistributedLion: votes must be 'exact', 'binary' or 'ternary', got '", s, "'");
}

namespace {

// The bits of a piece's last word that belong to it.
uint64_t tail_mask(size_t count, size_t word_in_piece, size_t words) {
  return (word_in_piece + 1 == words && count % 64 != 0) ? (uint64_t(1) << (count % 64)) - 1 : ~uint64_t(0);
}

}  // namespace

bool any_abstention(const uint64_t* pos, const uint64_t* neg, const WordRanges& ranges) {
  for (const auto& [first, count] : ranges) {
    const size_t words = (count + 63) / 64;
    for (size_t i = 0; i < words; ++i) {
      if ((~(pos[first + i] | neg[first + i]) & tail_mask(count, i, words)) != 0) return true;
    }
  }
  return false;
}

void binary_as_ternary(uint64_t* pos, uint64_t* neg, size_t nwords, const WordRanges& ranges) {
  std::vector<uint64_t> keep(nwords, 0);  // which bits are elements of a piece that voted
  for (const auto& [first, count] : ranges) {
    const size_t words = (count + 63) / 64;
    for (size_t i = 0; i < words; ++i) keep[first + i] |= tail_mask(count, i, words);
  }
  for (size_t w = 0; w < nwords; ++w) {
    pos[w] &= keep[w];
    neg[w] = ~pos[w] & keep[w];
  }
}

BucketAgreement agree_on_bucket(Communicator& comm, const BucketInput& in) {
  const bool lacks_grad = std::find(in.has_grad.begin(), in.has_grad.end(), 0) != in.has_grad.end();
  std::array<uint8_t, 18> header{};
  const uint64_t inverted = ~in.layout_digest;
  std::memcpy(header.data(), &in.layout_digest, 8);
  std::memcpy(header.data() + 8, &inverted, 8);
  header[16] = in.wants_ternary || lacks_grad ? 1 : 0;
  header[17] = lacks_grad ? 1 : 0;
  allreduce(comm, header.data(), header.size(), ScalarType::kUInt8, ReduceOp::kMax);

  BucketAgreement out;
  uint64_t high = 0, low_inverted = 0;  // max(d) and max(~d) = ~min(d), byte by byte
  std::memcpy(&high, header.data(), 8);
  std::memcpy(&low_inverted, header.data() + 8, 8);
  out.layouts_agree = high == ~low_inverted;
  if (!out.layouts_agree) return out;
  out.votes = header[16] ? VoteKind::kTernary : VoteKind::kBinary;
  out.any_grad = in.has_grad;
  if (header[17]) allreduce(comm, out.any_grad.data(), out.any_grad.size(), ScalarType::kUInt8, ReduceOp::kMax);
  return out;
}

}  // namespace pride::torch_plugin
