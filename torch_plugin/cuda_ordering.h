// Where an operation on CUDA tensors sits among CUDA streams, by ProcessGroupNCCL's rules:
//   - at issue (caller's thread) an event is recorded on the caller's current stream; pride's own
//     stream for the device waits on it before the operation touches the tensors, so the operation
//     sees everything the caller queued before the call;
//   - the tensors are recorded as used on pride's stream, so the caching allocator does not hand
//     their memory out again before pride's work on them is done;
//   - the operation's device work goes on pride's stream, and an end event is recorded there;
//   - Work::wait() makes the caller's current stream wait on the end event: the host does not block
//     on the GPU.
// Compiled only where pride is built with CUDA (PRIDE_WITH_CUDA_TENSORS).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <functional>
#include <memory>

#include "torch_plugin/cuda_event_pool.h"
#include "torch_plugin/device_completion.h"
#include "torch_plugin/private_cuda_stream.h"

namespace pride::torch_plugin {

class CudaOrdering final : public DeviceCompletion {
 public:
  // Caller's thread: records the start event on the current stream of `device`. `internal`: pride's
  // stream for the device (the group's); `after_end`: the group's stream on which a Future's events
  // are recorded after the end event (run_after_end). Both are held until this ordering is gone.
  CudaOrdering(c10::Device device, std::shared_ptr<const PrivateCudaStream> internal,
               std::shared_ptr<const PrivateCudaStream> after_end);
  ~CudaOrdering() override;
  CudaOrdering(const CudaOrdering&) = delete;
  CudaOrdering& operator=(const CudaOrdering&) = delete;

  // Caller's thread: `t`'s memory stays reserved until pride's stream has finished with it.
  void use_on_internal_stream(const at::Tensor& t);

  // Worker: pride's stream waits for the caller's stream as it was at issue.
  void enter();
  // Worker: records the end event on pride's stream (after the operation's last device work).
  void finish();
  // Worker: blocks the host until pride's stream has reached the end event.
  void wait_finished_on_host();

  c10::cuda::CUDAStream internal() const { return internal_; }
  cudaStream_t stream() const { return internal_.stream(); }

  void block_current_stream() override;
  bool done() override;
  void run_after_end(const std::function<void()>& fn) override;
  c10::Device device() const override { return device_; }

 private:
  c10::Device device_;
  std::shared_ptr<const PrivateCudaStream> internal_owner_, after_end_owner_;
  c10::cuda::CUDAStream internal_;
  PooledCudaEvent ready_;  // recorded on the caller's stream at issue
  PooledCudaEvent end_;    // recorded on pride's stream after the operation
  std::atomic<bool> finished_{false};
};

}  // namespace pride::torch_plugin
