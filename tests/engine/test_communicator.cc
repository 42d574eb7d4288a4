// Communicator and transport: point-to-point delivery, tags, fingerprints, deadlines, traffic counters.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "backend/common/error.h"
#include "backend/common/settings.h"
#include "backend/liveness/progress_board.h"
#include "backend/transport/gpu_transport_choice.h"
#include "collectives/engine/call_description.h"
#include "collectives/engine/sign/sign_types.h"
#include "collectives/bits/kernels.h"
#include "collectives/engine/standard/common.h"
#include "tests/engine/rank_threads.h"

namespace pride {
namespace {

using testing::run_ranks;
using testing::run_ranks_collect_errors;

TEST(Communicator, RingExchangeDeliversEveryByte) {
  for (int n : {1, 2, 3, 5}) {
    run_ranks(n, [n](Communicator& comm) {
      const int r = comm.rank();
      for (size_t bytes : {size_t(0), size_t(1), size_t(4097), size_t(3) << 20}) {
        std::vector<uint8_t> out(bytes), in(bytes, 0xEE);
        for (size_t i = 0; i < bytes; ++i) out[i] = uint8_t(i * 131 + size_t(r));
        Collective c = comm.begin("test_ring", "test", Fingerprint{0, 1, 0, bytes, 0});
        c.sendrecv((r + 1) % n, out.data(), bytes, (r + n - 1) % n, in.data(), bytes, 0);
        const int left = (r + n - 1) % n;
        for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(in[i], uint8_t(i * 131 + size_t(left))) << "byte " << i;
      }
    });
  }
}

TEST(Communicator, CountsPayloadBytesButNotFingerprints) {
  run_ranks(3, [](Communicator& comm) {
    std::vector<uint8_t> buf(1000);
    Collective c = comm.begin("count", "counted", Fingerprint{0, 2, 0, 1000, 0});
    c.sendrecv((comm.rank() + 1) % 3, buf.data(), 1000, (comm.rank() + 2) % 3, buf.data(), 1000, 0);
    const auto& t = comm.traffic().at("counted");
    EXPECT_EQ(t.calls, 1u);
    EXPECT_EQ(t.bytes_sent, 1000u);
    EXPECT_EQ(t.bytes_received, 1000u);
  });
}

TEST(Communicator, MismatchedCallsFailOnEveryRank) {
  auto errors = run_ranks_collect_errors(4, [](Communicator& comm) {
    uint64_t numel = comm.rank() == 2 ? 99 : 100;
    comm.begin("sign_allreduce", "ring", Fingerprint{0, 7, 1, numel, 0});
  });
  for (size_t r = 0; r < errors.size(); ++r) {
    EXPECT_NE(errors[r].find("ranks disagree"), std::string::npos) << "rank " << r << ": " << errors[r];
    EXPECT_NE(errors[r].find("numel 99"), std::string::npos) << errors[r];
  }
}

// The check is a MAX-allreduce by dissemination (ceil(log2 N) rounds): every group size, powers of two
// or not, and a disagreeing rank anywhere, must fail on every rank, and agreement must pass.
TEST(Communicator, FingerprintCheckAtEveryGroupSize) {
  for (int n : {2, 3, 5, 6, 8}) {
    for (int odd : {0, n / 2, n - 1}) {
      auto errors = run_ranks_collect_errors(n, [odd](Communicator& comm) {
        comm.begin("same", "t", Fingerprint{0, 3, 1, 10, 7});
        const uint64_t detail = comm.rank() == odd ? 8 : 7;
        comm.begin("differs", "t", Fingerprint{0, 3, 1, 10, detail});
      });
      for (int r = 0; r < n; ++r) {
        const std::string& e = errors[size_t(r)];
        EXPECT_NE(e.find("ranks disagree"), std::string::npos) << n << " ranks, odd " << odd << ", rank " << r << ": " << e;
        // Each rank names the first rank whose call differs from its own.
        const int named = r != odd ? odd : (odd == 0 ? 1 : 0);
        EXPECT_NE(e.find("rank " + std::to_string(named) + " called"), std::string::npos) << e;
      }
    }
  }
}

TEST(Communicator, MismatchLeavesGroupUsable) {
  run_ranks(3, [](Communicator& comm) {
    EXPECT_THROW(comm.begin("x", "t", Fingerprint{0, 1, 0, uint64_t(comm.rank()), 0}), MismatchError);
    Collective c = comm.begin("y", "t", Fingerprint{0, 1, 0, 5, 0});
    int v = comm.rank(), got = -1;
    c.sendrecv((comm.rank() + 1) % 3, &v, sizeof v, (comm.rank() + 2) % 3, &got, sizeof got, 0);
    EXPECT_EQ(got, (comm.rank() + 2) % 3);
  });
}

// With the fingerprint check off, a message shorter than the receive posted for it is still a
// mismatch, not silently half-filled data.
TEST(Communicator, ShortMessageIsAMismatchWithoutFingerprints) {
  setenv("PRIDE_CHECK_FINGERPRINT", "0", 1);
  Settings::reload();
  auto errors = run_ranks_collect_errors(2, [](Communicator& comm) {
    Collective c = comm.begin("allgather", "ring", Fingerprint{0, 1, 0, 1, 0});
    std::vector<char> out(comm.rank() == 0 ? 100 : 200, 'x'), in(200);
    c.sendrecv(1 - comm.rank(), out.data(), out.size(), 1 - comm.rank(), in.data(), in.size(), 0);
  });
  unsetenv("PRIDE_CHECK_FINGERPRINT");
  Settings::reload();
  EXPECT_NE(errors[1].find("peer 0 sent 100 bytes where this rank expected 200"), std::string::npos) << errors[1];
  EXPECT_NE(errors[1].find("different arguments"), std::string::npos) << errors[1];
}

TEST(Communicator, SilentPeerTimesOutNamingIt) {
  auto errors = run_ranks_collect_errors(
      2,
      [](Communicator& comm) {
        if (comm.rank() == 1) return;  // never calls
        comm.set_timeout(std::chrono::milliseconds(300));
        int x = 0;
        Fingerprint f{0, 1, 0, 1, 0};
        comm.begin("allreduce", "ring", f);
        (void)x;
      },
      {5000, nullptr});
  // Rank 1's communicator closes when it returns: rank 0 learns that from UCX ("failed") or, failing
  // that, from its deadline ("timed out"); either way the error names the peer and the collective.
  const bool timed_out = errors[0].find("timed out") != std::string::npos;
  const bool failed = errors[0].find("failed") != std::string::npos;
  EXPECT_TRUE(timed_out || failed) << errors[0];
  EXPECT_NE(errors[0].find("peer 1"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("allreduce"), std::string::npos) << errors[0];
}

// A rank that stays alive but never calls the collective (hung elsewhere, or skipping it): the others'
// liveness checks cannot see it, and each survivor waits for some peer, maybe another survivor. The
// progress board names it in every survivor's error, with where it last waited long.
TEST(Communicator, SilentRankIsNamedByTheSurvivorsTimeout) {
  std::atomic<int> failed{0};
  auto errors = run_ranks_collect_errors(
      3,
      [&failed](Communicator& comm) {
        comm.set_timeout(std::chrono::milliseconds(1200));  // posts after 300 ms of waiting
        // Collective #1: rank 0 comes late, so ranks 1 and 2 post that they wait in it.
        if (comm.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(700));
        comm.begin("broadcast", "tree", Fingerprint{0, 2, 0, 1, 0});
        if (comm.rank() == 1) {  // silent from now on, but alive, its communicator open
          for (int i = 0; i < 1000 && failed.load() < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
          return;
        }
        try {
          comm.begin("allreduce", "ring", Fingerprint{0, 1, 0, 1, 0});
        } catch (...) {
          failed++;
          throw;
        }
      },
      {10000, nullptr});
  EXPECT_EQ(errors[1], "");
  for (int r : {0, 2}) {
    // The rank that times out first reports; the other may hear its abort notice instead, which carries
    // the report.
    EXPECT_NE(errors[r].find("timed out"), std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find("allreduce #2"), std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find("; rank 1 was not waiting in this collective (has not called it"), std::string::npos)
        << errors[r];
    EXPECT_NE(errors[r].find("rank 1 last waited long in #1 (broadcast)"), std::string::npos) << errors[r];
    EXPECT_EQ(errors[r].find("rank 0 was not"), std::string::npos) << errors[r];
    EXPECT_EQ(errors[r].find("rank 2 was not"), std::string::npos) << errors[r];
  }
}

// Every rank in the collective, and still a deadline (here: each waits for a message nobody sends):
// the report says so, which rules out a silent rank.
TEST(Communicator, DeadlineWithEveryRankWaitingSaysSo) {
  auto errors = run_ranks_collect_errors(
      2,
      [](Communicator& comm) {
        comm.set_timeout(std::chrono::milliseconds(800));
        Collective c = comm.begin("allgather", "ring", Fingerprint{0, 3, 0, 1, 0});
        int x = 0;
        RequestPtr r = c.recv(1 - comm.rank(), 0, &x, sizeof x);
        c.wait(r);
      },
      {10000, nullptr});
  for (int r : {0, 1}) {
    EXPECT_NE(errors[r].find("timed out"), std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find("; every rank was waiting in this collective"), std::string::npos) << errors[r];
  }
}

// The progress board over stores written here: a map (what the report says of several absent ranks),
// and one that never answers (its host stopped), which must cost the report its patience and no more.
class MapStore final : public Store {
 public:
  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    std::lock_guard<std::mutex> lock(mutex_);
    values_[key] = value;
  }
  std::vector<uint8_t> get(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mutex_);
    return values_.at(key);
  }
  void wait(const std::vector<std::string>&) override { throw std::logic_error("not used by the board"); }
  int64_t add(const std::string&, int64_t) override { throw std::logic_error("not used by the board"); }
  bool check(const std::vector<std::string>& keys) override {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::all_of(keys.begin(), keys.end(), [this](const std::string& k) { return values_.count(k) > 0; });
  }

 private:
  std::mutex mutex_;
  std::map<std::string, std::vector<uint8_t>> values_;
};

class StuckStore final : public Store {
 public:
  explicit StuckStore(std::shared_future<void> released) : released_(std::move(released)) {}
  void set(const std::string&, const std::vector<uint8_t>&) override { released_.wait(); }
  std::vector<uint8_t> get(const std::string&) override { released_.wait(); return {}; }
  void wait(const std::vector<std::string>&) override { released_.wait(); }
  int64_t add(const std::string&, int64_t) override { released_.wait(); return 0; }
  bool check(const std::vector<std::string>&) override { released_.wait(); return false; }

