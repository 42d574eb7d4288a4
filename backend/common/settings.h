// Every environment variable pride reads, in one place (README.md lists them for users).
// Read once, on first use; tests may call Settings::reload() after changing the environment.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace pride {

struct Settings {
  std::string algo = "auto";               // PRIDE_ALGO: auto|ring|tree|direct|allgather|hier — sign-allreduce algorithm
  std::string log_level = "warn";          // PRIDE_DEBUG: trace|debug|info|warn|error|off, any case (held as spdlog's name)
  std::chrono::milliseconds timeout{300000};  // PRIDE_TIMEOUT (seconds): default deadline of the C++ API
  size_t segment_bytes = 0;                // PRIDE_SEGMENT_BYTES: packed bytes per pipeline segment (0: by algorithm)
  bool check_fingerprint = true;           // PRIDE_CHECK_FINGERPRINT=0 disables the per-collective check
  double link_latency_us = 0;              // PRIDE_LINK_LATENCY_US: cost model override (0 = built-in)
  double link_bandwidth_gbps = 0;          // PRIDE_LINK_BANDWIDTH_GBPS: cost model override (0 = built-in)
  std::string hostname;                    // PRIDE_HOSTNAME: overrides gethostname() (tests simulate nodes)
  bool shared_memory = true;               // PRIDE_SHARED_MEMORY=0: same-host peers over TCP loopback too
  int threads = 0;                         // PRIDE_THREADS: pack/unpack threads per rank (0: cores / ranks here)
  std::string cuda_path = "auto";          // PRIDE_CUDA_PATH: auto|device|host — how CUDA tensors' bits travel
  std::string result_coding = "auto";      // PRIDE_RESULT_CODING: auto|planes|trits|counts|packed — all-gathered results on the wire
  std::string cuda_transport = "auto";     // PRIDE_CUDA_TRANSPORT: auto|nccl|ucx — which transport CUDA tensors take

  static const Settings& get();
  static void reload();
};

}  // namespace pride
