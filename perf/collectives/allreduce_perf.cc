// allreduce_perf: nccl-tests-style sweep of pride's fp32 SUM allreduce (the standard collectives), the
// baseline that sign-allreduce is compared with (SPEC §4's first row).
//
//   torchrun --standalone --nproc-per-node 4 --no-python allreduce_perf -b 4 -e 64M -f 4 -c 1
//
// Inputs are integer-valued floats, so every reduction order gives the same exact sum and the check
// compares bits with no tolerance.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstring>
#include <vector>

#include "collectives/engine/standard/collectives.h"
#include "perf/collectives/perf_data.h"
#include "perf/collectives/perf_driver.h"

namespace pride::perf {
namespace {

class AllreduceBench final : public Benchmark {
 public:
  void add_flags(CLI::App&) override {}
  std::string describe() const override { return "fp32 sum"; }
  std::vector<std::string> blocks() const override { return {"auto"}; }
  size_t element_size() const override { return sizeof(float); }
  std::string type_name() const override { return "float"; }

  void setup(Communicator& comm, const std::string&, size_t count) override {
    ++seed_;  // a fresh input per row, so a stale result from the previous row cannot pass the check
    input_.resize(count);
    for (size_t i = 0; i < count; ++i) input_[i] = sum_input(seed_, comm.rank(), i);
    work_.resize(count);
  }

  void restore_input() override { std::memcpy(work_.data(), input_.data(), input_.size() * sizeof(float)); }

  void run(Communicator& comm) override {
    allreduce(comm, work_.data(), work_.size(), ScalarType::kFloat32, ReduceOp::kSum);
  }

  uint64_t count_wrong(Communicator& comm) override {
    std::vector<float> want(work_.size(), 0.0f);
    for (int r = 0; r < comm.size(); ++r) {
      for (size_t i = 0; i < want.size(); ++i) want[i] += sum_input(seed_, r, i);
    }
    uint64_t wrong = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      if (std::memcmp(&work_[i], &want[i], sizeof(float)) == 0) continue;
      if (wrong++ == 0) {
        fmt::print(stderr, "allreduce_perf rank {}/{}: wrong value: n={} element {}: want {}, got {}\n", comm.rank(),
                   comm.size(), want.size(), i, want[i], work_[i]);
      }
    }
    if (wrong) {
      fmt::print(stderr, "allreduce_perf rank {}/{}: {} wrong values in n={}\n", comm.rank(), comm.size(), wrong,
                 want.size());
    }
    return wrong;
  }

  double bus_factor(int ranks) const override { return 2.0 * (ranks - 1) / ranks; }

  // Bits each rank sends per fp32 element, averaged over ranks like the measurement.
  double formula_bits(Communicator& comm, const std::string& algorithm) const override {
    const double n = comm.size();
    if (algorithm == "allreduce_ring") return 2 * (n - 1) / n * 32;  // SPEC §4: reduce-scatter + all-gather
    if (algorithm == "allreduce_small") {
      // Recursive doubling among the largest power of two p2 <= N (log2 p2 whole-buffer exchanges);
      // the N - p2 others fold in first and get the result back: one whole buffer each way.
      int p2 = 1, rounds = 0;
      while (p2 * 2 <= comm.size()) {
        p2 *= 2;
        ++rounds;
      }
      return (double(p2) * rounds + 2.0 * (comm.size() - p2)) / n * 32;
    }
    return -1;
  }

 private:
  uint64_t seed_ = 0;
  std::vector<float> input_, work_;
};

}  // namespace
}  // namespace pride::perf

int main(int argc, char** argv) {
  pride::perf::AllreduceBench bench;
  return pride::perf::perf_main(argc, argv, "allreduce_perf", bench);
}
