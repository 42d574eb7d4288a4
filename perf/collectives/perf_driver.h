// The driver shared by the nccl-tests-style perf binaries (SPEC §7): flags, bootstrap from the
// launcher's environment (torchrun or anything that sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT),
// the size sweep, timing, the cross-rank reduction of the measurements and the table rank 0 prints.
//
// A binary describes its collective as a Benchmark and calls perf_main(). Each row is one size of
// one block; a block is one configuration (e.g. one sign-allreduce algorithm with -a all).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/communicator.h"

namespace CLI {
class App;
}

namespace pride::perf {

class Benchmark {
 public:
  virtual ~Benchmark() = default;
  // Flags of this collective, added before parsing; validate() runs after parsing (throw to reject).
  virtual void add_flags(CLI::App& app) = 0;
  virtual void validate() {}
  virtual std::string describe() const = 0;        // header line: the flags that shape the rows
  virtual std::vector<std::string> blocks() const = 0;
  virtual size_t element_size() const = 0;         // bytes per element of the caller's tensor
  virtual std::string type_name() const = 0;       // "float", "bfloat16", "half"

  // Allocates and fills this rank's input for `count` elements of `block` (untimed).
  virtual void setup(Communicator& comm, const std::string& block, size_t count) = 0;
  virtual void restore_input() = 0;                // before every iteration (untimed): same work each time
  virtual void run(Communicator& comm) = 0;        // one collective (timed)
  virtual uint64_t count_wrong(Communicator& comm) = 0;  // elements of the last result that differ from the oracle
  // SPEC §4's bits sent per element for the algorithm that ran (the traffic key it counted under);
  // negative when there is no formula.
  virtual double formula_bits(Communicator& comm, const std::string& algorithm) const = 0;
  // nccl-tests' busbw / algbw for this collective over `ranks` (PERFORMANCE.md: 2(n-1)/n for allreduce);
  // negative where it has none, and busbw is then the bytes a rank put on the wire per second.
  virtual double bus_factor(int /*ranks*/) const { return -1; }
};

// Parses argv, connects the ranks, runs the sweep. Returns the process exit code: 0, 1 when any rank
// saw a wrong value, 2 on an error (printed with this rank's number).
int perf_main(int argc, char** argv, const std::string& tool, Benchmark& bench);

}  // namespace pride::perf
