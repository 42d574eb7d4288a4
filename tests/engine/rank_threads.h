// Test harness: runs one function per rank on its own thread, each rank with its own Communicator
// (its own UCX context and worker), all meeting through one in-memory c10d::HashStore.
#pragma once

#include <functional>
#include <string>

#include "backend/communicator.h"

namespace pride::testing {

struct RankOptions {
  int timeout_ms = 60000;
  // The host name each rank reports (Communicator::Options::hostname): simulated nodes inside one
  // process. Unset: the machine's.
  std::function<std::string(int rank)> hostname;
};

// Runs fn(comm) on `size` ranks and rethrows the first exception any rank raised, prefixed with the rank.
void run_ranks(int size, const std::function<void(Communicator&)>& fn, RankOptions options = {});

// Same, but returns each rank's exception message ("" when that rank succeeded).
std::vector<std::string> run_ranks_collect_errors(int size, const std::function<void(Communicator&)>& fn,
                                                  RankOptions options = {});

}  // namespace pride::testing
