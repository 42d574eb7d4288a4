// The level vote (collectives/engine/compressed/level_vote.h) against an int32 oracle: every rank's
// int8 values summed as plain ints, the sign taken. Every rank must get the oracle's values, on sizes
// around word and chunk edges, with the extreme levels and exact ties (sums of zero) present.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/common/error.h"
#include "backend/common/settings.h"
#include "collectives/bits/count_coding.h"
#include "collectives/bits/levels.h"
#include "collectives/bits/trit_coding.h"
#include "collectives/engine/compressed/level_vote.h"
#include "tests/engine/rank_threads.h"

namespace pride {
namespace {

using testing::run_ranks;

std::vector<std::vector<int8_t>> random_levels(int n, size_t numel, int s, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> level(-s, s);
  std::vector<std::vector<int8_t>> q(size_t(n), std::vector<int8_t>(numel, 0));
  for (int i = 0; i < n; ++i) {
    for (size_t k = 0; k < numel; ++k) q[i][k] = int8_t(level(rng));
  }
  if (numel >= 4) {
    for (int i = 0; i < n; ++i) {
      q[i][0] = int8_t(s);                     // the largest sum
      q[i][1] = int8_t(-s);                    // the smallest
      q[i][2] = int8_t(i % 2 ? s : -s);        // a tie at even N
      q[i][3] = 0;                             // every rank abstains
    }
  }
  return q;
}

std::vector<int8_t> oracle(const std::vector<std::vector<int8_t>>& q) {
  std::vector<int8_t> want(q[0].size());
  for (size_t k = 0; k < want.size(); ++k) {
    int32_t sum = 0;
    for (const auto& rank : q) sum += int32_t(rank[k]);
    want[k] = int8_t(sum > 0 ? 1 : sum < 0 ? -1 : 0);
  }
  return want;
}

// PRIDE_RESULT_CODING for the body of a test, then back to the default.
struct ScopedCoding {
  explicit ScopedCoding(const char* coding) {
    setenv("PRIDE_RESULT_CODING", coding, 1);
    Settings::reload();
  }
  ~ScopedCoding() {
    unsetenv("PRIDE_RESULT_CODING");
    Settings::reload();
  }
};

void check_against_the_oracle(std::initializer_list<int> levels_of_n_ranks_extra) {
  for (int n : {1, 2, 3, 4, 5}) {
    // 127 at any N: the API allows it (the caller keeps sums in range), and at N = 4 the owner's counter
    // needs planes_for(4 · 254) = 10 planes.
    std::vector<int> levels{1, 127 / n, 127};
    levels.insert(levels.end(), levels_of_n_ranks_extra);
    for (int s : levels) {
      for (size_t numel : {size_t(1), size_t(5), size_t(63), size_t(64), size_t(65), size_t(300), size_t(4099)}) {
        SCOPED_TRACE(::testing::Message() << n << " ranks, max level " << s << ", numel " << numel);
        const auto q = random_levels(n, numel, s, unsigned(97 * n + 13 * s) + unsigned(numel));
        const std::vector<int8_t> want = oracle(q);
        auto got = q;
        run_ranks(n, [&](Communicator& comm) {
          auto& mine = got[size_t(comm.rank())];
          level_vote(comm, mine.data(), numel, s);
        });
        for (int i = 0; i < n; ++i) {
          for (size_t k = 0; k < numel; ++k) {
            ASSERT_EQ(int(got[i][k]), int(want[k])) << "rank " << i << " element " << k;
          }
        }
      }
    }
  }
}

TEST(LevelVote, EveryRankGetsTheSignOfTheInt32Sum) {
  ScopedCoding planes("planes");
  check_against_the_oracle({});
}

// The same with both phases coded: the results as trits, the levels in base 2s + 1 where that packs
// better (s = 1, 2, 4, 32 below; not 127 / N for N = 2 … 5, nor 127, which travel as planes).
TEST(LevelVote, CodedPhasesGiveTheSameSigns) {
  ScopedCoding packed("packed");
  check_against_the_oracle({2, 4, 32});
}

TEST(LevelVote, SendsItsPlanesAndTwoResultPlanes) {
  ScopedCoding planes("planes");
  constexpr int n = 4, s = 31;
  constexpr size_t numel = size_t(1) << 16;
  std::vector<uint64_t> sent(n);
  run_ranks(n, [&](Communicator& comm) {
    std::vector<int8_t> q(numel, int8_t(comm.rank() - 1));
    comm.reset_traffic();
    level_vote(comm, q.data(), numel, s);
    sent[size_t(comm.rank())] = comm.traffic().at("level_direct").bytes_sent;
  });
  const double formula = level_vote_wire_bits(n, s);
  EXPECT_DOUBLE_EQ(formula, 0.75 * (6 + 2));  // six planes at s = 31, then the +1 and tie planes
  // Plus the range agreement: 4 bytes riding in each of the fingerprint check's log2(4) = 2 messages.
  for (int i = 0; i < n; ++i) EXPECT_EQ(double(sent[i]), formula * numel / 8 + 2 * 4) << "rank " << i;
}

// Each phase coded alone and both, measured to the byte: the levels' chunks in whole limbs, the results'
// in whole trit bytes, where the formula gives their density.
TEST(LevelVote, CodedPhasesSendWhatTheirCodesCost) {
  constexpr int n = 4;
  constexpr size_t numel = size_t(1) << 16;  // 1024 words, chunks of 256
  for (int s : {1, 31}) {
    for (const char* setting : {"trits", "counts", "packed"}) {
      ScopedCoding coding(setting);
      const LevelCoding chosen = select_level_coding(n, s, numel, 1, 1.0);
      EXPECT_EQ(chosen.trit_results, std::string(setting) != "counts") << setting;
      EXPECT_EQ(chosen.packed_levels, s == 1 && std::string(setting) != "trits") << setting << " s " << s;
      std::vector<uint64_t> sent(n);
      auto q = random_levels(n, numel, s, unsigned(s) * 7 + unsigned(setting[0]));
      const std::vector<int8_t> want = oracle(q);
      run_ranks(n, [&](Communicator& comm) {
        auto& mine = q[size_t(comm.rank())];
        comm.reset_traffic();
        level_vote(comm, mine.data(), numel, s);
        sent[size_t(comm.rank())] = comm.traffic().at("level_direct").bytes_sent;
      });
      for (int i = 0; i < n; ++i) ASSERT_EQ(q[size_t(i)], want) << setting << " s " << s << " rank " << i;
      const size_t chunk_words = 256;
      const size_t levels = chosen.packed_levels
                                ? bits::counts::bytes_for_words(bits::counts::make_code(3), chunk_words)
                                : size_t(bits::level_planes(s)) * chunk_words * 8;
      const size_t results = chosen.trit_results ? bits::trits::bytes_for_words(chunk_words) : 2 * chunk_words * 8;
      for (int i = 0; i < n; ++i) {
        EXPECT_EQ(sent[i], 3 * levels + 3 * results + 2 * 4) << setting << " s " << s << " rank " << i;
        EXPECT_NEAR(double(sent[i] - 8) * 8 / double(numel), level_vote_wire_bits(n, s, chosen), 0.005)
            << setting << " s " << s;
      }
    }
  }
  // Levels ±1 at N = 4 with both coded: 2.4 bits per element instead of 3.
  EXPECT_DOUBLE_EQ(level_vote_wire_bits(4, 1, {true, true}), 0.75 * (1.6 + 1.6));
  EXPECT_DOUBLE_EQ(level_vote_wire_bits(4, 1), 3.0);
}

// Auto codes where the link saves more time than coding costs; a level whose base packs no better never.
TEST(LevelVote, CodingChosenWhereItSavesTime) {
  const size_t numel = size_t(1) << 22;
  setenv("PRIDE_LINK_BANDWIDTH_GBPS", "0.2", 1);
  {
    ScopedCoding coding("auto");
    const LevelCoding slow = select_level_coding(4, 1, numel, 4, 1.0);
    EXPECT_TRUE(slow.trit_results);
    EXPECT_TRUE(slow.packed_levels);
    EXPECT_FALSE(select_level_coding(4, 31, numel, 4, 1.0).packed_levels);  // base 63: 6.4 bits, not 6
    EXPECT_TRUE(select_level_coding(4, 31, numel, 4, 1.0).trit_results);
    EXPECT_FALSE(select_level_coding(1, 1, numel, 1, 1.0).trit_results);  // nothing travels
    EXPECT_TRUE(select_level_coding(4, 1, numel, 2, 2.0).trit_results);  // two nodes of two ranks, two ranks a core
  }
  setenv("PRIDE_LINK_BANDWIDTH_GBPS", "400", 1);
  {
    ScopedCoding coding("auto");
    const LevelCoding fast = select_level_coding(4, 1, numel, 4, 1.0);
    EXPECT_FALSE(fast.trit_results);
    EXPECT_FALSE(fast.packed_levels);
  }
  unsetenv("PRIDE_LINK_BANDWIDTH_GBPS");
  Settings::reload();
}

TEST(LevelVote, ValuesOutOfRangeFailOnEveryRankNamingTheRank) {
  const auto errors = testing::run_ranks_collect_errors(3, [](Communicator& comm) {
    std::vector<int8_t> q(100, 1);
    if (comm.rank() == 2) q[50] = 43;  // beyond ⌊127/3⌋ = 42
    level_vote(comm, q.data(), q.size(), 42);
  });
  for (const auto& e : errors) EXPECT_NE(e.find("rank 2 has values outside [-42, 42]"), std::string::npos) << e;
}

// Values whose check fails on their rank (a GPU's out of memory or launch error, level_ops.h): that rank
// raises its own error, the others raise naming it, and nobody waits for the others. Then the same
// ranks vote again: nothing was left in flight.
class ThrowingCheck final : public LevelOps {
 public:
  explicit ThrowingCheck(std::vector<int8_t>& q) : host_(q.data(), q.size()) {}
  bool within(int) override { throw std::runtime_error("device out of memory (a test's)"); }
  void pack(int max_level, patterns::Range elements, uint64_t* out) override { host_.pack(max_level, elements, out); }
  void unpack(const uint64_t* pos, const uint64_t* tie, patterns::Range elements) override {
    host_.unpack(pos, tie, elements);
  }

