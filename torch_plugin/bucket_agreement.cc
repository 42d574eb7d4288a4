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

bool abstaining_elements(const uint64_t* pos, const uint64_t* neg, const WordRanges& ranges, size_t limit,
                         std::vector<uint32_t>& out) {
  out.clear();
  for (const auto& [first, count] : ranges) {
    const size_t words = (count + 63) / 64;
    for (size_t i = 0; i < words; ++i) {
      for (uint64_t abstain = ~(pos[first + i] | neg[first + i]) & tail_mask(count, i, words); abstain != 0;
           abstain &= abstain - 1) {
        if (out.size() == limit) return false;
        out.push_back(uint32_t((first + i) * 64 + size_t(__builtin_ctzll(abstain))));
      }
    }
  }
  return true;
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

namespace {

// The header's fields, uint32 each, reduced with MAX.
enum HeaderField : size_t {
  kDigestLow, kDigestHigh, kInvertedLow, kInvertedHigh,  // d and ~d in two halves each
  kCallLow, kCallHigh, kCallInvertedLow, kCallInvertedHigh,  // the same for the call digest
  kWantsTernary, kLacksGrad, kCannotRevote, kLongestList, kOffDevice, kHeaderFields
};

// Every rank's list of abstaining elements, each padded to `longest` with ~0, all-gathered; their union.
std::vector<uint32_t> union_of_lists(Communicator& comm, const std::vector<uint32_t>& mine, uint32_t longest) {
  std::vector<uint32_t> padded(longest, ~uint32_t(0));
  std::copy(mine.begin(), mine.end(), padded.begin());
  std::vector<uint32_t> all(size_t(comm.size()) * longest);
  allgather(comm, padded.data(), padded.size() * 4, all.data());
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  if (!all.empty() && all.back() == ~uint32_t(0)) all.pop_back();
  return all;
}

}  // namespace

BucketAgreement agree_on_bucket(Communicator& comm, const BucketInput& in) {
  const bool lacks_grad = std::find(in.has_grad.begin(), in.has_grad.end(), 0) != in.has_grad.end();
  std::array<uint32_t, kHeaderFields> header{};
  header[kDigestLow] = uint32_t(in.layout_digest);
  header[kDigestHigh] = uint32_t(in.layout_digest >> 32);
  header[kInvertedLow] = ~header[kDigestLow];
  header[kInvertedHigh] = ~header[kDigestHigh];
  header[kCallLow] = uint32_t(in.call_digest);
  header[kCallHigh] = uint32_t(in.call_digest >> 32);
  header[kCallInvertedLow] = ~header[kCallLow];
  header[kCallInvertedHigh] = ~header[kCallHigh];
  header[kWantsTernary] = in.wants_ternary || lacks_grad ? 1 : 0;
  header[kLacksGrad] = lacks_grad ? 1 : 0;
  header[kCannotRevote] = in.can_revote ? 0 : 1;
  header[kLongestList] = in.can_revote ? uint32_t(in.abstaining.size()) : 0;
  header[kOffDevice] = in.device_memory ? 0 : 1;
  allreduce(comm, header.data(), header.size(), ScalarType::kUInt32, ReduceOp::kMax);

  BucketAgreement out;
  // max(~h) = ~min(h): both halves of d came back intact only if every rank sent the same d
  out.layouts_agree = header[kDigestLow] == ~header[kInvertedLow] && header[kDigestHigh] == ~header[kInvertedHigh];
  if (!out.layouts_agree) return out;
  out.calls_agree = header[kCallLow] == ~header[kCallInvertedLow] && header[kCallHigh] == ~header[kCallInvertedHigh];
  const uint32_t longest = header[kLongestList];
  const bool ternary = header[kWantsTernary] != 0 || (longest > 0 && header[kCannotRevote] != 0);
  out.votes = ternary ? VoteKind::kTernary : VoteKind::kBinary;
  out.all_device_memory = header[kOffDevice] == 0;
  out.any_grad = in.has_grad;
  if (header[kLacksGrad]) allreduce(comm, out.any_grad.data(), out.any_grad.size(), ScalarType::kUInt8, ReduceOp::kMax);
  if (!ternary && longest > 0) out.revote = union_of_lists(comm, in.abstaining, longest);
  return out;
}

}  // namespace pride::torch_plugin
