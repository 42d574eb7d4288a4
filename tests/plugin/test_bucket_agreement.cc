// DistributedLion's bucket agreement (torch_plugin/bucket_agreement.h) on 4 ranks: which vote kind and
// which re-vote list U the ranks agree on, step after step, as each bucket's remembered union is kept,
// extended, refreshed, shrunk or refused. The invariant that makes the result exact is checked against
// the ranks' own lists at every step: binary votes only with a U that holds every rank's abstentions,
// the same U on every rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <iterator>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "collectives/engine/sign/sparse_abstentions.h"
#include "tests/engine/rank_threads.h"
#include "torch_plugin/bucket_agreement.h"

namespace pride::torch_plugin {
namespace {

constexpr int kRanks = 4;
constexpr size_t kNumel = 4096;  // max_revote_list: 4096 / (4 · 40) = 25; with a memory, lists up to 200

// One rank's ternary planes: every element votes +1 or −1, except `abstaining` (both bits 0).
struct Planes {
  std::vector<uint64_t> pos, neg;
};

Planes planes_abstaining(const std::vector<uint32_t>& abstaining) {
  Planes p{std::vector<uint64_t>(kNumel / 64, 0x5555555555555555ull), {}};
  for (uint64_t& w : p.pos) p.neg.push_back(~w);
  for (uint32_t e : abstaining) {
    p.pos[e / 64] &= ~(uint64_t(1) << (e % 64));
    p.neg[e / 64] &= ~(uint64_t(1) << (e % 64));
  }
  return p;
}

// Which ranks describe their abstentions as the CUDA step does, from a list of them (describe_abstentions),
// rather than from their planes as the CPU step does: a bit per rank, the test's parameter. Every scenario
// runs with none, some and all of them: the agreements must be the same.
int g_listing_ranks = 0;

bool lists_its_abstentions(int rank) { return (g_listing_ranks >> rank) & 1; }

// What distributed_lion.cc (or, for a listing rank, distributed_lion_cuda.cc) gives agree_on_bucket for
// this rank's planes.
BucketInput input_for(const Planes& planes, const RememberedUnion* memory, bool listing = false) {
  BucketInput in;
  in.layout_digest = 0x1234;
  in.bucket_numel = kNumel;
  in.call_digest = 0x5678;
  in.has_grad = {1};
  in.can_revote = true;
  const WordRanges all{{0, kNumel}};
  const size_t limit = abstention_list_limit(kNumel, kRanks, memory != nullptr);
  in.memory_key = remembered_union_key(0, kNumel);
  if (listing) {
    // As the device lists them: all of them up to its capacity, in no order, sorted by the step.
    std::vector<uint32_t> listed;
    const size_t capacity = abstentions_worth_listing(kNumel, kRanks, memory, in.memory_key);
    const bool complete = abstaining_elements(planes.pos.data(), planes.neg.data(), all, capacity, listed);
    if (!complete) listed.clear();
    describe_abstentions(listed, complete, limit, max_revote_list(kNumel, kRanks), memory, in);
    return in;
  }
  in.abstaining_complete = abstaining_elements(planes.pos.data(), planes.neg.data(), all, limit, in.abstaining);
  if (memory != nullptr) {
    in.outside_complete = abstaining_outside_union(*memory, in.memory_key, planes.pos.data(), planes.neg.data(), all,
                                                   limit, in.outside_union);
    in.voting_complete = voting_at(memory->everywhere, planes.pos.data(), planes.neg.data(),
                                   max_revote_list(kNumel, kRanks), in.voting_where_all_abstained);
  }
  return in;
}

// `count` elements from `first` on, `stride` apart.
std::vector<uint32_t> spaced(uint32_t first, uint32_t count, uint32_t stride = 7) {
  std::vector<uint32_t> out;
  for (uint32_t k = 0; k < count; ++k) out.push_back(first + k * stride);
  return out;
}

std::vector<uint32_t> sorted_union(const std::vector<std::vector<uint32_t>>& lists) {
  std::set<uint32_t> all;
  for (const auto& l : lists) all.insert(l.begin(), l.end());
  return {all.begin(), all.end()};
}

// What each rank saw at one step.
struct Seen {
  VoteKind votes = VoteKind::kTernary;
  std::vector<uint32_t> revote, everywhere;
  uint64_t remembered_digest = 0;
  size_t remembered = 0;
};

// Runs `steps` agreements on kRanks ranks; lists(step, rank) are that rank's abstaining elements, and
// forget(step, rank) drops that rank's memory before the step (a new optimizer). Ranks for which
// has_memory(rank) is false have none (nullptr: every rank has one).
std::vector<std::vector<Seen>> agree_for_steps(int steps, const std::function<std::vector<uint32_t>(int, int)>& lists,
                                               const std::function<bool(int, int)>& forget = nullptr,
                                               const std::function<bool(int)>& has_memory = nullptr) {
  auto seen = std::vector<std::vector<Seen>>(size_t(steps), std::vector<Seen>(size_t(kRanks)));
  testing::run_ranks(kRanks, [&](Communicator& comm) {
    RememberedUnion memory;
    for (int step = 0; step < steps; ++step) {
      if (forget && forget(step, comm.rank())) memory = RememberedUnion{};
      RememberedUnion* m = !has_memory || has_memory(comm.rank()) ? &memory : nullptr;
      const BucketInput in =
          input_for(planes_abstaining(lists(step, comm.rank())), m, lists_its_abstentions(comm.rank()));
      const BucketAgreement a = agree_on_bucket(comm, in, m);
      ASSERT_TRUE(a.layouts_agree);
      seen[size_t(step)][size_t(comm.rank())] = {a.votes, a.revote, a.abstain_everywhere, memory.digest,
                                                 memory.elements.size()};
    }
  });
  return seen;
}

class BucketAgreement : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override { g_listing_ranks = GetParam(); }
  void TearDown() override { g_listing_ranks = 0; }
};

// Every rank agreed on the same thing, and binary votes re-vote a U that, with the elements given as
// abstaining everywhere, holds every rank's abstentions; those elements abstain on every rank.
void expect_exact_and_agreed(const std::vector<std::vector<Seen>>& seen,
                             const std::function<std::vector<uint32_t>(int, int)>& lists) {
  for (size_t step = 0; step < seen.size(); ++step) {
    for (int r = 0; r < kRanks; ++r) {
      EXPECT_EQ(seen[step][r].votes, seen[step][0].votes) << "step " << step << " rank " << r;
      EXPECT_EQ(seen[step][r].revote, seen[step][0].revote) << "step " << step << " rank " << r;
      EXPECT_EQ(seen[step][r].everywhere, seen[step][0].everywhere) << "step " << step << " rank " << r;
      // Ranks that remember something remember the same (a rank without a memory, or one that forgot
      // and has not agreed on a new U yet, has none).
      if (seen[step][r].remembered_digest != 0 && seen[step][0].remembered_digest != 0) {
        EXPECT_EQ(seen[step][r].remembered_digest, seen[step][0].remembered_digest) << "step " << step << " rank " << r;
      }
      if (seen[step][0].votes != VoteKind::kBinary) continue;
      const std::vector<uint32_t> mine = lists(int(step), r);
      const std::vector<uint32_t> covered = sorted_union({seen[step][0].revote, seen[step][0].everywhere});
      EXPECT_TRUE(std::includes(covered.begin(), covered.end(), mine.begin(), mine.end()))
          << "step " << step << ": rank " << r << " abstains outside the re-voted elements";
      const auto& all = seen[step][0].everywhere;
      EXPECT_TRUE(std::includes(mine.begin(), mine.end(), all.begin(), all.end()))
          << "step " << step << ": rank " << r << " votes where every rank is taken to abstain";
    }
  }
}

TEST_P(BucketAgreement, RemembersTheUnionExtendsItAndBacksOffFromLongListsThatDoNotLast) {
  // Rank r's abstentions: 40 at step 0 (more than the 25 a step may list), then the first 35 of them
  // (a subset: U is re-used), plus 3 new ones on rank 2 (U is extended by them alone), then 100 new on
  // rank 1 (too many to extend: a long refresh), then on rank 3 30 new ones a step, different each step
  // until step 8: no refresh lasts, so the next long refresh waits 2 agreements, then 4.
  auto base = [](int r, uint32_t count) { return spaced(uint32_t(r) * 1000, count); };
  auto lists = [&](int step, int r) -> std::vector<uint32_t> {
    std::vector<uint32_t> l = base(r, step == 0 ? 40 : 35);
    if (step >= 2 && r == 2) l = sorted_union({l, spaced(3, 3, 1)});
    if (step >= 3 && r == 1) l = sorted_union({l, spaced(4001 - 99 * 5, 100, 5)});
    if (step >= 4 && r == 3) l = sorted_union({l, spaced(300 + uint32_t(std::min(step, 8) - 4) * 100, 30, 3)});
    return l;
  };
  const auto seen = agree_for_steps(14, lists);
  expect_exact_and_agreed(seen, lists);
  auto lists_at = [&](int step) {
    std::vector<std::vector<uint32_t>> l;
    for (int r = 0; r < kRanks; ++r) l.push_back(lists(step, r));
    return l;
  };
  // 0: a long refresh, U = the union of the lists.
  EXPECT_EQ(seen[0][0].votes, VoteKind::kBinary);
  EXPECT_EQ(seen[0][0].revote, sorted_union(lists_at(0)));
  // 1: every list inside U: U again, though fewer elements abstain now.
  EXPECT_EQ(seen[1][0].revote, seen[0][0].revote);
  // 2: three outside it: U plus those three.
  EXPECT_EQ(seen[2][0].revote, sorted_union({seen[1][0].revote, spaced(3, 3, 1)}));
  // 3: a hundred outside: made again from the lists.
  EXPECT_EQ(seen[3][0].votes, VoteKind::kBinary);
  EXPECT_EQ(seen[3][0].revote, sorted_union(lists_at(3)));
  // 4: thirty outside right after a long refresh: ternary, and the next long refresh waits 2 agreements.
  EXPECT_EQ(seen[4][0].votes, VoteKind::kTernary);
  EXPECT_EQ(seen[5][0].votes, VoteKind::kTernary);
  EXPECT_EQ(seen[6][0].votes, VoteKind::kTernary);
  // 7: refreshed; 8: a new list outside again right after: ternary, and the next waits 4 agreements.
  EXPECT_EQ(seen[7][0].votes, VoteKind::kBinary);
  EXPECT_EQ(seen[7][0].revote, sorted_union(lists_at(7)));
  for (int step : {8, 9, 10, 11, 12}) EXPECT_EQ(seen[size_t(step)][0].votes, VoteKind::kTernary) << step;
  EXPECT_EQ(seen[13][0].votes, VoteKind::kBinary);
  EXPECT_EQ(seen[13][0].revote, sorted_union(lists_at(13)));
}

TEST_P(BucketAgreement, AUnionThatWasReusedLeavesTheNextLongRefreshFree) {
  // A long refresh re-used at the next step does not hold back the one after; the one after that, not
  // re-used, does.
  auto lists = [](int step, int r) {
    return sorted_union({spaced(uint32_t(r) * 1000, 40), step >= 2 ? spaced(3000 + uint32_t(step) * 50, 30) :
                                                                      std::vector<uint32_t>{}});
  };
  const auto seen = agree_for_steps(5, lists);
  expect_exact_and_agreed(seen, lists);
  EXPECT_EQ(seen[1][0].revote, seen[0][0].revote);    // re-used
  EXPECT_EQ(seen[2][0].votes, VoteKind::kBinary);      // refreshed (not right after a refresh)
  EXPECT_EQ(seen[3][0].votes, VoteKind::kTernary);     // right after it, not re-used: waits 2
  EXPECT_EQ(seen[4][0].votes, VoteKind::kTernary);
}

TEST_P(BucketAgreement, ARankThatForgotMakesEveryRankRefresh) {
  // Rank 0 loses its memory at step 2 (a new optimizer): the digests differ, so the ranks agree on a new
  // U from the lists instead of re-using one that rank 0 does not have; then all remember it again.
  auto lists = [](int step, int r) { return spaced(uint32_t(r) * 1000 + (step >= 2 ? 1 : 0), step >= 2 ? 20 : 30); };
  const auto seen = agree_for_steps(4, lists, [](int step, int r) { return step == 2 && r == 0; });
  expect_exact_and_agreed(seen, lists);
  auto union_at = [&](int step) {
    std::vector<std::vector<uint32_t>> l;
    for (int r = 0; r < kRanks; ++r) l.push_back(lists(step, r));
    return sorted_union(l);
  };
  EXPECT_EQ(seen[1][0].revote, union_at(0));
  EXPECT_EQ(seen[2][0].revote, union_at(2));  // not U ∪ the new elements: made from today's lists
  EXPECT_EQ(seen[3][0].revote, union_at(2));
  EXPECT_NE(seen[3][0].remembered_digest, 0u);
}

TEST_P(BucketAgreement, AUnionMuchLargerThanTodaysListsIsMadeAgain) {
  // 140 abstentions a rank at step 0, 20 from step 1 on: a quarter fewer than U was made of, so U is made
  // again from today's lists, once.
  auto lists = [](int step, int r) { return spaced(uint32_t(r) * 1000, step == 0 ? 140 : 20); };
  const auto seen = agree_for_steps(3, lists);
  expect_exact_and_agreed(seen, lists);
  EXPECT_EQ(seen[0][0].revote.size(), 4u * 140);
  EXPECT_EQ(seen[1][0].revote.size(), 4u * 20);
  EXPECT_EQ(seen[2][0].revote, seen[1][0].revote);
}

TEST_P(BucketAgreement, WhereEveryRankAbstainsNothingIsReVotedUntilManyRanksVoteThere) {
  // 30 elements abstain on every rank (units dead everywhere), 20 more on each rank alone. U is made of
  // the lists at step 0; only the 80 elements of one rank alone are re-voted, at step 1 too. At step 2
  // rank 1 votes at one of the 30: it is re-voted from then on, the other 29 still are not. At step 4
  // rank 0 votes at all 29 (more than the 25 a step may list): all of U is re-voted.
  const std::vector<uint32_t> dead = spaced(2000, 30, 11);
  auto lists = [&](int step, int r) {
    std::vector<uint32_t> everyone = dead;
    if (step >= 2 && r == 1) everyone.erase(everyone.begin() + 7);
    if (step >= 4 && r == 0) everyone.clear();
    return sorted_union({everyone, spaced(uint32_t(r) * 500 + 1, 20)});
  };
  const auto seen = agree_for_steps(6, lists);
  expect_exact_and_agreed(seen, lists);
  std::vector<std::vector<uint32_t>> own;
  for (int r = 0; r < kRanks; ++r) own.push_back(spaced(uint32_t(r) * 500 + 1, 20));
  for (int step : {0, 1}) {
    EXPECT_EQ(seen[size_t(step)][0].votes, VoteKind::kBinary) << step;
    EXPECT_EQ(seen[size_t(step)][0].everywhere, dead) << step;
    EXPECT_EQ(seen[size_t(step)][0].revote, sorted_union(own)) << step;
  }
  std::vector<uint32_t> still_dead = dead;
  still_dead.erase(still_dead.begin() + 7);
  for (int step : {2, 3}) {
    EXPECT_EQ(seen[size_t(step)][0].everywhere, still_dead) << step;
    EXPECT_EQ(seen[size_t(step)][0].revote, sorted_union({{dead[7]}, sorted_union(own)})) << step;
  }
  for (int step : {4, 5}) {
    EXPECT_TRUE(seen[size_t(step)][0].everywhere.empty()) << step;
    EXPECT_EQ(seen[size_t(step)][0].revote, sorted_union({dead, sorted_union(own)})) << step;
  }
}

TEST_P(BucketAgreement, WithoutAMemoryLongListsAreTernaryAsBefore) {
  auto lists = [](int step, int r) { return spaced(uint32_t(r) * 1000, step == 0 ? 40 : 20); };
  const auto seen = agree_for_steps(2, lists, nullptr, [](int) { return false; });
  expect_exact_and_agreed(seen, lists);
  EXPECT_EQ(seen[0][0].votes, VoteKind::kTernary);  // 40 > 25
  EXPECT_EQ(seen[1][0].votes, VoteKind::kBinary);   // 20: listed and re-voted
  EXPECT_EQ(seen[1][0].revote.size(), 4u * 20);
}

TEST_P(BucketAgreement, RanksWithAndWithoutAMemoryAgree) {
  // Ranks 0 and 1 remember, 2 and 3 do not (another caller of the step). 30 abstentions a rank fit a
  // remembering rank's list but not the others': every rank goes ternary (no rank may start an
  // all-gather the others do not join). 40 on ranks 0 and 1 only, 20 on 2 and 3: the same. 20
  // everywhere: listed and re-voted by all.
  auto lists = [](int step, int r) {
    const uint32_t count = step == 0 ? 30 : step == 1 ? (r < 2 ? 40 : 20) : 20;
    return spaced(uint32_t(r) * 1000, count);
  };
  const auto seen = agree_for_steps(3, lists, nullptr, [](int r) { return r < 2; });
  expect_exact_and_agreed(seen, lists);
  EXPECT_EQ(seen[0][0].votes, VoteKind::kTernary);
  EXPECT_EQ(seen[1][0].votes, VoteKind::kTernary);
  EXPECT_EQ(seen[2][0].votes, VoteKind::kBinary);
  EXPECT_EQ(seen[2][0].revote.size(), 4u * 20);
}

TEST_P(BucketAgreement, ARankThatForgotWhileTheOthersBackOffAgreesWithThem) {
  // Ranks 1-3 are backing off from a long refresh that did not last (steps 0-1) when rank 0 loses its
  // memory (step 2): its wait is 0, theirs is not; every rank must still make the same choice.
  auto lists = [](int step, int r) {
    return sorted_union({spaced(uint32_t(r) * 1000, 30), spaced(3000 + uint32_t(step) * 50, 30)});
  };
  const auto seen = agree_for_steps(6, lists, [](int step, int r) { return step == 2 && r == 0; });
  expect_exact_and_agreed(seen, lists);
  EXPECT_EQ(seen[0][0].votes, VoteKind::kBinary);   // long refresh
  EXPECT_EQ(seen[1][0].votes, VoteKind::kTernary);  // 30 new ones outside U: not re-used, wait 2
  EXPECT_EQ(seen[2][0].votes, VoteKind::kTernary);  // still waiting on ranks 1-3
}

// A listing rank's input (describe_abstentions, from every abstention up to abstentions_worth_listing)
// equals the CPU step's from its planes, field for field, over list sizes around the limits (25 a step,
// 200 with a memory) and memories of each kind: none, empty, another bucket's, and unions that hold most
// or a quarter of the abstentions, with and without elements where every rank abstained.
TEST(DescribeAbstentions, AListGivesTheSameInputAsThePlanes) {
  std::mt19937 rng(5);
  auto random_set = [&](size_t count) {
    std::set<uint32_t> s;
    while (s.size() < count) s.insert(uint32_t(rng() % kNumel));
    return std::vector<uint32_t>(s.begin(), s.end());
  };
  for (size_t count : {0, 10, 25, 26, 150, 200, 201, 260, 400, 1200}) {
    for (int kind = 0; kind < 7; ++kind) {
      const std::vector<uint32_t> abstaining = random_set(count);
      RememberedUnion memory;
      memory.key = remembered_union_key(0, kNumel);
      if (kind == 3) memory.key = remembered_union_key(64, kNumel - 64);  // another bucket's
      if (kind >= 3) {  // U: most of today's abstentions and some others; `everywhere` a part of U
        std::vector<uint32_t> u;
        for (uint32_t e : abstaining) {  // kind 6: a quarter of them, and many others
          if (kind == 6 ? rng() % 4 == 0 : rng() % 10 != 0) u.push_back(e);
        }
        u = sorted_union({u, random_set(kind == 6 ? 300 : 30)});
        memory.elements = u;
        if (kind == 5) {
          for (uint32_t e : u) {
            if (rng() % 3 == 0) memory.everywhere.push_back(e);
          }
        }
      }
      const RememberedUnion* m = kind == 0 ? nullptr : &memory;
      const Planes planes = planes_abstaining(abstaining);
      const BucketInput want = input_for(planes, m), got = input_for(planes, m, /*listing=*/true);
      const std::string where = std::to_string(count) + " abstaining, memory kind " + std::to_string(kind);
      EXPECT_EQ(got.abstaining_complete, want.abstaining_complete) << where;
      if (want.abstaining_complete) {
        EXPECT_EQ(got.abstaining, want.abstaining) << where;
      }
      EXPECT_EQ(got.outside_complete, want.outside_complete) << where;
      if (want.outside_complete) {
        EXPECT_EQ(got.outside_union, want.outside_union) << where;
      }
      // (only read when every rank's abstentions outside U are few: then this rank's list is complete)
      if (want.outside_complete) {
        EXPECT_EQ(got.voting_complete, want.voting_complete) << where;
        if (want.voting_complete) {
          EXPECT_EQ(got.voting_where_all_abstained, want.voting_where_all_abstained) << where;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AbstentionsFrom, BucketAgreement, ::testing::Values(0, 0b1010, 0b1111),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return info.param == 0 ? std::string("Planes")
                                                  : info.param == 0b1111 ? std::string("Lists")
                                                                         : std::string("PlanesAndLists");
                         });

}  // namespace
}  // namespace pride::torch_plugin
