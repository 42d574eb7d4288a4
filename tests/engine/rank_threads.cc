#include "tests/engine/rank_threads.h"

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <atomic>
#include <thread>
#include <vector>

#include "backend/store/c10d_store.h"

namespace pride::testing {

std::vector<std::string> run_ranks_collect_errors(int size, const std::function<void(Communicator&)>& fn,
                                                  RankOptions options) {
  static std::atomic<int> group_counter{0};
  auto hash = c10::make_intrusive<c10d::HashStore>();
  hash->setTimeout(std::chrono::milliseconds(options.timeout_ms));
  auto store = make_prefix_store("test" + std::to_string(group_counter++), wrap_c10d_store(hash));
  std::vector<std::string> errors(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        Communicator comm(store, r, size, {std::chrono::milliseconds(options.timeout_ms)});
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
