// The 1-bit compressed allreduce against a float64 reference of the same formulas (1-bit Adam's
// compressed_allreduce: worker feedback and compression, owner average, server feedback and
// compression), written here plainly, element by element. Each round the reference starts from the
// collective's own float32 error state, so it checks that round's arithmetic and state update; every
// rank's result must be the same bits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <mutex>
#include <random>
#include <vector>

#include "backend/common/error.h"
#include "collectives/bits/kernels.h"
#include "collectives/engine/compressed/onebit_allreduce.h"
#include "tests/engine/rank_threads.h"

namespace pride {
namespace {

using testing::run_ranks;

struct RankState {
  std::vector<float> x, worker_error, server_error;
};

// One round of the formulas in double, for all ranks at once. `states` hold the inputs and errors
// before the round; returns the expected result and fills the expected errors.
std::vector<double> reference_round(const std::vector<RankState>& states, size_t numel,
                                    std::vector<std::vector<double>>& worker_error_out,
                                    std::vector<std::vector<double>>& server_error_out) {
  const int n = int(states.size());
  std::vector<std::vector<int>> sign(static_cast<size_t>(n), std::vector<int>(numel));
  std::vector<double> scale(static_cast<size_t>(n));
  worker_error_out.assign(size_t(n), std::vector<double>(numel));
  for (int i = 0; i < n; ++i) {
    std::vector<double> y(numel);
    double squares = 0;
    for (size_t k = 0; k < numel; ++k) {
      y[k] = double(states[i].x[k]) + double(states[i].worker_error[k]);
      squares += y[k] * y[k];
    }
    scale[i] = std::sqrt(squares / double(numel));
    for (size_t k = 0; k < numel; ++k) {
      sign[i][k] = y[k] >= 0 ? 1 : -1;
      worker_error_out[i][k] = y[k] - scale[i] * sign[i][k];
    }
  }
  std::vector<double> result(numel);
  server_error_out.assign(size_t(n), {});
  for (int j = 0; j < n; ++j) {
    const patterns::Range owned = onebit_owned_elements(numel, n, j);
    std::vector<double> z(owned.size);
    double squares = 0;
    for (size_t k = 0; k < owned.size; ++k) {
      double sum = 0;
      for (int i = 0; i < n; ++i) sum += scale[i] * sign[i][owned.begin + k];
      z[k] = sum / n + double(states[j].server_error[k]);
      squares += z[k] * z[k];
    }
    const double server_scale = owned.size ? std::sqrt(squares / double(owned.size)) : 0.0;
    server_error_out[j].resize(owned.size);
    for (size_t k = 0; k < owned.size; ++k) {
      const double s = z[k] >= 0 ? 1.0 : -1.0;
      result[owned.begin + k] = server_scale * s;
      server_error_out[j][k] = z[k] - server_scale * s;
    }
  }
  return result;
}

void expect_close(double got, double want, double scale, const char* what, int rank, size_t k) {
  ASSERT_LE(std::abs(got - want), 1e-5 * (std::abs(want) + scale) + 1e-30)
      << what << " of rank " << rank << " at element " << k << ": " << got << " vs reference " << want;
}

void check_rounds(int n, size_t numel, int rounds) {
  SCOPED_TRACE(::testing::Message() << n << " ranks, numel " << numel);
  std::vector<RankState> states(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const patterns::Range owned = onebit_owned_elements(numel, n, i);
    states[i].worker_error.assign(numel, 0.0f);
    states[i].server_error.assign(owned.size, 0.0f);
  }
  std::mt19937 rng(1234 + n * 7 + unsigned(numel));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int round = 0; round < rounds; ++round) {
    for (int i = 0; i < n; ++i) {
      states[i].x.resize(numel);
      for (auto& v : states[i].x) v = normal(rng) * float(1 + i) + (round == 1 ? 0.0f : 0.25f);
    }
    if (round == 2 && numel > 3) {  // exact zeros and a −0 compress as +1
      for (int i = 0; i < n; ++i) { states[i].x[1] = 0.0f; states[i].x[2] = -0.0f; }
    }
    std::vector<std::vector<double>> want_worker, want_server;
    const std::vector<double> want = reference_round(states, numel, want_worker, want_server);
    double max_abs = 0;
    for (double v : want) max_abs = std::max(max_abs, std::abs(v));

    std::vector<RankState> after = states;
    run_ranks(n, [&](Communicator& comm) {
      RankState& s = after[size_t(comm.rank())];
      onebit_allreduce(comm, s.x.data(), s.worker_error.data(), s.server_error.data(), numel);
    });
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(0, std::memcmp(after[i].x.data(), after[0].x.data(), numel * sizeof(float)))
          << "rank " << i << "'s result differs from rank 0's in round " << round;
      for (size_t k = 0; k < numel; ++k) {
        expect_close(after[i].x[k], want[k], max_abs, "result", i, k);
        expect_close(after[i].worker_error[k], want_worker[i][k], max_abs + 1, "worker error", i, k);
      }
      for (size_t k = 0; k < after[i].server_error.size(); ++k) {
        expect_close(after[i].server_error[k], want_server[i][k], max_abs + 1, "server error", i, k);
      }
    }
    // The next round starts from the collective's own errors (the reference checks one round at a time).
    for (int i = 0; i < n; ++i) {
      states[i].worker_error = after[i].worker_error;
      states[i].server_error = after[i].server_error;
    }
  }
}

