// sign_allreduce_perf: nccl-tests-style sweep of pride's sign-allreduce (SPEC §2, §4, §7).
//
//   torchrun --standalone --nproc-per-node 4 --no-python sign_allreduce_perf -b 4 -e 64M -f 4 -a all -c 1
//
// Sizes are bytes of the caller's tensor (-d dtype). -a all runs one block of rows per algorithm.
// The check compares with the int32 oracle of SPEC §2 bit for bit, on every rank.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstring>
#include <vector>

#include "backend/common/error.h"
#include "collectives/bits/parallel_words.h"
#include "collectives/engine/patterns/chunks.h"
#include "collectives/engine/sign/selector.h"
#include "collectives/engine/sign/sign_allreduce.h"
#include "perf/collectives/perf_data.h"
#include "perf/collectives/perf_driver.h"

namespace pride::perf {
namespace {

class SignAllreduceBench final : public Benchmark {
 public:
  void add_flags(CLI::App& app) override {
    // CLI11 refuses a value outside these sets, naming the flag and the choices.
    app.add_option("-a,--algorithm", algorithm_text_,
                   "auto|ring|tree|direct|allgather|hier|all (all: one block each), or kernels: no communication, only "
                   "the kernels one rank of the direct algorithm runs (vote, binary)")
        ->check(CLI::IsMember({"auto", "ring", "tree", "direct", "allgather", "hier", "all", "kernels"}))
        ->capture_default_str();
    app.add_option("-m,--mode", mode_text_, "vote|mean")->check(CLI::IsMember({"vote", "mean"}))->capture_default_str();
    app.add_option("-V,--votes", votes_text_, "binary|ternary")
        ->check(CLI::IsMember({"binary", "ternary"}))
        ->capture_default_str();
    app.add_option("-d,--datatype", dtype_text_, "float|bfloat16|half (or float32, bf16, float16)")
        ->check(CLI::IsMember({"float", "float32", "bfloat16", "bf16", "half", "float16"}))
        ->capture_default_str();
  }

  void validate() override {
    mode_ = parse_sign_mode(mode_text_);
    votes_ = parse_vote_kind(votes_text_);
    if (dtype_text_ == "float" || dtype_text_ == "float32") dtype_ = bits::DType::kFloat32;
    else if (dtype_text_ == "bfloat16" || dtype_text_ == "bf16") dtype_ = bits::DType::kBFloat16;
    else if (dtype_text_ == "half" || dtype_text_ == "float16") dtype_ = bits::DType::kFloat16;
    else PRIDE_CHECK_ARG(false, "-d '{}': expected float, bfloat16 or half", dtype_text_);
    if (algorithm_text_ == "kernels") {
      PRIDE_CHECK_ARG(mode_ == SignMode::kVote && votes_ == VoteKind::kBinary,
                      "-a kernels times the binary vote only (-m vote -V binary)");
      blocks_.push_back("kernels");
    } else if (algorithm_text_ == "all") {
      for (auto a : {SignAlgorithm::kRing, SignAlgorithm::kTree, SignAlgorithm::kDirect, SignAlgorithm::kAllgather,
                     SignAlgorithm::kHier}) {
        blocks_.push_back(name(a));
      }
    } else {
      blocks_.push_back(name(parse_sign_algorithm(algorithm_text_)));
    }
  }

  std::string describe() const override {
    return fmt::format("algorithm {}, mode {}, votes {}", algorithm_text_, name(mode_), name(votes_));
  }
  std::vector<std::string> blocks() const override { return blocks_; }
  size_t element_size() const override { return bits::dtype_size(dtype_); }
  std::string type_name() const override { return dtype_text_; }

  void setup(Communicator& comm, const std::string& block, size_t count) override {
    kernels_only_ = block == "kernels";
    algorithm_ = kernels_only_ ? SignAlgorithm::kDirect : parse_sign_algorithm(block);
    count_ = count;
    ++seed_;  // a fresh input per row, so a stale result from the previous row cannot pass the check
    input_.resize(count * element_size());
    for (size_t i = 0; i < count; ++i) store_as(dtype_, sign_input(seed_, comm.rank(), i), input_.data(), i);
    work_.resize(input_.size());
  }

  void restore_input() override { std::memcpy(work_.data(), input_.data(), input_.size()); }

  void run(Communicator& comm) override {
    if (kernels_only_) run_kernels(comm);
    else sign_allreduce(comm, work_.data(), dtype_, count_, {mode_, votes_, algorithm_});
  }

