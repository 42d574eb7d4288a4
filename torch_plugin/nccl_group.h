// The NCCL side of a pride process group (backend/transport/nccl/nccl_comm.h carries the bytes):
//   - which transport the group's CUDA tensors take (gpu_transport_choice.h), decided on the caller's
//     thread at the first CUDA operation, from every rank's GPU as published through the store, so the
//     same on every rank;
//   - its NCCL communicator (one device per rank), created on the worker at the first NCCL operation
//     (every rank reaches it in the same queue position);
//   - NcclCall: one NCCL operation inside a pride collective. Its calls go on pride's stream as one
//     NCCL group, and the worker waits for them on the device while it watches the peers, the abort
//     notices and the deadline (Collective::wait_external). A failure aborts the communicator, so no
//     rank hangs in a kernel waiting for a peer that is gone.
// Compiled only where pride is built with NCCL (PRIDE_WITH_NCCL_TRANSPORT).
#pragma once

#include <c10/core/Device.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "backend/communicator.h"
#include "backend/transport/gpu_transport_choice.h"
#include "backend/transport/nccl/nccl_comm.h"

namespace pride::torch_plugin {

class NcclGroup;

// One NCCL operation of a collective `c` on `device`, its calls queued on `stream`.
class NcclCall {
 public:
  NcclCall(Collective& c, NcclGroup& group, c10::Device device, cudaStream_t stream)
      : c_(c), group_(group), device_(device), stream_(stream) {}
  // Runs `calls` (ncclAllReduce, ncclSend, ... on the communicator, on stream(), each result passed to
  // NcclComm::check) as one NCCL group,
  // then waits until the device has done them. Throws pride errors naming the rank, the collective and,
  // where one is to blame, the peer; the communicator is aborted by then.
  void run(const char* what, const std::function<void(NcclComm&, cudaStream_t)>& calls);
  Collective& collective() { return c_; }
  cudaStream_t stream() const { return stream_; }
  // Bytes this rank's calls put on and took off the wire (device memory), in pride.stats().
  void count(size_t bytes_sent, size_t bytes_received) { c_.count_external(bytes_sent, bytes_received, MemoryType::kCuda); }

 private:
  Collective& c_;
  NcclGroup& group_;
  c10::Device device_;
  cudaStream_t stream_;
};

class NcclGroup {
 public:
  NcclGroup(std::shared_ptr<Store> store, int rank, int size);
  ~NcclGroup();

  // Caller's thread: the transport of this group's CUDA tensors. The first call (on `device`) publishes
  // this rank's GPU and reads every other rank's when PRIDE_CUDA_TRANSPORT=auto; later calls return
  // that decision.
  GpuTransport transport(c10::Device device, const Communicator& comm);
  // Any thread, after transport(): whether NCCL was chosen.
  bool chosen() const;

  // Worker: the communicator of `device`, created (and waited for, as part of `c`) on first use. One
  // device per rank: another device fails the collective.
  NcclComm& comm(Collective& c, c10::Device device);
  // Worker, at the orderly end of the group (after every rank's last operation): finalizes each
  // communicator, aborting those that do not finish within `patience`.
  void close(std::chrono::milliseconds patience);
  // Worker: aborts every communicator (torch's abort path, or a group that failed).
  void abort();

 private:
  std::shared_ptr<Store> store_;
  int rank_;
  int size_;
  mutable std::mutex mutex_;
  std::optional<GpuTransport> transport_;            // under mutex_
  std::map<int, std::unique_ptr<NcclComm>> comms_;   // worker only; by device index
  int created_ = 0;                                  // worker only: names each communicator's store key
};

}  // namespace pride::torch_plugin
