// CUDA events reused from call to call instead of created and destroyed for each. Every collective on
// CUDA tensors records two (cuda_ordering.h) and an NCCL group call one more; ProcessGroupNCCL keeps
// such a cache as well. An event handed back may still be pending on a stream, which is safe: a
// cudaStreamWaitEvent issued earlier waits for the record it saw then, whatever is recorded later,
// and the owner that gives an event back no longer queries or synchronises it.
// Compiled only where pride is built with CUDA (PRIDE_WITH_CUDA_TENSORS).
#pragma once

#include <c10/core/Device.h>
#include <cuda_runtime_api.h>

namespace pride::torch_plugin {

// A timing-disabled event of one device, from the pool, back to it when destroyed.
class PooledCudaEvent {
 public:
  explicit PooledCudaEvent(c10::DeviceIndex device);
  ~PooledCudaEvent();
  PooledCudaEvent(const PooledCudaEvent&) = delete;
  PooledCudaEvent& operator=(const PooledCudaEvent&) = delete;

  cudaEvent_t get() const { return event_; }

 private:
  c10::DeviceIndex device_;
  cudaEvent_t event_ = nullptr;
};

}  // namespace pride::torch_plugin