  // What one rank of the direct algorithm computes, without the wire: pack the tensor (with the
  // rank's kernel threads, as sign_allreduce does), count N ballots over the rank's own chunk and
  // decide it, then unpack the whole tensor. The ballots are this rank's own votes N times, and the
  // other chunks' result is its own vote plane (the copy a received chunk costs), so the result is
  // this rank's own signs: x > 0 → +1, else −1. Issue 15's one-host target compares the collective
  // with this, run by the same processes at the same time.
  void run_kernels(Communicator& comm) {
    const int n = comm.size(), threads = comm.kernel_threads();
    const size_t W = bits::words_for(count_);
    const SignPlan plan = SignPlan::make(n, mode_, votes_);
    votes_plane_.resize(W);
    result_.assign(size_t(plan.result_planes) * W, 0);
    const size_t elem = element_size();
    bits::parallel_words(W, threads, [&](size_t first, size_t words) {
      const size_t begin = first * 64, len = std::min(count_, (first + words) * 64) - begin;
      bits::pack_binary(work_.data() + begin * elem, dtype_, len, votes_plane_.data() + first);
    });
    const patterns::Range mine = patterns::chunk(W, n, comm.rank());
    const int planes = bits::planes_for(n);
    counts_.resize(size_t(planes) * std::max<size_t>(mine.size, 1));
    std::vector<const uint64_t*> ballots(size_t(n), votes_plane_.data() + mine.begin);
    bits::count_planes(ballots.data(), n, mine.size, counts_.data(), planes);
    std::memcpy(result_.data(), votes_plane_.data(), W * 8);
    plan.finalize(counts_.data(), planes, mine.size, result_.data() + mine.begin, W);
    const uint64_t* tie = plan.has_tie_plane() ? result_.data() + W : nullptr;
    bits::parallel_words(W, threads, [&](size_t first, size_t words) {
      const size_t begin = first * 64, len = std::min(count_, (first + words) * 64) - begin;
      bits::unpack_vote(result_.data() + first, tie ? tie + first : nullptr, len, work_.data() + begin * elem, dtype_);
    });
  }

  uint64_t count_wrong(Communicator& comm) override {
    // s = Σ votes as int32 from every rank's regenerated input, then sign(s) or float32(s) / float32(N)
    // rounded to the dtype; compared bit for bit (SPEC §2).
    const bool ternary = votes_ == VoteKind::kTernary;
    std::vector<int32_t> sum(count_, 0);
    for (int r = 0; r < comm.size(); ++r) {
      if (kernels_only_ && r != comm.rank()) continue;  // only this rank's own signs (run_kernels)
      for (size_t i = 0; i < count_; ++i) sum[i] += vote_of(sign_input(seed_, r, i), ternary);
    }
    const size_t w = element_size();
    std::vector<uint8_t> want(w);
    uint64_t wrong = 0;
    for (size_t i = 0; i < count_; ++i) {
      float y = mode_ == SignMode::kVote ? float((sum[i] > 0) - (sum[i] < 0)) : float(sum[i]) / float(comm.size());
      store_as(dtype_, y, want.data(), 0);
      if (std::memcmp(work_.data() + i * w, want.data(), w) == 0) continue;
      if (wrong++ == 0) {
        uint32_t got_bits = 0, want_bits = 0;  // raw patterns: a wrong value may be any bit pattern
        std::memcpy(&got_bits, work_.data() + i * w, w);
        std::memcpy(&want_bits, want.data(), w);
        fmt::print(stderr, "sign_allreduce_perf rank {}/{}: wrong value: {} n={} element {}: vote sum {}, want {} "
                   "({:#x}), got {:#x}\n", comm.rank(), comm.size(), name(algorithm_), count_, i, sum[i], y,
                   want_bits, got_bits);
      }
    }
    if (wrong) {
      fmt::print(stderr, "sign_allreduce_perf rank {}/{}: {} wrong values in {} n={}\n", comm.rank(), comm.size(),
                 wrong, name(algorithm_), count_);
    }
    return wrong;
  }

  double formula_bits(Communicator& comm, const std::string& algorithm) const override {
    // The traffic key is the algorithm's name; auto resolves to one of them.
    for (auto a : {SignAlgorithm::kRing, SignAlgorithm::kTree, SignAlgorithm::kDirect, SignAlgorithm::kAllgather,
                   SignAlgorithm::kHier}) {
      if (algorithm != name(a)) continue;
      SignPlan plan = SignPlan::make(comm.size(), mode_, votes_);
      plan.result_coding = select_result_coding(plan, a, count_, comm.num_nodes(), comm.ranks_per_core());
      plan.packed_node_counts = select_packed_node_counts(plan, a, count_, comm.num_nodes(), comm.ranks_per_core());
      return wire_bits_per_element(a, plan, comm.num_nodes());
    }
    return -1;
  }

 private:
  std::string algorithm_text_ = "auto", mode_text_ = "vote", votes_text_ = "binary", dtype_text_ = "float";
  SignMode mode_ = SignMode::kVote;
  VoteKind votes_ = VoteKind::kBinary;
  bits::DType dtype_ = bits::DType::kFloat32;
  std::vector<std::string> blocks_;
  SignAlgorithm algorithm_ = SignAlgorithm::kAuto;
  bool kernels_only_ = false;
  std::vector<uint64_t> votes_plane_, counts_, result_;
  size_t count_ = 0;
  uint64_t seed_ = 0;
  std::vector<uint8_t> input_, work_;
};

}  // namespace
}  // namespace pride::perf

int main(int argc, char** argv) {
  pride::perf::SignAllreduceBench bench;
  return pride::perf::perf_main(argc, argv, "sign_allreduce_perf", bench);
}