 private:
  std::shared_future<void> released_;
};

TEST(ProgressBoard, NamesEveryRankNotWaitingAndWhereEachLastWaited) {
  auto store = std::make_shared<MapStore>();
  ProgressBoard rank0(store, 0, 5), rank2(store, 2, 5), rank3(store, 3, 5), rank4(store, 4, 5);
  rank0.post_waiting(3, "broadcast");
  rank3.post_waiting(5, "allreduce");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the posts run on their own threads
  // Rank 4 reports on #5: rank 3 waits in it, rank 0 last waited in #3, ranks 1 and 2 never posted.
  const std::string report = rank4.report(5, "allreduce", std::chrono::milliseconds(200));
  EXPECT_EQ(report, "; ranks 0, 1 and 2 were not waiting in this collective (have not called it: hung or busy in "
                    "other code, or skipping it); rank 0 last waited long in #3 (broadcast)");
  // Once the others post #5 in time, every rank was waiting.
  rank0.post_waiting(5, "allreduce");
  ProgressBoard(store, 1, 5).post_waiting(5, "allreduce");
  rank2.post_waiting(5, "allreduce");
  EXPECT_EQ(rank4.report(5, "allreduce", std::chrono::milliseconds(2000)), "; every rank was waiting in this collective");
}

TEST(ProgressBoard, AStoreThatDoesNotAnswerCostsOnlyThePatience) {
  std::promise<void> release;
  auto store = std::make_shared<StuckStore>(release.get_future().share());
  ProgressBoard board(store, 0, 3);
  auto started = std::chrono::steady_clock::now();
  board.post_waiting(1, "allreduce");  // must not block
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::milliseconds(100));
  started = std::chrono::steady_clock::now();
  EXPECT_EQ(board.report(1, "allreduce", std::chrono::milliseconds(300)), "");
  const auto took = std::chrono::steady_clock::now() - started;
  EXPECT_GE(took, std::chrono::milliseconds(300));
  EXPECT_LT(took, std::chrono::milliseconds(1500));
  release.set_value();  // the detached threads end
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
}

// wait_external (the NCCL transport's wait): the other engine's own error, a rank that gives up, and
// the deadline each stop the work (give_up) before the error, which names the collective; a rank
// whose work finishes sees nothing.
TEST(Communicator, ExternalWorkFailsOnItsErrorAPeersNoticeOrTheDeadline) {
  // Rank 1's engine reports an error; ranks 0 and 2 wait for work that never ends and hear of it.
  // Rank 1 fails only once every rank waits (a rank still in begin() would fail there, before any work).
  std::vector<int> gave_up(3, 0);
  std::atomic<int> waiting{0};
  auto errors = run_ranks_collect_errors(3, [&](Communicator& comm) {
    Collective c = comm.begin("allreduce", "nccl", Fingerprint{0, 1, 0, 1, 0});
    const int r = comm.rank();
    waiting++;
    c.wait_external("the NCCL kernels", [] { return false; },
                    [r, &waiting]() -> std::string {
                      return r == 1 && waiting.load() == 3 ? "unhandled system error (remote process exited)" : "";
                    },
                    [&gave_up, r] { gave_up[size_t(r)]++; });
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(gave_up[size_t(r)], 1) << "rank " << r << ": " << errors[size_t(r)];
    EXPECT_NE(errors[size_t(r)].find("allreduce"), std::string::npos) << errors[size_t(r)];
  }
  EXPECT_NE(errors[1].find("the NCCL kernels failed: unhandled system error"), std::string::npos) << errors[1];
  EXPECT_NE(errors[0].find("peer 1 gave up"), std::string::npos) << errors[0];
  EXPECT_NE(errors[2].find("peer 1 gave up"), std::string::npos) << errors[2];

  // Nothing fails: done() ends the wait, the bytes are counted, and give_up is never called.
  run_ranks(2, [](Communicator& comm) {
    Collective c = comm.begin("allgather", "nccl", Fingerprint{0, 2, 0, 1, 0});
    int polls = 0;
    c.wait_external("the NCCL kernels", [&polls] { return ++polls > 3; }, [] { return std::string(); },
                    [] { ADD_FAILURE() << "gave up on finished work"; });
    c.count_external(100, 300, MemoryType::kCuda);
    const TrafficCounters& t = comm.traffic().at("nccl");
    EXPECT_EQ(t.bytes_sent, 100u);
    EXPECT_EQ(t.bytes_received, 300u);
    EXPECT_EQ(t.device_bytes_sent, 100u);
  });

  // The deadline.
  auto timed = run_ranks_collect_errors(1, [](Communicator& comm) {
    comm.set_timeout(std::chrono::milliseconds(200));
    Collective c = comm.begin("broadcast", "nccl", Fingerprint{0, 3, 0, 1, 0});
    bool stopped = false;
    try {
      c.wait_external("the NCCL kernels", [] { return false; }, [] { return std::string(); },
                      [&stopped] { stopped = true; });
    } catch (const TimeoutError&) {
      EXPECT_TRUE(stopped);
      throw;
    }
  });
  EXPECT_NE(timed[0].find("timed out waiting for the NCCL kernels"), std::string::npos) << timed[0];
}

TEST(GpuTransportChoice, NcclWhereBuiltAndEveryRankHasItsOwnGpu) {
  using T = GpuTransport;
  EXPECT_EQ(choose_gpu_transport("auto", true, true, 0), T::kNccl);
  EXPECT_EQ(choose_gpu_transport("auto", true, false, 0), T::kUcx);  // NCCL refuses a GPU shared by ranks
  EXPECT_EQ(choose_gpu_transport("auto", false, true, 0), T::kUcx);
  EXPECT_EQ(choose_gpu_transport("nccl", true, false, 0), T::kNccl);  // forced: NCCL_HOSTID tests on one GPU
  EXPECT_EQ(choose_gpu_transport("ucx", true, true, 0), T::kUcx);
  try {
    choose_gpu_transport("nccl", false, true, 5);
    ADD_FAILURE() << "PRIDE_CUDA_TRANSPORT=nccl was accepted by a build without NCCL";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("rank 5"), std::string::npos) << e.what();
  }
  EXPECT_THROW(choose_gpu_transport("gloo", true, true, 0), InvalidArgument);

  EXPECT_TRUE(one_gpu_per_rank({{"a", "GPU-1"}, {"a", "GPU-2"}, {"b", "GPU-1"}}));
  EXPECT_FALSE(one_gpu_per_rank({{"a", "GPU-1"}, {"b", "GPU-1"}, {"a", "GPU-1"}}));
  EXPECT_TRUE(one_gpu_per_rank({}));

  // A call over NCCL reads as the same call, marked, so a rank on NCCL and one on UCX see why they differ.
  Fingerprint f = standard::fingerprint(standard::OpId::kAllreduce, ScalarType::kFloat32, 100,
                                        uint64_t(ReduceOp::kSum) | kFingerprintOverNccl);
  f.sequence = 3;
  EXPECT_EQ(describe_call(f), "allreduce SUM float32 numel 100 over NCCL (#3)");

  // A sign-allreduce whose results travel as trits says so (and keeps its segment size readable).
  Fingerprint sign;
  sign.op = kSignAllreduceOp;
  sign.dtype = uint32_t(bits::DType::kFloat32);
  sign.numel = 1000;
  sign.detail = uint64_t(SignMode::kVote) | uint64_t(VoteKind::kBinary) << 8 | uint64_t(SignAlgorithm::kDirect) << 16 |
                uint64_t(131072) << 24;
  sign.sequence = 4;
  const std::string planes = describe_call(sign);
  sign.detail |= kFingerprintTritResults;
  const std::string trits = describe_call(sign);
  EXPECT_EQ(planes.find("trits"), std::string::npos) << planes;
  EXPECT_NE(trits.find("segments of 131072 words, results as trits"), std::string::npos) << trits;
  sign.detail = (sign.detail & ~kFingerprintTritResults) | kFingerprintCountResults;  // a mean's packed counts
  const std::string counts = describe_call(sign);
  EXPECT_EQ(planes.find("packed"), std::string::npos) << planes;
  EXPECT_NE(counts.find("segments of 131072 words, results as packed counts"), std::string::npos) << counts;
  sign.detail |= kFingerprintPackedNodeCounts;  // hier's node counts in base L + 1
  const std::string both = describe_call(sign);
  EXPECT_NE(both.find("segments of 131072 words, results as packed counts, node counts packed"), std::string::npos)
      << both;
}

TEST(Communicator, PointToPointMatchesTags) {
  run_ranks(2, [](Communicator& comm) {
    if (comm.rank() == 0) {
      int a = 11, b = 22;
      auto s1 = comm.p2p_send(1, 5, &a, sizeof a);
      auto s2 = comm.p2p_send(1, 6, &b, sizeof b);
      comm.p2p_wait(s1, "send");
      comm.p2p_wait(s2, "send");
    } else {
      int a = 0, b = 0;
      auto r2 = comm.p2p_recv(0, 6, &b, sizeof b);  // posted out of order: tags decide
      auto r1 = comm.p2p_recv(Transport::kAnyPeer, 5, &a, sizeof a);
      comm.p2p_wait(r2, "recv");
      comm.p2p_wait(r1, "recv");
      EXPECT_EQ(a, 11);
      EXPECT_EQ(b, 22);
      EXPECT_EQ(r1->peer(), 0);
    }
  });
}

// Thread ranks reach every peer over TCP (rank_threads.cc), so every send is eager at any size: crossing
// transfers past UCX's usual rendezvous threshold, same-tag messages in order, and an any-peer receive.
// Ranks with same-host peers next to remote ones (a second UCX context) are tested with processes, in
// tests/python/test_p2p_and_groups.py.
TEST(Communicator, EagerPointToPointKeepsOrderAndSizes) {
  if (std::getenv("UCX_RNDV_THRESH") != nullptr) GTEST_SKIP() << "UCX_RNDV_THRESH is set: the user's threshold decides";
  testing::RankOptions options;
  options.hostname = [](int r) { return "node" + std::to_string(r / 2); };
  run_ranks(4, [](Communicator& comm) {
    const int r = comm.rank(), n = comm.size();
    for (int p = 0; p < n; ++p) {
      if (p != r) EXPECT_TRUE(comm.transport().sends_eagerly_to(p)) << "rank " << r << ", peer " << p;
    }
    auto byte_of = [](int from, int to, size_t i) { return uint8_t(i * 7 + size_t(from) * 31 + size_t(to) * 3); };
    for (size_t bytes : {size_t(1), size_t(64) << 10, size_t(8) << 20}) {  // eager at any threshold, and past UCX's
      std::vector<std::vector<uint8_t>> out(static_cast<size_t>(n)), in(static_cast<size_t>(n));
      std::vector<RequestPtr> requests;
      for (int p = 0; p < n; ++p) {
        if (p == r) continue;
        out[size_t(p)].resize(bytes);
        in[size_t(p)].assign(bytes, 0xEE);
        for (size_t i = 0; i < bytes; ++i) out[size_t(p)][i] = byte_of(r, p, i);
        requests.push_back(comm.p2p_recv(p, 3, in[size_t(p)].data(), bytes));
        requests.push_back(comm.p2p_send(p, 3, out[size_t(p)].data(), bytes));
      }
      for (auto& request : requests) comm.p2p_wait(request, "exchange");
      for (int p = 0; p < n; ++p) {
        if (p == r) continue;
        for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(in[size_t(p)][i], byte_of(p, r, i)) << "from " << p << ", byte " << i;
      }
    }
    // Rank 0 sends three messages of one tag to rank 2 (remote, eager): they arrive in order. Rank 1
    // (same host as 0) sends one to rank 3, which takes it with an any-peer receive.
    if (r == 0) {
      std::vector<std::vector<uint32_t>> messages = {std::vector<uint32_t>(1 << 20, 1), {2}, std::vector<uint32_t>(1 << 18, 3)};
      std::vector<RequestPtr> sends;
      for (auto& m : messages) sends.push_back(comm.p2p_send(2, 4, m.data(), m.size() * 4));
      for (auto& s : sends) comm.p2p_wait(s, "send");
    } else if (r == 2) {
      for (auto [expected, words] : {std::pair{1u, 1 << 20}, std::pair{2u, 1}, std::pair{3u, 1 << 18}}) {
        std::vector<uint32_t> buffer(size_t(words), 0u);
        auto request = comm.p2p_recv(0, 4, buffer.data(), buffer.size() * 4);
        comm.p2p_wait(request, "recv");
        EXPECT_EQ(buffer.front(), expected);
        EXPECT_EQ(buffer.back(), expected);
      }
    } else if (r == 1) {
      uint64_t value = 0xABCDEF;
      auto s = comm.p2p_send(3, 9, &value, sizeof value);
      comm.p2p_wait(s, "send");
    } else {
      uint64_t value = 0;
      auto request = comm.p2p_recv(Transport::kAnyPeer, 9, &value, sizeof value);
      comm.p2p_wait(request, "recv");
      EXPECT_EQ(value, 0xABCDEFu);
      EXPECT_EQ(request->peer(), 1);
    }
  }, options);
}

// Sets an environment variable for one scope and puts back what was there, also when a test fails.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// The user's UCX_RNDV_THRESH decides for every peer.
TEST(Communicator, UsersRendezvousThresholdDecides) {
  const ScopedEnv threshold("UCX_RNDV_THRESH", "auto");
  testing::RankOptions options;
  options.hostname = [](int r) { return "node" + std::to_string(r / 2); };
  run_ranks(4, [](Communicator& comm) {
    for (int p = 0; p < comm.size(); ++p) EXPECT_FALSE(comm.transport().sends_eagerly_to(p)) << "peer " << p;
    uint64_t value = uint64_t(comm.rank()), got = 99;
    const int right = (comm.rank() + 1) % comm.size(), left = (comm.rank() + 3) % comm.size();
    auto recv = comm.p2p_recv(left, 1, &got, sizeof got);
    auto send = comm.p2p_send(right, 1, &value, sizeof value);
    comm.p2p_wait(send, "send");
    comm.p2p_wait(recv, "recv");
    EXPECT_EQ(got, uint64_t(left));
  }, options);
}

}  // namespace
}  // namespace pride
