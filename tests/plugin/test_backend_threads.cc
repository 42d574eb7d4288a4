// The torch plugin's threads, driven the way torch drives them but without Python: ranks are threads
// of one process, each with its own PrideBackend over one in-memory c10d::HashStore. On every rank one
// thread issues operations, another waits on their Works and checks the results, a third polls them,
// and the backend's own worker runs them. Results are checked against arithmetic, not against pride.
// scripts/sanitize.sh --thread runs this under ThreadSanitizer (docs/design.md).
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend/common/settings.h"
#include "torch_plugin/pride_backend.h"

namespace pride::torch_plugin {
namespace {

using namespace std::chrono_literals;

// Runs fn(backend) on `size` rank threads; returns each rank's exception message ("" when none).
std::vector<std::string> run_backends(int size, const std::function<void(PrideBackend&)>& fn) {
  static std::atomic<int> group{0};
  // As in tests/engine/rank_threads.cc: UCX contexts of one process talk over TCP loopback.
  setenv("PRIDE_SHARED_MEMORY", "0", /*overwrite=*/0);
  Settings::reload();
  auto hash = c10::make_intrusive<c10d::HashStore>();
  hash->setTimeout(60s);
  auto store = c10::make_intrusive<c10d::PrefixStore>("backend_threads" + std::to_string(group++), hash);
  std::vector<std::string> errors(size_t(size), "");
  std::vector<std::thread> ranks;
  for (int r = 0; r < size; ++r) {
    ranks.emplace_back([&, r] {
      try {
        auto backend = c10::make_intrusive<PrideBackend>(store, r, size, std::chrono::milliseconds(60000));
        fn(*backend);
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
    });
  }
  for (auto& t : ranks) t.join();
  return errors;
}

// A Work and how to check it once it is done, handed from the issuing thread to the waiting one.
struct Pending {
  c10::intrusive_ptr<c10d::Work> work;
  std::function<void()> check;
};

class Handoff {
 public:
  void push(Pending p) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(p));
    }
    ready_.notify_one();
  }
  void close() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      closed_ = true;
    }
    ready_.notify_all();
  }
  bool pop(Pending& p) {
    std::unique_lock<std::mutex> lock(mutex_);
    ready_.wait(lock, [this] { return closed_ || !queue_.empty(); });
    if (queue_.empty()) return false;
    p = std::move(queue_.front());
    queue_.pop_front();
    return true;
  }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Pending> queue_;
  bool closed_ = false;
};

TEST(BackendThreads, IssueWaitAndPollFromDifferentThreads) {
  constexpr int kRanks = 3, kRounds = 40, kNumel = 1000;
  auto errors = run_backends(kRanks, [&](PrideBackend& backend) {
    const int r = backend.getRank(), n = backend.getSize();
    Handoff handoff;
    std::vector<std::string> failures;
    std::mutex failures_mutex;
    auto fail = [&](const std::string& what) {
      std::lock_guard<std::mutex> lock(failures_mutex);
      failures.push_back(what);
    };
    // The waiter: wait() on another thread than the one that issued, as autograd hooks and DDP do.
    std::thread waiter([&] {
      Pending p;
      while (handoff.pop(p)) {
        try {
          p.work->wait();
          p.check();
        } catch (const std::exception& e) {
          fail(e.what());
        }
      }
    });
    // The poller: isCompleted() and the backend's options, concurrently with everything else.
    std::atomic<bool> stop_polling{false};
    std::vector<c10::intrusive_ptr<c10d::Work>> polled;
    std::mutex polled_mutex;
    std::thread poller([&] {
      while (!stop_polling.load()) {
        {
          std::lock_guard<std::mutex> lock(polled_mutex);
          for (auto& w : polled) (void)w->isCompleted();
        }
        (void)backend.getBackendOptions();
        std::this_thread::sleep_for(1ms);
      }
    });

    for (int i = 0; i < kRounds; ++i) {
      // allreduce SUM: rank q contributes (q + 1) * (i + 1) in every element.
      std::vector<at::Tensor> sum{at::full({kNumel}, int64_t(r + 1) * (i + 1), at::kLong)};
      auto w = backend.allreduce(sum, c10d::AllreduceOptions{});
      const int64_t want = int64_t(n) * (n + 1) / 2 * (i + 1);
      handoff.push({w, [sum, want, i, &fail] {
                      if (!sum[0].eq(want).all().item<bool>()) fail("allreduce round " + std::to_string(i));
                    }});
      {
        std::lock_guard<std::mutex> lock(polled_mutex);
        polled.push_back(w);
      }
      // broadcast from a root that moves round by round.
      const int root = i % n;
      std::vector<at::Tensor> b{at::full({7}, r == root ? double(i) : -1.0, at::kDouble)};
      c10d::BroadcastOptions bo;
      bo.rootRank = root;
      handoff.push({backend.broadcast(b, bo), [b, i, &fail] {
                      if (!b[0].eq(double(i)).all().item<bool>()) fail("broadcast round " + std::to_string(i));
                    }});
      // A ring of send/recv: to the right, from the left, tagged by round.
      std::vector<at::Tensor> out{at::full({5}, float(r * 100 + i), at::kFloat)};
      std::vector<at::Tensor> in{at::zeros({5}, at::kFloat)};
      const int left = (r + n - 1) % n;
      auto recv = backend.recv(in, left, i);
      auto send = backend.send(out, (r + 1) % n, i);
      handoff.push({send, [] {}});
      handoff.push({recv, [in, left, i, &fail] {
                      if (!in[0].eq(float(left * 100 + i)).all().item<bool>()) fail("recv round " + std::to_string(i));
                    }});
    }
    // allgather: every rank's rank number, in rank order.
    std::vector<at::Tensor> mine{at::full({3}, int32_t(r), at::kInt)};
    std::vector<std::vector<at::Tensor>> all(1);
    for (int q = 0; q < n; ++q) all[0].push_back(at::empty({3}, at::kInt));
    auto g = backend.allgather(all, mine, c10d::AllgatherOptions{});
    handoff.push({g, [all, n, &fail] {
                    for (int q = 0; q < n; ++q) {
                      if (!all[0][size_t(q)].eq(q).all().item<bool>()) fail("allgather from " + std::to_string(q));
                    }
                  }});
    handoff.close();
    waiter.join();
    stop_polling = true;
    poller.join();
    backend.shutdown();
    if (!failures.empty()) throw std::runtime_error("wrong results: " + failures.front());
  });
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(errors[size_t(r)], "") << "rank " << r;
}

TEST(BackendThreads, AbortFromAnotherThreadEndsAWaitInProgress) {
  auto errors = run_backends(2, [](PrideBackend& backend) {
    const int r = backend.getRank();
    std::vector<at::Tensor> in{at::zeros({4}, at::kFloat)};
    auto recv = backend.recv(in, 1 - r, /*tag=*/12345);  // nobody sends it
    std::thread aborter([&] {
      std::this_thread::sleep_for(300ms);
      backend.abort();
    });
    const auto start = std::chrono::steady_clock::now();
    std::string message;
    try {
      recv->wait();
    } catch (const std::exception& e) {
      message = e.what();
    }
    aborter.join();
    const auto waited = std::chrono::steady_clock::now() - start;
    if (message.find("aborted") == std::string::npos) throw std::runtime_error("wait() ended with: '" + message + "'");
    if (waited > 10s) throw std::runtime_error("abort took more than 10 s to end the wait");
  });
  for (int r = 0; r < 2; ++r) EXPECT_EQ(errors[size_t(r)], "") << "rank " << r;
}

}  // namespace
}  // namespace pride::torch_plugin
