#include "torch_plugin/cuda_ordering.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

namespace pride::torch_plugin {

CudaOrdering::CudaOrdering(c10::Device device, std::shared_ptr<const PrivateCudaStream> internal,
                           std::shared_ptr<const PrivateCudaStream> after_end)
    : device_(device),
      internal_owner_(std::move(internal)),
      after_end_owner_(std::move(after_end)),
      internal_(internal_owner_->get()),
      ready_(device.index()),
      end_(device.index()) {
  c10::cuda::CUDAGuard guard(device_);
  C10_CUDA_CHECK(cudaEventRecord(ready_.get(), c10::cuda::getCurrentCUDAStream(device_.index()).stream()));
}

// The events go back to their pool (cuda_event_pool.h), pending or not.
CudaOrdering::~CudaOrdering() = default;

void CudaOrdering::use_on_internal_stream(const at::Tensor& t) {
  if (t.defined() && t.is_cuda() && t.storage().data_ptr().get() != nullptr) {
    c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), internal_);
  }
}

void CudaOrdering::enter() {
  c10::cuda::CUDAGuard guard(device_);
  C10_CUDA_CHECK(cudaStreamWaitEvent(internal_.stream(), ready_.get(), 0));
}

void CudaOrdering::finish() {
  c10::cuda::CUDAGuard guard(device_);
  C10_CUDA_CHECK(cudaEventRecord(end_.get(), internal_.stream()));
  finished_.store(true, std::memory_order_release);
}

void CudaOrdering::wait_finished_on_host() {
  if (finished_.load(std::memory_order_acquire)) C10_CUDA_CHECK(cudaEventSynchronize(end_.get()));
}

void CudaOrdering::block_current_stream() {
  // A failed operation never recorded its end; there is nothing to wait for on the device then.
  if (!finished_.load(std::memory_order_acquire)) return;
  c10::cuda::CUDAGuard guard(device_);
  C10_CUDA_CHECK(cudaStreamWaitEvent(c10::cuda::getCurrentCUDAStream(device_.index()).stream(), end_.get(), 0));
}

bool CudaOrdering::done() {
  if (!finished_.load(std::memory_order_acquire)) return false;
  c10::cuda::CUDAGuard guard(device_);
  const cudaError_t status = cudaEventQuery(end_.get());
  if (status == cudaErrorNotReady) {
    (void)cudaGetLastError();  // not an error: clear it
    return false;
  }
  C10_CUDA_CHECK(status);
  return true;
}

void CudaOrdering::run_after_end(const std::function<void()>& fn) {
  // Not pride's operation stream: by the time a callback thread gets here the worker may have queued
  // later operations there, and an event recorded there would wait for them too. Not one of torch's
  // pool either, which could be that very stream or another group's NCCL stream (private_cuda_stream.h).
  // Every Future of the group waits here on its own end event. The operations end in order, so an
  // earlier one's end costs nothing; a Future asked for late also waits for the ends of the operations
  // whose Futures were made before it (they have ended, or soon will).
  c10::cuda::CUDAGuard device_guard(device_);
  const c10::cuda::CUDAStream after_end = after_end_owner_->get();
  // Every path that succeeds records the end (finish()) before the Work completes: a Future whose
  // events would order nothing is a bug, not a case to pass over.
  TORCH_INTERNAL_ASSERT(finished_.load(std::memory_order_acquire),
                        "pride: a CUDA operation completed without recording its end event");
  C10_CUDA_CHECK(cudaStreamWaitEvent(after_end.stream(), end_.get(), 0));
  c10::cuda::CUDAStreamGuard stream_guard(after_end);
  fn();
}

}  // namespace pride::torch_plugin
