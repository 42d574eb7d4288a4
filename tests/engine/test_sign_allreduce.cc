// sign-allreduce against the int32 oracle: every algorithm × mode × vote kind × dtype, N = 1..8,
// sizes around the word and chunk boundaries. The oracle sums ±1 (or −1/0/+1) per element in plain
// code from every rank's inputs, which each rank regenerates from the same seed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <algorithm>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/common/error.h"
#include "backend/common/settings.h"
#include "backend/topology/host_topology.h"
#include "collectives/engine/sign/data_path.h"
#include "collectives/engine/sign/plane_ops.h"
#include "collectives/engine/sign/selector.h"
#include "collectives/engine/sign/sign_allreduce.h"
#include "collectives/engine/sign/sparse_abstentions.h"
#include "tests/engine/rank_threads.h"
#include "tests/kernels/oracle.h"

namespace pride {
namespace {

using bits::DType;
namespace oracle = bits::test;

// Rank r's input: mostly ordinary values of both signs, with zeros, NaNs and infinities mixed in.
std::vector<uint8_t> rank_input(DType dtype, size_t n, int rank, uint64_t salt) {
  std::vector<uint8_t> v(n * bits::dtype_size(dtype));
  uint64_t state = (uint64_t(rank) + 1) * 0x9E3779B97F4A7C15ull ^ salt;
  for (size_t i = 0; i < n; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    uint32_t h = uint32_t(state >> 33);
    float f;
    switch (h % 16) {
      case 0: f = 0.0f; break;
      case 1: f = -0.0f; break;
      case 2: f = std::nanf(""); break;
      case 3: f = (h & 64) ? INFINITY : -INFINITY; break;
      default: f = (float(h % 2001) - 1000.0f) / 7.0f;
    }
    oracle::store_float(dtype, f, v.data(), i);
  }
  return v;
}

int vote_of(DType dtype, const std::vector<uint8_t>& v, size_t i, VoteKind kind) {
  if (oracle::is_nan(dtype, v.data(), i)) return kind == VoteKind::kBinary ? -1 : 0;
  float f = oracle::to_float(dtype, v.data(), i);
  if (f > 0) return 1;
  if (kind == VoteKind::kBinary || f < 0) return -1;
  return 0;
}

struct Case {
  SignAlgorithm algorithm;
  SignMode mode;
  VoteKind kind;
  DType dtype;
  size_t n;
};

// Oracle: s = Σ votes as int32, then sign(s) or float32(s) / float32(N) rounded to the dtype; the
// sums come back in `sum`.
std::vector<uint8_t> oracle_values(const Case& c, int N, uint64_t salt, std::vector<int32_t>& sum) {
  sum.assign(c.n, 0);
  for (int r = 0; r < N; ++r) {
    auto xr = rank_input(c.dtype, c.n, r, salt);
    for (size_t i = 0; i < c.n; ++i) sum[i] += vote_of(c.dtype, xr, i, c.kind);
  }
  std::vector<uint8_t> expected(c.n * bits::dtype_size(c.dtype));
  for (size_t i = 0; i < c.n; ++i) {
    float want = c.mode == SignMode::kVote ? float((sum[i] > 0) - (sum[i] < 0)) : float(sum[i]) / float(N);
    oracle::store_float(c.dtype, want, expected.data(), i);
  }
  return expected;
}

void check_case(Communicator& comm, const Case& c, uint64_t salt) {
  const int N = comm.size();
  auto x = rank_input(c.dtype, c.n, comm.rank(), salt);
  SignOptions options{c.mode, c.kind, c.algorithm};
  sign_allreduce(comm, x.data(), c.dtype, c.n, options);
  // Oracle: s = Σ votes as int32, then sign(s) or float32(s) / float32(N) rounded to the dtype.
  std::vector<int32_t> sum(c.n, 0);
  for (int r = 0; r < N; ++r) {
    auto xr = rank_input(c.dtype, c.n, r, salt);
    for (size_t i = 0; i < c.n; ++i) sum[i] += vote_of(c.dtype, xr, i, c.kind);
  }
  std::vector<uint8_t> expected(x.size());
  for (size_t i = 0; i < c.n; ++i) {
    float want = c.mode == SignMode::kVote ? float((sum[i] > 0) - (sum[i] < 0)) : float(sum[i]) / float(N);
    oracle::store_float(c.dtype, want, expected.data(), i);
  }
  for (size_t i = 0; i < c.n; ++i) {
    size_t w = bits::dtype_size(c.dtype);
    ASSERT_EQ(std::memcmp(x.data() + i * w, expected.data() + i * w, w), 0)
        << "N=" << N << " rank " << comm.rank() << " " << name(c.algorithm) << " " << name(c.mode) << " "
        << name(c.kind) << " " << bits::dtype_name(c.dtype) << " n=" << c.n << " element " << i << ": sum "
        << sum[i] << " got " << oracle::to_float(c.dtype, x.data(), i);
  }
}

class SignAllreduceAllAlgorithms : public ::testing::TestWithParam<int> {};

TEST_P(SignAllreduceAllAlgorithms, MatchesInt32Oracle) {
  const int N = GetParam();
  testing::run_ranks(N, [](Communicator& comm) {
    uint64_t salt = 1;
    for (auto algorithm : {SignAlgorithm::kRing, SignAlgorithm::kTree, SignAlgorithm::kDirect, SignAlgorithm::kAllgather,
                           SignAlgorithm::kHier}) {
      for (auto mode : {SignMode::kVote, SignMode::kMean}) {
        for (auto kind : {VoteKind::kBinary, VoteKind::kTernary}) {
          for (auto dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
            for (size_t n : {size_t(0), size_t(1), size_t(63), size_t(64), size_t(65), size_t(64 * 9 + 7), size_t(5003)}) {
              check_case(comm, {algorithm, mode, kind, dtype, n}, salt++);
            }
          }
        }
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, SignAllreduceAllAlgorithms, ::testing::Range(1, 9));

// Large tensors cross several pipeline segments: ring's 1 MiB of packed votes (its default), and the
// direct algorithm's 128 KiB (its default across hosts; these ranks share one host, where direct takes
// 4 MiB, a single segment for this tensor). The direct pipeline unpacks the 64 MiB tensor in pieces,
// each streamed past the cache (OutputStores::kStreaming) into a 16-byte-aligned vector.
TEST(SignAllreduce, LargeOddTensorAcrossSegments) {
  testing::run_ranks(3, [](Communicator& comm) {
    check_case(comm, {SignAlgorithm::kRing, SignMode::kVote, VoteKind::kBinary, DType::kFloat32, (size_t(1) << 24) + 12345}, 99);
  });
  setenv("PRIDE_SEGMENT_BYTES", "131072", 1);
  Settings::reload();
  testing::run_ranks(3, [](Communicator& comm) {
    check_case(comm, {SignAlgorithm::kDirect, SignMode::kVote, VoteKind::kBinary, DType::kFloat32, (size_t(1) << 24) + 12345}, 99);
    check_case(comm, {SignAlgorithm::kDirect, SignMode::kMean, VoteKind::kTernary, DType::kBFloat16, 1000003}, 7);
  });
  unsetenv("PRIDE_SEGMENT_BYTES");
  Settings::reload();
}

// Tiny segments: many per tensor, so the direct algorithm's pipeline (pack s+1 and unpack s−1 while
// s is on the wire) and every algorithm's segment loop run for real.
TEST(SignAllreduce, ManySegmentsEveryAlgorithm) {
  setenv("PRIDE_SEGMENT_BYTES", "512", 1);
  Settings::reload();
  testing::run_ranks(3, [](Communicator& comm) {
    uint64_t salt = 500;
    for (auto algorithm : {SignAlgorithm::kRing, SignAlgorithm::kTree, SignAlgorithm::kDirect, SignAlgorithm::kAllgather}) {
      for (auto mode : {SignMode::kVote, SignMode::kMean}) {
        for (auto kind : {VoteKind::kBinary, VoteKind::kTernary}) {
          check_case(comm, {algorithm, mode, kind, DType::kFloat32, 64 * 64 * 5 + 33}, salt++);
        }
      }
    }
  });
  unsetenv("PRIDE_SEGMENT_BYTES");
  Settings::reload();
}

// The direct algorithm's result chunks coded as PRIDE_RESULT_CODING says, for every N of `ranks`, both
// modes and vote kinds, one segment and many, odd sizes, and one 16-bit case (`wide`): the values are
// still the int32 oracle's. Results the coding does not apply to run as before under the same setting.
void check_coded_results(const char* coding, std::initializer_list<int> ranks, SignMode wide_mode, VoteKind wide_kind,
                         uint64_t first_salt) {
  setenv("PRIDE_RESULT_CODING", coding, 1);
  for (const char* segment_bytes : {"1048576", "512"}) {
    setenv("PRIDE_SEGMENT_BYTES", segment_bytes, 1);
    Settings::reload();
    for (int N : ranks) {
      testing::run_ranks(N, [&](Communicator& comm) {
        uint64_t salt = first_salt;
        for (auto mode : {SignMode::kVote, SignMode::kMean}) {
          for (auto kind : {VoteKind::kBinary, VoteKind::kTernary}) {
            for (size_t n : {size_t(0), size_t(1), size_t(65), size_t(64 * 5 + 3), size_t(64 * 64 * 5 + 33)}) {
              check_case(comm, {SignAlgorithm::kDirect, mode, kind, DType::kFloat32, n}, salt++);
            }
          }
        }
        check_case(comm, {SignAlgorithm::kDirect, wide_mode, wide_kind, DType::kBFloat16, 70001}, salt);
      });
    }
  }
  unsetenv("PRIDE_RESULT_CODING");
  unsetenv("PRIDE_SEGMENT_BYTES");
  Settings::reload();
}

// Trits (PRIDE_RESULT_CODING=trits): a vote that can tie travels five elements to a byte; mean mode
// and odd-N binary votes, which have no tie plane, as planes.
TEST(SignAllreduce, TritResultsMatchInt32Oracle) {
  check_coded_results("trits", {2, 3, 4, 5, 6}, SignMode::kVote, VoteKind::kBinary, 7000);
}

// What a coding saves on the wire, measured: each rank's bytes for `mode` at every N of `ranks` against
// wire_bits_per_element with the plan the call used (`coding`'s result bits where it applies), and
// below the planes' by at least half of what the coding saves on the all-gather.
void check_coded_cost(const char* coding, ResultCoding coded, SignMode mode, std::initializer_list<int> ranks) {
  setenv("PRIDE_RESULT_CODING", coding, 1);
  Settings::reload();
  const size_t n = size_t(1) << 20;
  for (int N : ranks) {
    for (auto kind : {VoteKind::kBinary, VoteKind::kTernary}) {
      std::vector<uint64_t> sent(static_cast<size_t>(N));
      testing::run_ranks(N, [&](Communicator& comm) {
        std::vector<float> x(n, comm.rank() % 2 ? 1.0f : -1.0f);
        comm.reset_traffic();
        sign_allreduce(comm, x.data(), DType::kFloat32, n, {mode, kind, SignAlgorithm::kDirect});
        sent[size_t(comm.rank())] = comm.traffic().at("direct").bytes_sent;
      });
      SignPlan plan = SignPlan::make(N, mode, kind);
      const double planes_formula = wire_bits_per_element(SignAlgorithm::kDirect, plan);
      // Where the coding applies and packs better than the planes (trits: a tie plane; counts: a mean
      // whose base is not a power of two).
      plan.result_coding = coded;
      const bool applies = (coded == ResultCoding::kTrits ? plan.has_tie_plane() : mode == SignMode::kMean) &&
                           plan.result_wire_bits() < plan.result_planes;
      if (!applies) plan.result_coding = ResultCoding::kPlanes;
      const double formula = wire_bits_per_element(SignAlgorithm::kDirect, plan);
      const double saved = (plan.result_planes - plan.result_wire_bits()) * (N - 1) / N;
      for (int r = 0; r < N; ++r) {
        const double measured = double(sent[size_t(r)]) * 8 / double(n);
        EXPECT_NEAR(measured, formula, 0.01 * formula) << "N=" << N << " " << name(kind) << " rank " << r;
        if (applies) {
          EXPECT_LT(measured, planes_formula - 0.5 * saved) << "N=" << N << " " << name(kind) << " rank " << r;
        }
      }
    }
  }
  unsetenv("PRIDE_RESULT_CODING");
  Settings::reload();
}

// Trits: 1.6 result bits where a tie plane would have cost 2.
TEST(SignAllreduce, TritResultsCostWhatTheFormulaSays) {
  check_coded_cost("trits", ResultCoding::kTrits, SignMode::kVote, {2, 3, 4, 5});
}

// When a coding is chosen: forced by the setting, or by the cost model where the wire it saves takes
// longer than coding; only the coding that applies (trits for a tie plane, counts for a mean), never
// where it packs no better than the planes, only on the algorithms that all-gather result chunks
// (direct; hier between nodes). A bad setting is refused.
TEST(SignAllreduce, ResultCodingChosenWhereItSavesTime) {
  const SignPlan even = SignPlan::make(4, SignMode::kVote, VoteKind::kBinary);
  const SignPlan odd = SignPlan::make(3, SignMode::kVote, VoteKind::kBinary);
  const SignPlan ternary = SignPlan::make(3, SignMode::kVote, VoteKind::kTernary);
  const SignPlan mean = SignPlan::make(4, SignMode::kMean, VoteKind::kBinary);            // B = 5: 2.46 bits, not 3
  const SignPlan mean8 = SignPlan::make(8, SignMode::kMean, VoteKind::kTernary);          // B = 17: 4.57, not 5
  const SignPlan mean_power2 = SignPlan::make(3, SignMode::kMean, VoteKind::kBinary);     // B = 4: 2 bits either way
  const size_t n = size_t(1) << 24;
  const auto choose = [n](const SignPlan& plan, SignAlgorithm algorithm = SignAlgorithm::kDirect, int nodes = 0) {
    return select_result_coding(plan, algorithm, n, nodes > 0 ? nodes : plan.nranks);
  };
  setenv("PRIDE_LINK_BANDWIDTH_GBPS", "0.2", 1);  // slow links: the saved wire wins
  Settings::reload();
  EXPECT_EQ(choose(even), ResultCoding::kTrits);
  EXPECT_EQ(choose(ternary), ResultCoding::kTrits);
  EXPECT_EQ(choose(odd), ResultCoding::kPlanes);
  EXPECT_EQ(choose(mean), ResultCoding::kCounts);
  EXPECT_EQ(choose(mean8), ResultCoding::kCounts);
  EXPECT_EQ(choose(mean_power2), ResultCoding::kPlanes);
  EXPECT_EQ(choose(even, SignAlgorithm::kRing), ResultCoding::kPlanes);
  EXPECT_EQ(choose(mean, SignAlgorithm::kTree), ResultCoding::kPlanes);
  EXPECT_EQ(choose(mean, SignAlgorithm::kHier, 2), ResultCoding::kCounts);  // hier's results between nodes
  EXPECT_EQ(choose(even, SignAlgorithm::kHier, 2), ResultCoding::kTrits);
  // The algorithm is chosen at the coded cost: as planes, direct's 3 bits would tie with the all-gather's.
  EXPECT_EQ(select_sign_algorithm(mean, n, 4), SignAlgorithm::kDirect);
  // hier's node counts: 2 nodes of 2 ranks count in base 3 (1.6 bits, not 2); nodes of 3 in base 4
  // (2 bits either way) and one rank per node, nothing to count, never.
  EXPECT_TRUE(select_packed_node_counts(even, SignAlgorithm::kHier, n, 2));
  EXPECT_FALSE(select_packed_node_counts(SignPlan::make(6, SignMode::kVote, VoteKind::kBinary), SignAlgorithm::kHier, n, 2));
  EXPECT_FALSE(select_packed_node_counts(even, SignAlgorithm::kHier, n, 4));
  EXPECT_FALSE(select_packed_node_counts(even, SignAlgorithm::kDirect, n, 2));
  setenv("PRIDE_LINK_BANDWIDTH_GBPS", "1.4", 1);  // direct: a node's ranks share its link, so each saves more
  Settings::reload();
  EXPECT_EQ(choose(mean, SignAlgorithm::kDirect, 4), ResultCoding::kPlanes);
  EXPECT_EQ(choose(mean, SignAlgorithm::kDirect, 2), ResultCoding::kCounts);
  setenv("PRIDE_LINK_BANDWIDTH_GBPS", "1", 1);  // hier's rails share the coding among a node's ranks
  Settings::reload();
  EXPECT_EQ(choose(even, SignAlgorithm::kHier, 2), ResultCoding::kTrits);
  EXPECT_EQ(choose(SignPlan::make(2, SignMode::kVote, VoteKind::kBinary), SignAlgorithm::kHier, 2),
            ResultCoding::kTrits);  // 0.2 ns of wire saved per element, 0.1 of coding
  EXPECT_TRUE(select_packed_node_counts(even, SignAlgorithm::kHier, n, 2));  // base 3: 0.4 bits saved, cheap to code
  setenv("PRIDE_LINK_BANDWIDTH_GBPS", "5", 1);
  Settings::reload();
  EXPECT_EQ(choose(SignPlan::make(2, SignMode::kVote, VoteKind::kBinary), SignAlgorithm::kHier, 2),
            ResultCoding::kPlanes);  // one rank per node: it codes all of it, and 0.04 ns saved does not pay
  EXPECT_EQ(choose(even, SignAlgorithm::kHier, 2), ResultCoding::kPlanes);  // two ranks share 0.1 ns: 0.04 saved
  setenv("PRIDE_LINK_BANDWIDTH_GBPS", "400", 1);  // fast links: coding costs more than it saves
  Settings::reload();
  EXPECT_EQ(choose(even), ResultCoding::kPlanes);
  EXPECT_EQ(choose(mean), ResultCoding::kPlanes);
  EXPECT_FALSE(select_packed_node_counts(even, SignAlgorithm::kHier, n, 2));
  setenv("PRIDE_RESULT_CODING", "trits", 1);
  Settings::reload();
  EXPECT_EQ(choose(even), ResultCoding::kTrits);
  EXPECT_EQ(choose(odd), ResultCoding::kPlanes);
  EXPECT_EQ(choose(mean), ResultCoding::kPlanes);
  setenv("PRIDE_RESULT_CODING", "counts", 1);
  Settings::reload();
  EXPECT_EQ(choose(even), ResultCoding::kPlanes);
  EXPECT_EQ(choose(mean), ResultCoding::kCounts);
  EXPECT_EQ(choose(mean_power2), ResultCoding::kPlanes);
  setenv("PRIDE_RESULT_CODING", "packed", 1);
  Settings::reload();
  EXPECT_TRUE(select_packed_node_counts(even, SignAlgorithm::kHier, n, 2));
  EXPECT_EQ(choose(even), ResultCoding::kTrits);
  EXPECT_EQ(choose(mean), ResultCoding::kCounts);
  EXPECT_EQ(choose(odd), ResultCoding::kPlanes);
  setenv("PRIDE_RESULT_CODING", "planes", 1);
  setenv("PRIDE_LINK_BANDWIDTH_GBPS", "0.2", 1);
  Settings::reload();
  EXPECT_EQ(choose(even), ResultCoding::kPlanes);
  EXPECT_EQ(choose(mean), ResultCoding::kPlanes);
  setenv("PRIDE_RESULT_CODING", "bytes", 1);
  EXPECT_THROW(Settings::reload(), InvalidArgument);
  unsetenv("PRIDE_RESULT_CODING");
  unsetenv("PRIDE_LINK_BANDWIDTH_GBPS");
  Settings::reload();
  // A tie in the model: direct over 2 nodes of 3 ranks at the default 10 Gbit/s, where trits save
  // 0.1 ns of wire per element and cost 0.1, stays planes; at 9 Gbit/s they save 0.11 and are taken.
  const SignPlan six = SignPlan::make(6, SignMode::kVote, VoteKind::kBinary);
  EXPECT_EQ(select_result_coding(six, SignAlgorithm::kDirect, n, 2), ResultCoding::kPlanes);
  setenv("PRIDE_LINK_BANDWIDTH_GBPS", "9", 1);
  Settings::reload();
  EXPECT_EQ(select_result_coding(six, SignAlgorithm::kDirect, n, 2), ResultCoding::kTrits);
  unsetenv("PRIDE_LINK_BANDWIDTH_GBPS");
  Settings::reload();
}

// Packed counts (PRIDE_RESULT_CODING=counts): a mean's counts travel in base N + 1 or 2N + 1 (the
// power-of-two bases 4 and 8 stay planes); votes, which take no counts, as planes.
TEST(SignAllreduce, PackedCountResultsMatchInt32Oracle) {
  check_coded_results("counts", {2, 3, 4, 5, 6, 8}, SignMode::kMean, VoteKind::kTernary, 7500);
}

// Packed counts: 32/k result bits (N = 3 ternary, base 7: 2.91 bits for 3 planes).
TEST(SignAllreduce, PackedCountResultsCostWhatTheFormulaSays) {
  check_coded_cost("counts", ResultCoding::kCounts, SignMode::kMean, {2, 3, 4, 5, 8});
}

// The hierarchical algorithm over simulated nodes (each rank reports a host name of its own choosing):
// even and uneven nodes, a node of one rank, every rank a node of its own. Every mode, vote kind, odd
// size, and one, two, three and many segments (the rails pipeline has three in flight) against the
// oracle, with the node map the communicator learned checked first.
TEST(SignAllreduce, HierarchicalOverSimulatedNodesMatchesInt32Oracle) {
  // Rails: 2 × 2, 3 × 2, 2 × 3, nodes whose ranks interleave, one node. Leader: uneven nodes, one
  // rank per node.
  // Between nodes the result chunks travel as planes, and coded (trits for votes that can tie, packed
  // counts for means), decoded on the rails and by the leaders.
  const std::vector<std::vector<int>> layouts{{0, 0, 1, 1}, {0, 0, 1, 1, 2, 2}, {0, 0, 0, 1, 1, 1}, {0, 1, 0, 1},
                                              {0, 0, 0}, {0, 1, 0, 0}, {0, 0, 1, 1, 2}, {0, 1, 2}};
  for (const char* coding : {"planes", "packed"}) {
  for (const char* segment_bytes : {"1048576", "512"}) {
    setenv("PRIDE_SEGMENT_BYTES", segment_bytes, 1);
    setenv("PRIDE_RESULT_CODING", coding, 1);
    Settings::reload();
    for (const auto& node_of : layouts) {
      testing::RankOptions options;
      options.hostname = [&](int r) { return "node" + std::to_string(node_of[size_t(r)]); };
      const int nodes = *std::max_element(node_of.begin(), node_of.end()) + 1;
      testing::run_ranks(int(node_of.size()), [&](Communicator& comm) {
        ASSERT_EQ(comm.num_nodes(), nodes);
        uint64_t salt = 8000;
        for (auto mode : {SignMode::kVote, SignMode::kMean}) {
          for (auto kind : {VoteKind::kBinary, VoteKind::kTernary}) {
            for (size_t n : {size_t(0), size_t(1), size_t(65), size_t(64 * 64 * 2 - 5), size_t(64 * 64 * 3 - 1),
                             size_t(64 * 64 * 5 + 33)}) {
              check_case(comm, {SignAlgorithm::kHier, mode, kind, DType::kFloat32, n}, salt++);
            }
          }
        }
      }, options);
    }
  }
  }
  unsetenv("PRIDE_RESULT_CODING");
  unsetenv("PRIDE_SEGMENT_BYTES");
  Settings::reload();
}

// Its wire cost, measured. Rails (every node of the same size): every rank sends its votes on the
// node's other parts, its share of its node's inter-node bytes (hier_inter_node_bits per element, SPEC
// §4's per-node figure, over L ranks) and its part of the result to its node's other ranks, which is
// wire_bits_per_element. Leader scheme (uneven nodes): a non-leader sends only its votes.
TEST(SignAllreduce, HierarchicalWireBytesMatchTheFormula) {
  const size_t n = size_t(1) << 20;
  for (const char* coding : {"planes", "packed"}) {  // packed: coded results between nodes
  setenv("PRIDE_RESULT_CODING", coding, 1);
  Settings::reload();
  for (auto [nodes, local] : {std::pair{2, 2}, std::pair{3, 2}, std::pair{2, 3}}) {
    for (auto mode : {SignMode::kVote, SignMode::kMean}) {
    for (auto kind : {VoteKind::kBinary, VoteKind::kTernary}) {
      const int N = nodes * local;
      std::vector<uint64_t> sent(static_cast<size_t>(N));
      testing::RankOptions options;
      options.hostname = [local = local](int r) { return "node" + std::to_string(r / local); };
      testing::run_ranks(N, [&](Communicator& comm) {
        std::vector<float> x(n, comm.rank() % 3 ? 1.0f : -1.0f);
        comm.reset_traffic();
        sign_allreduce(comm, x.data(), DType::kFloat32, n, {mode, kind, SignAlgorithm::kHier});
        sent[size_t(comm.rank())] = comm.traffic().at("hier").bytes_sent;
      }, options);
      SignPlan plan = SignPlan::make(N, mode, kind);
      // The coding hier takes when forced: trits for a tie plane, counts for a mean whose base packs.
      if (std::string(coding) == "packed") {
        plan.result_coding = plan.has_tie_plane() ? ResultCoding::kTrits
                             : mode == SignMode::kMean ? ResultCoding::kCounts : ResultCoding::kPlanes;
        if (plan.result_wire_bits() >= plan.result_planes) plan.result_coding = ResultCoding::kPlanes;
        // and the node counts in base L + 1 where that packs (L = 2: base 3; not L = 3: base 4)
        plan.packed_node_counts = true;
        plan.packed_node_counts = node_count_bits(plan, local) < bits::planes_for(local);
      }
      const double L = local, M = nodes;
      // Every rank: its votes to the node's other ranks, its share of the node's count shards and coded
      // (or plane) result pieces between nodes, and its part of the result, as planes, inside the node.
      const double count_bits = plan.packed_node_counts
                                    ? 32.0 / bits::counts::make_code(uint32_t(local) + 1).per_limb
                                    : double(bits::planes_for(local));
      const double per_rank = plan.counters * (L - 1) / L +
                              (plan.counters * count_bits + plan.result_wire_bits()) * (M - 1) / M / L +
                              plan.result_planes * (L - 1) / L;
      EXPECT_NEAR(per_rank, hier_inter_node_bits(plan, nodes, local) / L + (plan.counters + plan.result_planes) * (L - 1) / L,
                  1e-9);
      EXPECT_NEAR(per_rank, wire_bits_per_element(SignAlgorithm::kHier, plan, nodes), 1e-9);
      for (int r = 0; r < N; ++r) {
        EXPECT_NEAR(double(sent[size_t(r)]) * 8 / double(n), per_rank, 0.01)
            << "rank " << r << " of " << nodes << " x " << local << " " << name(mode) << " " << name(kind) << " "
            << coding;
      }
    }
    }
  }
  }
  unsetenv("PRIDE_RESULT_CODING");
  Settings::reload();
  // Leader scheme, coded: leader 0 of nodes {0, 1} and {2} sends its result chunk to the other leader
  // coded instead of as planes, and everything else as before.
  for (auto [mode, kind] : {std::pair{SignMode::kVote, VoteKind::kTernary}, std::pair{SignMode::kMean, VoteKind::kTernary}}) {
    std::vector<uint64_t> leader_sent;
    for (const char* coding : {"planes", "packed"}) {
      setenv("PRIDE_RESULT_CODING", coding, 1);
      Settings::reload();
      testing::RankOptions options;
      options.hostname = [](int r) { return "node" + std::to_string(r / 2); };
      testing::run_ranks(3, [&](Communicator& comm) {
        std::vector<float> x(n, comm.rank() % 2 ? 1.0f : -1.0f);
        comm.reset_traffic();
        sign_allreduce(comm, x.data(), DType::kFloat32, n, {mode, kind, SignAlgorithm::kHier});
        if (comm.rank() == 0) leader_sent.push_back(comm.traffic().at("hier").bytes_sent);
      }, options);
    }
    SignPlan plan = SignPlan::make(3, mode, kind);
    plan.result_coding = mode == SignMode::kVote ? ResultCoding::kTrits : ResultCoding::kCounts;  // B = 7: 2.91 bits
    const size_t chunk_words = patterns::chunk(bits::words_for(n), 2, 0).size;
    ASSERT_EQ(leader_sent.size(), 2u);
    EXPECT_EQ(leader_sent[0] - leader_sent[1], size_t(plan.result_planes) * 8 * chunk_words - plan.result_bytes(chunk_words))
        << name(mode) << " " << name(kind);
  }
  unsetenv("PRIDE_RESULT_CODING");
  Settings::reload();
  // Leader scheme, nodes of 2 and 1 ranks: rank 1 sends its votes to its leader, nothing else.
  std::vector<uint64_t> sent(3);
  testing::RankOptions options;
  options.hostname = [](int r) { return "node" + std::to_string(r / 2); };
  testing::run_ranks(3, [&](Communicator& comm) {
    std::vector<float> x(n, comm.rank() % 2 ? 1.0f : -1.0f);
    comm.reset_traffic();
    sign_allreduce(comm, x.data(), DType::kFloat32, n, {SignMode::kVote, VoteKind::kBinary, SignAlgorithm::kHier});
    sent[size_t(comm.rank())] = comm.traffic().at("hier").bytes_sent;
  }, options);
  EXPECT_EQ(sent[1], n / 8);
}

// The cost model takes the hierarchical algorithm for large tensors on several nodes of several
// ranks each, where a node's ranks would otherwise share its link; never on one node or with one rank
// per node, and not for a tensor small enough to be latency-bound.
TEST(SignAllreduce, HierarchicalChosenForSeveralRanksPerNode) {
  const SignPlan four = SignPlan::make(4, SignMode::kVote, VoteKind::kBinary);
  const SignPlan six = SignPlan::make(6, SignMode::kVote, VoteKind::kBinary);
  const size_t big = size_t(1) << 24;
  EXPECT_EQ(select_sign_algorithm(four, big, 2), SignAlgorithm::kHier);
  EXPECT_EQ(select_sign_algorithm(six, big, 3), SignAlgorithm::kHier);
  EXPECT_NE(select_sign_algorithm(four, big, 4), SignAlgorithm::kHier);
  EXPECT_NE(select_sign_algorithm(four, big, 1), SignAlgorithm::kHier);
  EXPECT_NE(select_sign_algorithm(four, 64, 2), SignAlgorithm::kHier);
}

// The direct algorithm over planes that a PlaneOps keeps elsewhere (the GPU path, plane_ops.h), with a
// PlaneOps that behaves as a GPU stream does: its work runs only when settle() is called, and its fresh
// buffers hold garbage. A direct algorithm that sent a buffer, or reused one, before settling would get
// stale or garbage bits and miss the oracle. With `results_follow`, finish_results() leaves the queue
// as a GPU stream whose reader waits on an event does (torch_plugin/cuda_plane_ops.h): the caller
// settles before it reads the result planes, and nothing the algorithm sent may depend on that work.
class DeferredPlaneOps final : public PlaneOps {
 public:
  explicit DeferredPlaneOps(bool results_follow = false) : results_follow_(results_follow) {}
  MemoryType memory() const override { return MemoryType::kHost; }
  uint64_t* scratch(SignScratch what, size_t words, uint32_t instance) override {
    std::vector<uint64_t>& b = buffers_[{uint32_t(what), instance}];
    if (b.size() < words) b.assign(words, 0xA5A5A5A5A5A5A5A5ull);
    return b.data();
  }
  void gather(const uint64_t* base, size_t stride, int planes, patterns::Range words, uint64_t* out) override {
    queue_.push_back([=] { gather_planes(base, stride, planes, words, out); });
  }
  void scatter(const uint64_t* in, int planes, patterns::Range words, uint64_t* base, size_t stride) override {
    queue_.push_back([=] { scatter_planes(in, planes, words, base, stride); });
  }
  void count(const uint64_t* const* ballots, int nballots, size_t nwords, uint64_t* counter,
             int counter_planes) override {
    std::vector<const uint64_t*> copy(ballots, ballots + nballots);  // the caller's array is gone by then
    queue_.push_back([=] { bits::count_planes(copy.data(), nballots, nwords, counter, counter_planes); });
  }
  void finalize(const SignPlan& plan, const uint64_t* counts, int planes, size_t nwords, uint64_t* result,
                size_t result_stride) override {
    queue_.push_back([=] { plan.finalize(counts, planes, nwords, result, result_stride); });
  }
  void encode_trits(const uint64_t* planes, size_t stride, size_t nwords, uint8_t* out) override {
    queue_.push_back([=] { bits::encode_trits(planes, planes + stride, nwords, out); });
  }
  void decode_trits(const uint8_t* in, size_t nwords, uint64_t* planes, size_t stride) override {
    queue_.push_back([=] { bits::decode_trits(in, nwords, planes, planes + stride); });
  }
  void encode_counts(const bits::counts::CountCode& code, const uint64_t* planes, size_t stride, size_t nwords,
                     uint32_t* out) override {
    queue_.push_back([=] { bits::encode_counts(code, planes, stride, nwords, out); });
  }
  void decode_counts(const bits::counts::CountCode& code, const uint32_t* in, size_t nwords, uint64_t* planes,
                     size_t stride) override {
    queue_.push_back([=] { bits::decode_counts(code, in, nwords, planes, stride); });
  }
  void settle() override {
    deferred_ += queue_.size();
    for (auto& work : queue_) work();
    queue_.clear();
  }
  void finish_results() override {
    if (!results_follow_) settle();
  }
  size_t deferred() const { return deferred_; }
  size_t pending() const { return queue_.size(); }

 private:
  bool results_follow_;
  std::map<std::pair<uint32_t, uint32_t>, std::vector<uint64_t>> buffers_;
  std::vector<std::function<void()>> queue_;
  size_t deferred_ = 0;
};

TEST(SignAllreduce, DirectOverDeferredPlaneOpsMatchesInt32Oracle) {
  for (const char* coding : {"planes", "packed"}) {  // the result chunks as planes, and coded (trits, counts)
  for (const char* segment_bytes : {"1048576", "512"}) {  // one segment, and the pipelined many
    setenv("PRIDE_SEGMENT_BYTES", segment_bytes, 1);
    setenv("PRIDE_RESULT_CODING", coding, 1);
    Settings::reload();
    for (int N : {1, 2, 3, 5}) {
      testing::run_ranks(N, [&](Communicator& comm) {
        uint64_t salt = 900;
        for (bool results_follow : {false, true}) {
        for (auto mode : {SignMode::kVote, SignMode::kMean}) {
          for (auto kind : {VoteKind::kBinary, VoteKind::kTernary}) {
            for (size_t n : {size_t(0), size_t(65), size_t(64 * 64 * 5 + 33)}) {
              const Case c{SignAlgorithm::kDirect, mode, kind, DType::kFloat32, n};
              const auto x = rank_input(c.dtype, n, comm.rank(), salt);
              const size_t W = bits::words_for(n);
              std::vector<uint64_t> votes(2 * W, 0);
              if (kind == VoteKind::kBinary) bits::pack_binary(x.data(), c.dtype, n, votes.data());
              else bits::pack_ternary(x.data(), c.dtype, n, votes.data(), votes.data() + W);
              const SignPlan plan = SignPlan::make(N, mode, kind);
              std::vector<uint64_t> planes(size_t(plan.result_planes) * W, 0x5A5A5A5A5A5A5A5Aull);
              DeferredPlaneOps ops(results_follow);
              const SignResult r = sign_allreduce_planes(comm, ops, votes.data(), n, {mode, kind, SignAlgorithm::kDirect},
                                                         uint32_t(c.dtype), planes.data());
              EXPECT_EQ(r.algorithm, SignAlgorithm::kDirect);
              if (n > 0) {
                EXPECT_GT(ops.deferred(), 0u) << "nothing went through the PlaneOps";
              }
              // Result planes arrive in place; coded results are decoded into them, which is left to the
              // reader (one segment, or the pipeline's many).
              if (results_follow && n > 0 && r.plan.result_coding != ResultCoding::kPlanes && N > 1) {
                EXPECT_GT(ops.pending(), 0u) << "the last segment's decodes are left to the reader";
              }
              ops.settle();  // the reader's wait (an event on the stream, on a GPU)
              std::vector<uint8_t> y(x.size());
              r.write(y.data(), c.dtype);
              std::vector<int32_t> sum;
              const auto want = oracle_values(c, N, salt, sum);
              for (size_t i = 0; i < n; ++i) {
                ASSERT_EQ(std::memcmp(y.data() + 4 * i, want.data() + 4 * i, 4), 0)
                    << "N=" << N << " rank " << comm.rank() << " " << name(mode) << " " << name(kind) << " n=" << n
                    << " segment bytes " << segment_bytes << " " << coding << " element " << i << ": sum " << sum[i];
              }
              ++salt;
            }
          }
        }
        }
      });
    }
  }
  }
  unsetenv("PRIDE_RESULT_CODING");
  unsetenv("PRIDE_SEGMENT_BYTES");
  Settings::reload();
}

// Planes outside host memory take the direct algorithm only: another one is refused before anything is sent.
TEST(SignAllreduce, DeferredPlaneOpsRefuseOtherAlgorithms) {
  testing::run_ranks(2, [](Communicator& comm) {
    std::vector<uint64_t> votes(1, 0), planes(2, 0);
    DeferredPlaneOps ops;
    EXPECT_THROW(sign_allreduce_planes(comm, ops, votes.data(), 10, {SignMode::kVote, VoteKind::kBinary,
                                                                      SignAlgorithm::kRing},
                                       uint32_t(DType::kFloat32), planes.data()),
                 InvalidArgument);
  });
}

// Pack and unpack on several threads (PRIDE_THREADS overrides the cores-per-rank rule) give the same
// bits: every mode and vote kind, across segments, against the oracle.
TEST(SignAllreduce, MultiThreadedKernelsMatchInt32Oracle) {
  setenv("PRIDE_THREADS", "3", 1);
  Settings::reload();
  testing::run_ranks(3, [](Communicator& comm) {
    EXPECT_EQ(comm.kernel_threads(), 3);
    uint64_t salt = 700;
    for (auto algorithm : {SignAlgorithm::kDirect, SignAlgorithm::kRing}) {
      for (auto mode : {SignMode::kVote, SignMode::kMean}) {
        for (auto kind : {VoteKind::kBinary, VoteKind::kTernary}) {
          check_case(comm, {algorithm, mode, kind, DType::kFloat32, (size_t(1) << 21) + 4099}, salt++);
        }
      }
    }
    check_case(comm, {SignAlgorithm::kDirect, SignMode::kVote, VoteKind::kBinary, DType::kBFloat16,
                      (size_t(1) << 24) + 12345}, salt++);  // several 1 MiB segments, pipelined
  });
  unsetenv("PRIDE_THREADS");
  Settings::reload();
}

TEST(SignAllreduce, KernelThreadsShareTheCoresOfTheMachine) {
  EXPECT_EQ(choose_kernel_threads(0, 16, 4), 4);
  EXPECT_EQ(choose_kernel_threads(0, 16, 5), 3);
  EXPECT_EQ(choose_kernel_threads(0, 2, 4), 1);   // oversubscribed: one thread each
  EXPECT_EQ(choose_kernel_threads(0, 2, 1), 2);
  EXPECT_EQ(choose_kernel_threads(6, 2, 4), 6);   // PRIDE_THREADS wins
  // Ranks of one process share its machine: each gets its share of this process's cores (or less,
  // where an earlier test of this process made a larger group: most_ranks_on_this_machine).
  const int sharing = std::max(4, most_ranks_on_this_machine(1));
  testing::run_ranks(4, [sharing](Communicator& comm) {
    EXPECT_EQ(comm.kernel_threads(), std::max(1, host_topology().cores / sharing)) << comm.rank();
  });
}

TEST(SignAllreduce, ASmallerGroupSharesTheCoresAsTheBusiestGroupOfItsProcess) {
  // A subgroup sees only its own members on the machine; the job's other ranks still use the cores.
  const int before = most_ranks_on_this_machine(1);
  EXPECT_GE(before, 1);
  EXPECT_EQ(most_ranks_on_this_machine(before + 3), before + 3);
  EXPECT_EQ(most_ranks_on_this_machine(1), before + 3);  // a running maximum: it never goes back down
  testing::run_ranks(2, [before](Communicator& comm) {
    EXPECT_EQ(comm.kernel_threads(), std::max(1, host_topology().cores / (before + 3))) << comm.rank();
  });
}

TEST(SignAllreduce, CudaDataPathChoice) {
  using A = SignAlgorithm;
  EXPECT_EQ(choose_data_path("auto", true, A::kDirect, 0), DataPath::kDeviceMemory);
  EXPECT_EQ(choose_data_path("auto", false, A::kDirect, 0), DataPath::kHostStaging);
  EXPECT_EQ(choose_data_path("auto", true, A::kRing, 0), DataPath::kHostStaging);
  EXPECT_EQ(choose_data_path("host", true, A::kDirect, 0), DataPath::kHostStaging);
  EXPECT_EQ(choose_data_path("device", true, A::kDirect, 0), DataPath::kDeviceMemory);
  EXPECT_EQ(choose_data_path("device", true, A::kTree, 0), DataPath::kHostStaging);
  try {
    choose_data_path("device", false, A::kDirect, 3);
    ADD_FAILURE() << "PRIDE_CUDA_PATH=device without CUDA support in the transport was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("rank 3"), std::string::npos) << e.what();
  }
  EXPECT_THROW(choose_data_path("gpu", true, A::kDirect, 0), InvalidArgument);

  // Over NCCL: what was asked for, else PRIDE_ALGO, else direct; never ring, tree or hier.
  EXPECT_EQ(choose_nccl_sign_algorithm(A::kAuto, "auto", 0), A::kDirect);
  EXPECT_EQ(choose_nccl_sign_algorithm(A::kAuto, "allgather", 0), A::kAllgather);
  EXPECT_EQ(choose_nccl_sign_algorithm(A::kAllgather, "direct", 0), A::kAllgather);
  EXPECT_EQ(choose_nccl_sign_algorithm(A::kDirect, "ring", 0), A::kDirect);
  EXPECT_THROW(choose_nccl_sign_algorithm(A::kHier, "auto", 0), InvalidArgument);
  EXPECT_THROW(choose_nccl_sign_algorithm(A::kAuto, "hier", 0), InvalidArgument);
  try {
    choose_nccl_sign_algorithm(A::kAuto, "tree", 2);
    ADD_FAILURE() << "tree over NCCL was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("rank 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(choose_nccl_sign_algorithm(A::kRing, "auto", 0), InvalidArgument);
}

TEST(SignAllreduce, PackedInputIgnoresTrailingBits) {
  testing::run_ranks(4, [](Communicator& comm) {
    const size_t n = 77;
    std::vector<uint8_t> packed(bits::bytes_for(n), 0);
    for (size_t j = 0; j < n; ++j) {
      if ((j + size_t(comm.rank())) % 3 == 0) packed[j / 8] |= uint8_t(1u << (j % 8));
    }
    packed.back() |= uint8_t(0xFF << (n % 8));  // garbage past the end must not count
    std::vector<int8_t> vote(n);
    std::vector<float> mean(n);
    sign_allreduce_packed(comm, packed.data(), n, {SignMode::kVote, VoteKind::kBinary, SignAlgorithm::kAuto}, vote.data());
    sign_allreduce_packed(comm, packed.data(), n, {SignMode::kMean, VoteKind::kBinary, SignAlgorithm::kAuto}, mean.data());
    for (size_t j = 0; j < n; ++j) {
      int s = 0;
      for (int r = 0; r < 4; ++r) s += ((j + size_t(r)) % 3 == 0) ? 1 : -1;
      EXPECT_EQ(vote[j], (s > 0) - (s < 0)) << j;
      EXPECT_EQ(mean[j], float(s) / 4.0f) << j;
    }
  });
}

TEST(SignAllreduce, WireBytesMatchTheFormula) {
  // Measured bytes sent per element within 5% of SPEC §4 for every algorithm (large n, so that word
  // rounding of chunks is negligible). Averaged over ranks, as the formula is (the tree is uneven).
  const std::vector<SignAlgorithm> algorithms{SignAlgorithm::kRing, SignAlgorithm::kTree, SignAlgorithm::kDirect,
                                              SignAlgorithm::kAllgather};
  const size_t n = size_t(1) << 20;
  for (int N : {3, 4, 5}) {
    std::vector<std::vector<uint64_t>> sent(algorithms.size(), std::vector<uint64_t>(size_t(N)));
    testing::run_ranks(N, [&](Communicator& comm) {
      std::vector<float> x(n, 1.0f);
      for (size_t a = 0; a < algorithms.size(); ++a) {
        comm.reset_traffic();
        sign_allreduce(comm, x.data(), DType::kFloat32, n, {SignMode::kVote, VoteKind::kBinary, algorithms[a]});
        sent[a][size_t(comm.rank())] = comm.traffic().at(name(algorithms[a])).bytes_sent;
      }
    });
    for (size_t a = 0; a < algorithms.size(); ++a) {
      double total = 0;
      for (uint64_t b : sent[a]) total += double(b);
      double measured = total * 8 / double(N) / double(n);
      double formula = wire_bits_per_element(algorithms[a], SignPlan::make(N, SignMode::kVote, VoteKind::kBinary));
      EXPECT_NEAR(measured, formula, 0.05 * formula) << "N=" << N << " " << name(algorithms[a]);
      // And SPEC §4's table as written there (binary votes, odd N, vote mode), independent of the
      // implementation's formula: ring Σ_{k=1}^{N-1}⌈log2(k+1)⌉/N + (N-1)/N, direct 2(N-1)/N,
      // allgather N-1 (the tree's row gives no figure).
      if (N % 2 == 1 && algorithms[a] != SignAlgorithm::kTree) {
        double spec = 0;
        if (algorithms[a] == SignAlgorithm::kRing) {
          for (int k = 1; k <= N - 1; ++k) spec += std::ceil(std::log2(double(k + 1)));
          spec = spec / N + double(N - 1) / N;
        } else if (algorithms[a] == SignAlgorithm::kDirect) {
          spec = 2.0 * (N - 1) / N;
        } else {
          spec = N - 1;
        }
        EXPECT_NEAR(measured, spec, 0.05 * spec) << "N=" << N << " " << name(algorithms[a]) << " against SPEC §4";
      }
    }
  }
}

// Rank r's ternary vote on element i for the re-voting test: ±1 from a hash, 0 (abstains) on a few
// elements that differ per rank, and on every rank at element 5 and every 61st from 40 on (all abstain:
// a tie / mean 0).
int sparse_vote(int rank, size_t i, uint64_t salt) {
  const uint64_t h = (uint64_t(rank) * 0x9E3779B97F4A7C15ull ^ (i + 1) * 0xD1B54A32D192ED03ull ^ salt) * 0xff51afd7ed558ccdull;
  if (i == 5 || i % 61 == 40 || (h >> 40) % 97 == 0) return 0;
  return (h >> 20) & 1 ? 1 : -1;
}

TEST(SignAllreduce, RevotingAbstentionsMatchesTernaryInt32Oracle) {
  // Binary votes plus a ternary re-vote of the elements where some rank abstains give the ternary
  // result bit for bit: against the int32 sum of the −1/0/+1 votes, for every algorithm of the binary
  // call, both modes, N = 2..5, and sizes around word boundaries.
  for (int N : {2, 3, 4, 5}) {
    testing::run_ranks(N, [N](Communicator& comm) {
      uint64_t salt = 11;
      for (auto algorithm : {SignAlgorithm::kDirect, SignAlgorithm::kRing, SignAlgorithm::kTree,
                             SignAlgorithm::kAllgather}) {
        for (auto mode : {SignMode::kVote, SignMode::kMean}) {
          for (size_t n : {size_t(6), size_t(64), size_t(65), size_t(64 * 9 + 7), size_t(5003)}) {
            ++salt;
            const size_t W = bits::words_for(n);
            std::vector<uint64_t> pos(W, 0), neg(W, 0);
            std::vector<int32_t> sum(n, 0);
            std::vector<uint32_t> revote, some_vote, everyone_abstains;  // U; U split where all abstain
            for (size_t i = 0; i < n; ++i) {
              int abstaining = 0;
              for (int r = 0; r < N; ++r) {
                const int v = sparse_vote(r, i, salt);
                sum[i] += v;
                abstaining += v == 0 ? 1 : 0;
                if (r == comm.rank() && v > 0) pos[i / 64] |= uint64_t(1) << (i % 64);
                if (r == comm.rank() && v < 0) neg[i / 64] |= uint64_t(1) << (i % 64);
              }
              if (abstaining > 0) revote.push_back(uint32_t(i));
              if (abstaining > 0) (abstaining == N ? everyone_abstains : some_vote).push_back(uint32_t(i));
            }
            const SignResult got = sign_allreduce_revoting(comm, pos.data(), neg.data(), n,
                                                           {mode, VoteKind::kBinary, algorithm}, 0, revote);
            ASSERT_EQ(got.plan.kind, VoteKind::kTernary);
            for (size_t i = 0; i < n; ++i) {
              auto bit_of = [&](int p) { return int((got.plane(p)[i / 64] >> (i % 64)) & 1); };
              if (mode == SignMode::kVote) {
                ASSERT_EQ(bit_of(0), sum[i] > 0 ? 1 : 0) << "N=" << N << " " << name(algorithm) << " n=" << n << " i=" << i;
                ASSERT_EQ(bit_of(1), sum[i] == 0 ? 1 : 0) << "N=" << N << " " << name(algorithm) << " n=" << n << " i=" << i;
              } else {
                int64_t u = 0;
                for (int p = 0; p < got.plan.result_planes; ++p) u |= int64_t(bit_of(p)) << p;
                ASSERT_EQ(got.plan.mean_scale * u - got.plan.mean_offset, sum[i])
                    << "N=" << N << " " << name(algorithm) << " n=" << n << " i=" << i;
              }
            }
            // And the same planes as the ternary call itself, up to the tail bits past n, which readers
            // ignore (there the ternary call counts N abstentions, the binary one N votes of −1).
            std::vector<uint64_t> both(pos);
            both.insert(both.end(), neg.begin(), neg.end());
            const SignResult ternary =
                sign_allreduce_planes(comm, both.data(), n, {mode, VoteKind::kTernary, algorithm}, 0);
            const uint64_t tail = n % 64 == 0 ? ~uint64_t(0) : (uint64_t(1) << (n % 64)) - 1;
            for (int p = 0; p < got.plan.result_planes; ++p) {
              for (size_t w = 0; w < W; ++w) {
                const uint64_t mask = w + 1 == W ? tail : ~uint64_t(0);
                ASSERT_EQ(got.plane(p)[w] & mask, ternary.plane(p)[w] & mask) << "plane " << p << " word " << w;
              }
            }
            // The elements where every rank abstains, given as such instead of re-voted: the same planes.
            ASSERT_FALSE(everyone_abstains.empty());
            const SignResult known = sign_allreduce_revoting(comm, pos.data(), neg.data(), n,
                                                             {mode, VoteKind::kBinary, algorithm}, 0, some_vote,
                                                             everyone_abstains);
            for (int p = 0; p < got.plan.result_planes; ++p) {
              for (size_t w = 0; w < W; ++w) {
                const uint64_t mask = w + 1 == W ? tail : ~uint64_t(0);
                ASSERT_EQ(known.plane(p)[w] & mask, ternary.plane(p)[w] & mask)
                    << "abstaining everywhere given: plane " << p << " word " << w;
              }
            }
          }
        }
      }
    });
  }
}

TEST(SignAllreduce, RevotingCostsTheBinaryCallPlusTheRevote) {
  // 4 ranks, 2^16 elements, 40 abstaining: bytes sent within 5% of the binary direct call's formula
  // plus the re-vote's all-gather of 2 bits per re-voted element, and well under the ternary call.
  const size_t n = size_t(1) << 16;
  testing::run_ranks(4, [&](Communicator& comm) {
    const size_t W = bits::words_for(n);
    std::vector<uint64_t> pos(W, 0x5555555555555555ull), neg(W);
    for (size_t w = 0; w < W; ++w) neg[w] = ~pos[w];
    std::vector<uint32_t> revote;
    for (uint32_t i = 0; i < 40; ++i) revote.push_back(i * 1601 + 3);
    for (uint32_t i : revote) neg[i / 64] &= ~(uint64_t(1) << (i % 64)), pos[i / 64] &= ~(uint64_t(1) << (i % 64));
    const SignOptions o{SignMode::kVote, VoteKind::kBinary, SignAlgorithm::kDirect};
    comm.reset_traffic();
    sign_allreduce_revoting(comm, pos.data(), neg.data(), n, o, 0, revote);
    uint64_t sent = 0;
    for (const auto& [algo, t] : comm.traffic()) sent += t.bytes_sent;
    const SignPlan plan = SignPlan::make(4, SignMode::kVote, VoteKind::kBinary);
    const double binary_bytes = wire_bits_per_element(SignAlgorithm::kDirect, plan) * double(n) / 8;
    const double revote_bytes = wire_bits_per_element(SignAlgorithm::kAllgather,
                                                      SignPlan::make(4, SignMode::kVote, VoteKind::kTernary)) * 40 / 8;
    EXPECT_NEAR(double(sent), binary_bytes + revote_bytes, 0.05 * binary_bytes);
    const double ternary_bytes = wire_bits_per_element(SignAlgorithm::kDirect,
                                                       SignPlan::make(4, SignMode::kVote, VoteKind::kTernary)) * double(n) / 8;
    EXPECT_LT(double(sent), 0.85 * ternary_bytes);
  });
}

TEST(SignAllreduce, RevotingRefusesAnUnsortedList) {
  auto errors = testing::run_ranks_collect_errors(2, [](Communicator& comm) {
    std::vector<uint64_t> pos(1, 0), neg(1, 0);
    sign_allreduce_revoting(comm, pos.data(), neg.data(), 10, {}, 0, {4, 2});
  });
  for (auto& e : errors) EXPECT_NE(e.find("re-vote list not sorted"), std::string::npos) << e;
}

TEST(SignAllreduce, RevotingRefusesAnElementBothReVotedAndAbstainedEverywhere) {
  auto errors = testing::run_ranks_collect_errors(2, [](Communicator& comm) {
    std::vector<uint64_t> pos(1, 0), neg(1, 0);
    sign_allreduce_revoting(comm, pos.data(), neg.data(), 10, {}, 0, {1, 4, 7}, {2, 4, 9});
  });
  for (auto& e : errors) EXPECT_NE(e.find("element 4 is both re-voted and abstained everywhere"), std::string::npos) << e;
}

TEST(SignAllreduce, RanksDisagreeingOnModeAllFail) {
  auto errors = testing::run_ranks_collect_errors(3, [](Communicator& comm) {
    std::vector<float> x(100, 1.0f);
    SignOptions o{comm.rank() == 1 ? SignMode::kMean : SignMode::kVote, VoteKind::kBinary, SignAlgorithm::kDirect};
    sign_allreduce(comm, x.data(), DType::kFloat32, x.size(), o);
  });
  for (auto& e : errors) EXPECT_NE(e.find("ranks disagree"), std::string::npos) << e;
}

// SignOptions::segment_bytes, the caller's own segment size: small segments still give the oracle's
// values (the first rank's result against a whole-tensor call on the same inputs), ranks that pass
// different sizes are told so on every rank, and a size under 64 bytes is refused before sending.
TEST(SignAllreduce, CallerSegmentSizeKeepsTheResult) {
  testing::run_ranks(3, [](Communicator& comm) {
    const size_t n = 64 * 64 * 5 + 33;
    for (auto kind : {VoteKind::kBinary, VoteKind::kTernary}) {
      auto x = rank_input(DType::kFloat32, n, comm.rank(), 900);
      auto whole = x;
      SignOptions segmented{SignMode::kVote, kind, SignAlgorithm::kDirect};
      segmented.segment_bytes = 512;  // 4096 elements a segment: 6 segments
      sign_allreduce(comm, x.data(), DType::kFloat32, n, segmented);
      SignOptions one{SignMode::kVote, kind, SignAlgorithm::kDirect};
      one.segment_bytes = size_t{1} << 20;
      sign_allreduce(comm, whole.data(), DType::kFloat32, n, one);
      std::vector<int32_t> sum;
      const auto expected = oracle_values({SignAlgorithm::kDirect, SignMode::kVote, kind, DType::kFloat32, n}, 3, 900, sum);
      EXPECT_EQ(x, expected) << name(kind);
      EXPECT_EQ(whole, expected) << name(kind);
    }
  });
}

TEST(SignAllreduce, RanksDisagreeingOnSegmentSizeAllFail) {
  auto errors = testing::run_ranks_collect_errors(3, [](Communicator& comm) {
    std::vector<float> x(100000, 1.0f);
    SignOptions o{SignMode::kVote, VoteKind::kBinary, SignAlgorithm::kDirect};
    o.segment_bytes = comm.rank() == 2 ? 4096 : 0;
    sign_allreduce(comm, x.data(), DType::kFloat32, x.size(), o);
  });
  ASSERT_EQ(errors.size(), 3u);
  for (auto& e : errors) EXPECT_NE(e.find("ranks disagree"), std::string::npos) << e;
}

TEST(SignAllreduce, RefusesASegmentUnder64Bytes) {
  testing::run_ranks(2, [](Communicator& comm) {
    std::vector<float> x(1000, 1.0f);
    SignOptions o;
    o.segment_bytes = 32;
    EXPECT_THROW(sign_allreduce(comm, x.data(), DType::kFloat32, x.size(), o), InvalidArgument);
  });
}

// Random combinations of what the tests above vary one or two at a time: ranks and how they split into
// simulated nodes, algorithm (auto too), mode, vote kind, dtype, size, segment size, result coding and
// the link the cost model assumes, each case against the int32 oracle. PRIDE_TEST_RANDOM_SEED and
// PRIDE_TEST_RANDOM_CASES explore beyond the fixed 40 cases CI runs; a failure names its case's seed.
TEST(SignAllreduce, RandomCombinationsMatchInt32Oracle) {
  const char* seed_env = std::getenv("PRIDE_TEST_RANDOM_SEED");
  const char* cases_env = std::getenv("PRIDE_TEST_RANDOM_CASES");
  const uint64_t first_seed = seed_env != nullptr ? std::stoull(seed_env) : 20261127;
  const int cases = cases_env != nullptr ? std::stoi(cases_env) : 40;
  const SignAlgorithm algorithms[] = {SignAlgorithm::kRing,      SignAlgorithm::kTree, SignAlgorithm::kDirect,
                                      SignAlgorithm::kAllgather, SignAlgorithm::kHier, SignAlgorithm::kAuto};
  const char* codings[] = {"planes", "trits", "counts", "packed", "auto"};
  const char* segments[] = {"512", "4096", "65536", nullptr};
  const char* links[] = {"0.2", "1", nullptr};
  const DType dtypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};
  for (int c = 0; c < cases; ++c) {
    const uint64_t seed = first_seed + uint64_t(c);
    std::mt19937_64 rng(seed);
    const auto pick = [&rng](size_t count) { return size_t(rng() % count); };
    const int N = 1 + int(pick(7));
    const int nodes = 1 + int(pick(size_t(N)));
    std::vector<int> node_of(static_cast<size_t>(N), 0);
    for (int r = 0; r < N; ++r) node_of[size_t(r)] = r < nodes ? r : int(pick(size_t(nodes)));  // every node used
    const Case k{algorithms[pick(6)], pick(2) == 0 ? SignMode::kVote : SignMode::kMean,
                 pick(2) == 0 ? VoteKind::kBinary : VoteKind::kTernary, dtypes[pick(3)],
                 pick(4) == 0 ? pick(200) : pick(4) == 0 ? 64 * (1 + pick(3000)) + pick(3) : pick(300000)};
    const char* coding = codings[pick(5)];
    const char* segment = segments[pick(4)];
    const char* link = links[pick(3)];
    setenv("PRIDE_RESULT_CODING", coding, 1);
    if (segment != nullptr) setenv("PRIDE_SEGMENT_BYTES", segment, 1); else unsetenv("PRIDE_SEGMENT_BYTES");
    if (link != nullptr) setenv("PRIDE_LINK_BANDWIDTH_GBPS", link, 1); else unsetenv("PRIDE_LINK_BANDWIDTH_GBPS");
    Settings::reload();
    SCOPED_TRACE(::testing::Message() << "seed " << seed << ": " << N << " ranks on " << nodes << " nodes, "
                                      << name(k.algorithm) << " " << name(k.mode) << " " << name(k.kind) << " "
                                      << bits::dtype_name(k.dtype) << " n=" << k.n << ", coding " << coding
                                      << ", segment " << (segment ? segment : "default") << ", link "
                                      << (link ? link : "default"));
    testing::RankOptions options;
    options.hostname = [&](int r) { return "node" + std::to_string(node_of[size_t(r)]); };
    testing::run_ranks(N, [&](Communicator& comm) { check_case(comm, k, seed); }, options);
    if (HasFatalFailure()) break;
  }
  unsetenv("PRIDE_RESULT_CODING");
  unsetenv("PRIDE_SEGMENT_BYTES");
  unsetenv("PRIDE_LINK_BANDWIDTH_GBPS");
  Settings::reload();
}

TEST(SignAllreduce, RejectsBadInputBeforeSending) {
  testing::run_ranks(2, [](Communicator& comm) {
    std::vector<int8_t> x(10);
    EXPECT_THROW(sign_allreduce(comm, x.data(), DType::kInt8, 10, {}), InvalidArgument);
    std::vector<float> y(10, -1.0f);
    sign_allreduce(comm, y.data(), DType::kFloat32, 10, {});  // the group is still usable
    EXPECT_EQ(y[0], -1.0f);
  });
}

}  // namespace
}  // namespace pride
