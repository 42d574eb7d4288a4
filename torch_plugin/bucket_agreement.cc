#include "torch_plugin/bucket_agreement.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <iterator>

#include "collectives/engine/sign/sparse_abstentions.h"
#include "collectives/engine/standard/collectives.h"
#include "collectives/engine/standard/common.h"

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

// Calls fn(element) for each abstaining element of `ranges` in ascending order, while it returns true;
// false if fn stopped it.
template <class Fn>
bool for_each_abstaining(const uint64_t* pos, const uint64_t* neg, const WordRanges& ranges, const Fn& fn) {
  for (const auto& [first, count] : ranges) {
    const size_t words = (count + 63) / 64;
    for (size_t i = 0; i < words; ++i) {
      for (uint64_t abstain = ~(pos[first + i] | neg[first + i]) & tail_mask(count, i, words); abstain != 0;
           abstain &= abstain - 1) {
        if (!fn(uint32_t((first + i) * 64 + size_t(__builtin_ctzll(abstain))))) return false;
      }
    }
  }
  return true;
}

}  // namespace

bool abstaining_elements(const uint64_t* pos, const uint64_t* neg, const WordRanges& ranges, size_t limit,
                         std::vector<uint32_t>& out) {
  out.clear();
  return for_each_abstaining(pos, neg, ranges, [&](uint32_t element) {
    if (out.size() == limit) return false;
    out.push_back(element);
    return true;
  });
}

bool abstaining_outside_union(const RememberedUnion& memory, uint64_t key, const uint64_t* pos, const uint64_t* neg,
                              const WordRanges& ranges, size_t limit, std::vector<uint32_t>& out) {
  out.clear();
  if (memory.elements.empty() || memory.key != key) return false;
  // Both sides ascending (ranges are in order): one merge pass.
  auto next = memory.elements.begin();
  return for_each_abstaining(pos, neg, ranges, [&](uint32_t element) {
    next = std::lower_bound(next, memory.elements.end(), element);
    if (next != memory.elements.end() && *next == element) return true;
    if (out.size() == limit) return false;
    out.push_back(element);
    return true;
  });
}

bool voting_at(const std::vector<uint32_t>& elements, const uint64_t* pos, const uint64_t* neg, size_t limit,
               std::vector<uint32_t>& out) {
  out.clear();
  for (uint32_t e : elements) {
    if ((((pos[e / 64] | neg[e / 64]) >> (e % 64)) & 1) == 0) continue;
    if (out.size() == limit) return false;
    out.push_back(e);
  }
  return true;
}

size_t abstention_list_limit(size_t bucket_numel, int nranks, bool with_memory) {
  return max_revote_list(bucket_numel, nranks) * (with_memory ? kRememberedListFactor : 1);
}

size_t abstentions_worth_listing(size_t bucket_numel, int nranks, const RememberedUnion* memory, uint64_t key) {
  const bool remembers = memory != nullptr && memory->key == key;
  return abstention_list_limit(bucket_numel, nranks, memory != nullptr) + (remembers ? memory->elements.size() : 0);
}

void describe_abstentions(const std::vector<uint32_t>& listed, bool complete, size_t limit, size_t short_limit,
                          const RememberedUnion* memory, BucketInput& in) {
  in.can_revote = true;
  in.abstaining_complete = complete && listed.size() <= limit;
  in.abstaining.assign(listed.begin(), listed.begin() + std::ptrdiff_t(std::min(listed.size(), limit)));
  in.outside_union.clear();
  in.outside_complete = false;
  in.voting_where_all_abstained.clear();
  in.voting_complete = true;
  if (memory == nullptr || memory->key != in.memory_key) return;
  if (!memory->elements.empty() && complete) {
    std::set_difference(listed.begin(), listed.end(), memory->elements.begin(), memory->elements.end(),
                        std::back_inserter(in.outside_union));
    in.outside_complete = in.outside_union.size() <= limit;
    if (!in.outside_complete) in.outside_union.resize(limit);
  }
  // (An element of `everywhere` in a tensor without a gradient here counts as voting, where the CPU step's
  // voting_at counts it as abstaining: never read, since a missing gradient makes the bucket ternary.)
  if (complete) {
    std::set_difference(memory->everywhere.begin(), memory->everywhere.end(), listed.begin(), listed.end(),
                        std::back_inserter(in.voting_where_all_abstained));
    in.voting_complete = in.voting_where_all_abstained.size() <= short_limit;
    if (!in.voting_complete) in.voting_where_all_abstained.resize(short_limit);
  } else {
    in.voting_complete = memory->everywhere.empty();
  }
}

