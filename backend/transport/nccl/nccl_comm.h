// One NCCL communicator: the GPU transport of a pride group on one device (design.md, "NCCL").
//
// Bootstrapped through the group's store: rank 0 makes the ncclUniqueId and publishes it under a key,
// the others read it. Non-blocking (config.blocking = 0): no NCCL call blocks the calling thread, so
// that thread keeps watching its peers, the abort notices and the deadline while NCCL works
// (Collective::wait_external), and a failure becomes ncclCommAbort and an error on every surviving
// rank instead of a hang. The caller waits for ready() after every call that returned in progress.
//
// Not thread-safe: one thread (the torch plugin's worker) issues a communicator's calls.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <string>

#include "backend/store/store.h"

namespace pride {

class NcclComm {
 public:
  // Starts creating the communicator of `size` ranks on CUDA device `device`; `key` names the store key
  // for the unique id (one per communicator of the group). Returns once NCCL has started: wait for
  // ready() before the first operation. Throws pride::Error naming the rank when NCCL refuses.
  NcclComm(Store& store, const std::string& key, int rank, int size, int device);
  // A communicator that was not closed is aborted: that never blocks, whatever the peers do.
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  ncclComm_t get() const { return comm_; }
  int device() const { return device_; }
  int rank() const { return rank_; }
  int size() const { return size_; }

  // Throws pride::Error naming the rank and `what` unless `result` is ncclSuccess or ncclInProgress.
  void check(ncclResult_t result, const char* what) const;
  // Whether the last call's work has been taken in (ncclCommGetAsyncError says ncclSuccess).
  bool ready() const;
  // Why the communicator failed ("" while it has not): NCCL's asynchronous error, e.g. a peer that
  // closed its connection. Once it is non-empty the communicator must be aborted.
  std::string async_error() const;
  // Stops every operation in flight and frees the communicator; later calls throw. Idempotent.
  void abort();
  bool aborted() const { return comm_ == nullptr; }
  // The orderly end (every rank's operations are complete): ncclCommFinalize, waited for up to
  // `patience`, then ncclCommDestroy; a finalize that fails or does not finish in time aborts instead.
  void close(std::chrono::milliseconds patience);

 private:
  std::string describe(ncclResult_t result) const;
  ncclComm_t comm_ = nullptr;
  int rank_;
  int size_;
  int device_;
};

// The version of the NCCL library this process loaded, "2.28.9", for logs and errors.
std::string nccl_version();

}  // namespace pride
