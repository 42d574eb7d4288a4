#include "torch_plugin/cuda_ordering.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

namespace pride::torch_plugin {

CudaOrdering::CudaOrdering(c10::Device device, c10::cuda::CUDAStream internal)
    : device_(device), internal_(internal), ready_(device.index()), end_(device.index()) {
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
  // A stream of torch's pool, not pride's own: by the time a callback thread gets here the worker may
  // have queued later operations on pride's stream, and an event recorded there would wait for them too.
  c10::cuda::CUDAGuard device_guard(device_);
  c10::cuda::CUDAStream after_end = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device_.index());
  if (finished_.load(std::memory_order_acquire)) {
    C10_CUDA_CHECK(cudaStreamWaitEvent(after_end.stream(), end_.get(), 0));
  }
  c10::cuda::CUDAStreamGuard stream_guard(after_end);
  fn();
}

}  // namespace pride::torch_plugin