TEST(OnebitAllreduce, MatchesFloat64ReferenceOverRoundsWithErrorFeedback) {
  for (int n : {1, 2, 3, 4, 5}) {
    for (size_t numel : {size_t(1), size_t(63), size_t(64), size_t(65), size_t(200), size_t(1000), size_t(4099)}) {
      check_rounds(n, numel, 4);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(OnebitAllreduce, ErrorFeedbackMakesTheRunningSumConverge) {
  // What error feedback is for: the running sum of the compressed results tracks the running sum of
  // the true mean far better than any single round's compression does.
  constexpr int n = 4;
  constexpr size_t numel = 4096;
  constexpr int rounds = 200;
  std::vector<float> target(numel);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& v : target) v = normal(rng);
  // Rank i's input in round t, reproducible anywhere.
  auto input = [&](int i, int t, std::vector<float>& x) {
    std::mt19937 g(unsigned(1000 * t + i));
    std::normal_distribution<float> noise(0.0f, 0.5f);
    x.resize(numel);
    for (size_t k = 0; k < numel; ++k) x[k] = target[k] + noise(g);
  };
  std::vector<double> compressed_sum(numel, 0.0);
  run_ranks(n, [&](Communicator& comm) {
    std::vector<float> x, we(numel, 0.0f), se(onebit_owned_elements(numel, n, comm.rank()).size, 0.0f);
    for (int t = 0; t < rounds; ++t) {
      input(comm.rank(), t, x);
      onebit_allreduce(comm, x.data(), we.data(), se.data(), numel);
      if (comm.rank() == 0) {
        for (size_t k = 0; k < numel; ++k) compressed_sum[k] += x[k];
      }
    }
  });
  std::vector<double> true_sum(numel, 0.0);
  std::vector<float> x;
  for (int t = 0; t < rounds; ++t) {
    for (int i = 0; i < n; ++i) {
      input(i, t, x);
      for (size_t k = 0; k < numel; ++k) true_sum[k] += double(x[k]) / n;
    }
  }
  double drift = 0, norm = 0;
  for (size_t k = 0; k < numel; ++k) {
    drift += (compressed_sum[k] - true_sum[k]) * (compressed_sum[k] - true_sum[k]);
    norm += true_sum[k] * true_sum[k];
  }
  // Without feedback the relative drift would stay near one round's compression error (~0.6); with it
  // the error stays bounded while the sum grows, so it falls like 1/rounds.
  EXPECT_LT(std::sqrt(drift / norm), 0.05);
}

TEST(OnebitAllreduce, SendsTwoBitsPerElementAndAScalePerMessage) {
  constexpr int n = 4;
  constexpr size_t numel = size_t(1) << 16;
  std::vector<uint64_t> sent(n);
  run_ranks(n, [&](Communicator& comm) {
    std::vector<float> x(numel, 1.0f), we(numel, 0.0f), se(onebit_owned_elements(numel, n, comm.rank()).size, 0.0f);
    comm.reset_traffic();
    onebit_allreduce(comm, x.data(), we.data(), se.data(), numel);
    sent[size_t(comm.rank())] = comm.traffic().at("onebit_direct").bytes_sent;
  });
  for (int i = 0; i < n; ++i) {
    // Shards of the other owners' chunks, then my chunk to the N−1 others: 2(N−1)/N bits per element.
    const size_t chunk_bytes = numel / 8 / n, expected = 2 * (n - 1) * (chunk_bytes + 8);
    EXPECT_EQ(sent[i], expected) << "rank " << i;
  }
}

TEST(OnebitAllreduce, DifferentSizesOnTheRanksFailOnEveryRank) {
  const auto errors = testing::run_ranks_collect_errors(2, [](Communicator& comm) {
    const size_t numel = comm.rank() == 0 ? 100 : 101;
    std::vector<float> x(numel, 1.0f), we(numel, 0.0f), se(numel, 0.0f);
    onebit_allreduce(comm, x.data(), we.data(), se.data(), numel);
  });
  for (const auto& e : errors) {
    EXPECT_NE(e.find("compressed_allreduce"), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace pride
