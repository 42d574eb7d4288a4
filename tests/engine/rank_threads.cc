#include "tests/engine/rank_threads.h"

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <atomic>
#include <cstdlib>
#include <thread>
#include <vector>

#include "backend/common/settings.h"
#include "backend/store/c10d_store.h"

namespace pride::testing {

std::vector<std::string> run_ranks_collect_errors(int size, const std::function<void(Communicator&)>& fn,
                                                  RankOptions options) {
  static std::atomic<int> group_counter{0};
  // Ranks here are threads of one process, each with its own UCX context. Between contexts of one
  // process UCX's shared-memory endpoints fail to connect now and then (posix: "/proc/<pid>/fd/N: No
  // such file", sysv: shmat EINVAL; 2-4% of runs of a 2-rank test), so thread ranks talk over TCP
  // loopback. Ranks as processes (tests/multiproc) use shared memory and did not show this.
  setenv("PRIDE_SHARED_MEMORY", "0", /*overwrite=*/0);
  Settings::reload();
  auto hash = c10::make_intrusive<c10d::HashStore>();
  hash->setTimeout(std::chrono::milliseconds(options.timeout_ms));
  auto store = make_prefix_store("test" + std::to_string(group_counter++), wrap_c10d_store(hash));
  std::vector<std::string> errors(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        Communicator comm(store, r, size,
                          {std::chrono::milliseconds(options.timeout_ms), options.hostname ? options.hostname(r) : ""});
        fn(comm);
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
        if (errors[size_t(r)].empty()) errors[size_t(r)] = "(empty exception message)";
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

void run_ranks(int size, const std::function<void(Communicator&)>& fn, RankOptions options) {
  auto errors = run_ranks_collect_errors(size, fn, options);
  for (size_t r = 0; r < errors.size(); ++r) {
    if (!errors[r].empty()) throw std::runtime_error("rank " + std::to_string(r) + ": " + errors[r]);
  }
}

}  // namespace pride::testing
