// Communicator and transport: point-to-point delivery, tags, fingerprints, deadlines, traffic counters.
#include <gtest/gtest.h>

#include <cstdlib>
#include <numeric>
#include <vector>

#include "backend/common/error.h"
#include "backend/common/settings.h"
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
      {5000});
  // Rank 1's communicator closes when it returns: rank 0 learns that from UCX ("failed") or, failing
  // that, from its deadline ("timed out"); either way the error names the peer and the collective.
  const bool timed_out = errors[0].find("timed out") != std::string::npos;
  const bool failed = errors[0].find("failed") != std::string::npos;
  EXPECT_TRUE(timed_out || failed) << errors[0];
  EXPECT_NE(errors[0].find("peer 1"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("allreduce"), std::string::npos) << errors[0];
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

}  // namespace
}  // namespace pride