uint64_t remembered_union_key(size_t begin, size_t size) {
  return standard::hash_sizes({begin, size});
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
  kWantsTernary, kLacksGrad, kCannotRevote, kLongestList, kOffDevice,
  kLongestOutside, kUnionLow, kUnionHigh, kUnionInvertedLow, kUnionInvertedHigh,  // the remembered U (0: none)
  kUnionLongest, kRefreshBlocked, kChecking, kLongestVoting, kHeaderFields
};

// kLongestList of a rank whose list was cut at its limit.
constexpr uint32_t kListTooLong = ~uint32_t(0);

uint64_t union_digest(uint64_t key, const RememberedUnion& memory) {
  std::vector<size_t> words{size_t(key), memory.elements.size()};
  words.insert(words.end(), memory.elements.begin(), memory.elements.end());
  words.insert(words.end(), memory.everywhere.begin(), memory.everywhere.end());
  return standard::hash_sizes(words);
}

// a \ b, both ascending.
std::vector<uint32_t> minus(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
  std::vector<uint32_t> out;
  std::set_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

// Every rank's list of abstaining elements (without repeats), each padded to `longest` with ~0,
// all-gathered; their union, and (if `in_every_list`) the elements that every rank's list has.
std::vector<uint32_t> union_of_lists(Communicator& comm, const std::vector<uint32_t>& mine, uint32_t longest,
                                     std::vector<uint32_t>* in_every_list = nullptr) {
  std::vector<uint32_t> padded(longest, ~uint32_t(0));
  std::copy(mine.begin(), mine.end(), padded.begin());
  std::vector<uint32_t> all(size_t(comm.size()) * longest);
  allgather(comm, padded.data(), padded.size() * 4, all.data());
  std::sort(all.begin(), all.end());
  std::vector<uint32_t> out;
  if (in_every_list != nullptr) in_every_list->clear();
  for (size_t i = 0; i < all.size();) {
    size_t j = i;
    while (j < all.size() && all[j] == all[i]) ++j;
    if (all[i] != ~uint32_t(0)) {
      out.push_back(all[i]);
      if (in_every_list != nullptr && j - i == size_t(comm.size())) in_every_list->push_back(all[i]);
    }
    i = j;
  }
  return out;
}

}  // namespace