 private:
  HostLevelOps host_;
};

TEST(LevelVote, ACheckThatFailsOnOneRankFailsEveryRankNamingIt) {
  const auto errors = testing::run_ranks_collect_errors(3, [](Communicator& comm) {
    std::vector<int8_t> q(1000, int8_t(comm.rank() == 0 ? 1 : -1));
    try {
      if (comm.rank() == 1) {
        ThrowingCheck ops(q);
        level_vote(comm, ops, q.size(), 42);
      } else {
        level_vote(comm, q.data(), q.size(), 42);
      }
      ADD_FAILURE() << "rank " << comm.rank() << ": the vote returned";
    } catch (const std::exception& e) {
      const std::string want = comm.rank() == 1 ? "device out of memory (a test's)" : "rank 1 failed to check its values";
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << "rank " << comm.rank() << ": " << e.what();
    }
    level_vote(comm, q.data(), q.size(), 42);  // -1 on two ranks of three
    EXPECT_EQ(q, std::vector<int8_t>(1000, -1)) << "rank " << comm.rank();
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
}

TEST(LevelVote, DifferentLevelsOnTheRanksFailOnEveryRank) {
  const auto errors = testing::run_ranks_collect_errors(2, [](Communicator& comm) {
    std::vector<int8_t> q(100, 1);
    level_vote(comm, q.data(), q.size(), comm.rank() == 0 ? 31 : 63);
  });
  for (const auto& e : errors) EXPECT_NE(e.find("level_vote int8 numel 100 levels +-"), std::string::npos) << e;
}

TEST(LevelVote, RefusesALevelOutsideInt8OnEveryRank) {
  run_ranks(1, [](Communicator& comm) {
    std::vector<int8_t> q(10, 0);
    EXPECT_THROW(level_vote(comm, q.data(), q.size(), 128), InvalidArgument);
    EXPECT_THROW(level_vote(comm, q.data(), q.size(), 0), InvalidArgument);
  });
  // Agreed but invalid: every rank raises. One rank invalid: the calls differ, a mismatch on every rank.
  for (int other : {128, 31}) {
    const auto errors = testing::run_ranks_collect_errors(3, [other](Communicator& comm) {
      std::vector<int8_t> q(100, 0);
      level_vote(comm, q.data(), q.size(), comm.rank() == 0 ? 128 : other);
    });
    for (const auto& e : errors) {
      EXPECT_NE(e.find(other == 128 ? "max_level must be in [1, 127], got 128" : "levels +-128"), std::string::npos)
          << e;
    }
  }
}

}  // namespace
}  // namespace pride
