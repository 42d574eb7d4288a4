// Adapter from torch's c10d::Store to pride::Store, and the torchrun-compatible bootstrap that
// standalone binaries use (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT → c10d::TCPStore).
#pragma once

#include <chrono>
#include <memory>

#include <c10/util/intrusive_ptr.h>

#include "backend/store/store.h"

namespace c10d {
class Store;
}

namespace pride {

std::shared_ptr<Store> wrap_c10d_store(c10::intrusive_ptr<c10d::Store> store);

// What a launcher told this process (torchrun and compatible launchers set these variables).
struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool use_agent_store = false;  // TORCHELASTIC_USE_AGENT_STORE: torchrun's agent hosts the store
  std::string restart_count = "0";
};
LaunchEnv read_launch_env();  // throws InvalidArgument naming the missing or malformed variable

// Connects to (rank 0: hosts, unless torchrun's agent does) the TCPStore the launcher describes,
// the way torch's env:// rendezvous does, so pride binaries and Python ranks can share one job.
std::shared_ptr<Store> connect_store(const LaunchEnv& env, std::chrono::milliseconds timeout);

}  // namespace pride