BucketAgreement agree_on_bucket(Communicator& comm, const BucketInput& in, RememberedUnion* memory) {
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
  header[kLongestList] = !in.can_revote ? 0 : in.abstaining_complete ? uint32_t(in.abstaining.size()) : kListTooLong;
  header[kOffDevice] = in.device_memory ? 0 : 1;
  const bool remembers = memory != nullptr && memory->key == in.memory_key && !memory->elements.empty();
  header[kLongestOutside] =
      !in.can_revote ? 0 : remembers && in.outside_complete ? uint32_t(in.outside_union.size()) : kListTooLong;
  const uint64_t digest = remembers ? memory->digest : 0;
  header[kUnionLow] = uint32_t(digest);
  header[kUnionHigh] = uint32_t(digest >> 32);
  header[kUnionInvertedLow] = ~header[kUnionLow];
  header[kUnionInvertedHigh] = ~header[kUnionHigh];
  header[kUnionLongest] = remembers ? memory->longest : 0;
  // A rank without a memory cannot take part in a long refresh (its list stops at the short limit).
  header[kRefreshBlocked] = memory == nullptr || memory->wait > 0 ? 1 : 0;
  header[kChecking] = memory != nullptr && memory->checking ? 1 : 0;
  // how many elements of the remembered `everywhere` this rank votes at now
  header[kLongestVoting] = !remembers ? 0 : in.voting_complete ? uint32_t(in.voting_where_all_abstained.size())
                                                               : kListTooLong;
  allreduce(comm, header.data(), header.size(), ScalarType::kUInt32, ReduceOp::kMax);

  BucketAgreement out;
  // max(~h) = ~min(h): both halves of d came back intact only if every rank sent the same d
  out.layouts_agree = header[kDigestLow] == ~header[kInvertedLow] && header[kDigestHigh] == ~header[kInvertedHigh];
  if (!out.layouts_agree) return out;
  out.calls_agree = header[kCallLow] == ~header[kCallInvertedLow] && header[kCallHigh] == ~header[kCallInvertedHigh];
  out.all_device_memory = header[kOffDevice] == 0;
  out.any_grad = in.has_grad;
  if (header[kLacksGrad]) allreduce(comm, out.any_grad.data(), out.any_grad.size(), ScalarType::kUInt8, ReduceOp::kMax);

  // Everything below is decided from the reduced header alone, so every rank decides the same.
  const uint32_t longest = header[kLongestList], longest_outside = header[kLongestOutside];
  const bool forced_ternary = header[kWantsTernary] != 0 || (longest > 0 && header[kCannotRevote] != 0);
  const size_t short_list = max_revote_list(in.bucket_numel, comm.size());
  // Every rank remembers the same U: both halves of its digest came back intact, and nonzero.
  const bool same_union = header[kUnionLow] == ~header[kUnionInvertedLow] &&
                          header[kUnionHigh] == ~header[kUnionInvertedHigh] &&
                          (header[kUnionLow] | header[kUnionHigh]) != 0;
  // U can serve this step: it holds every abstention, or the few outside it are all-gathered and added.
  const bool extendable = same_union && longest_outside <= short_list;
  // The last refresh from long lists was not re-used: no other long refresh for a while.
  const bool blocked = header[kRefreshBlocked] != 0 || (header[kChecking] != 0 && !extendable);
  const bool can_refresh = longest != kListTooLong && (longest <= short_list || !blocked);
  // A U much larger than today's lists need is made again when that is affordable: the re-vote costs
  // 2 bits an element of U every step, the lists 32 bits an element once. Larger: made of lists a quarter
  // longer than today's longest, or more than twice the union today's lists could at most have.
  const size_t remembered_size = memory != nullptr ? memory->elements.size() : 0;
  const bool shrink = extendable && can_refresh &&
                      (uint64_t(longest) * 4 <= uint64_t(header[kUnionLongest]) * 3 ||
                       remembered_size > 2 * size_t(comm.size()) * longest);

  bool refreshed = false, extended = false, everywhere_changed = false;
  out.votes = VoteKind::kBinary;
  if (forced_ternary) {
    out.votes = VoteKind::kTernary;
  } else if (longest == 0) {
    // no abstentions anywhere: binary votes are exact
  } else if (extendable && !shrink) {
    std::vector<uint32_t> u = memory->elements;
    if (longest_outside > 0) {
      const std::vector<uint32_t> added = union_of_lists(comm, in.outside_union, longest_outside);
      std::vector<uint32_t> merged;
      std::set_union(u.begin(), u.end(), added.begin(), added.end(), std::back_inserter(merged));
      u = std::move(merged);
      extended = true;
    }
    // Where every rank still abstains (the added elements are outside U, so not there): U's elements
    // where some rank votes again are listed and taken out, or, when there are many, all of it.
    const uint32_t longest_voting = header[kLongestVoting];
    if (longest_voting == 0) {
      out.abstain_everywhere = memory->everywhere;
    } else if (longest_voting <= short_list) {
      out.abstain_everywhere =
          minus(memory->everywhere, union_of_lists(comm, in.voting_where_all_abstained, longest_voting));
      everywhere_changed = true;
    } else {
      everywhere_changed = !memory->everywhere.empty();
    }
    out.revote = minus(u, out.abstain_everywhere);
  } else if (can_refresh) {
    std::vector<uint32_t> everywhere;
    out.revote = minus(union_of_lists(comm, in.abstaining, longest, &everywhere), everywhere);
    out.abstain_everywhere = std::move(everywhere);
    refreshed = true;
  } else {
    out.votes = VoteKind::kTernary;
  }

  if (memory != nullptr) {
    if (header[kChecking] != 0) {  // the agreement after a long refresh: did it pay?
      memory->backoff = extendable ? 1 : std::min<uint32_t>(2 * memory->backoff, 1024);
      memory->wait = extendable ? 0 : memory->backoff;
      memory->checking = false;
    } else if (memory->wait > 0) {
      --memory->wait;
    }
    if (refreshed || extended || everywhere_changed) {
      std::vector<uint32_t> u;  // U again: the re-voted elements and those known to abstain everywhere
      std::set_union(out.revote.begin(), out.revote.end(), out.abstain_everywhere.begin(),
                     out.abstain_everywhere.end(), std::back_inserter(u));
      memory->key = in.memory_key;
      memory->elements = std::move(u);
      memory->everywhere = out.abstain_everywhere;
      memory->digest = union_digest(in.memory_key, *memory);
    }
    if (refreshed) {
      memory->longest = longest;
      memory->checking = longest > short_list;
    }
  }
  return out;
}

}  // namespace pride::torch_plugin
