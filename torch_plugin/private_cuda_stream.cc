#include "torch_plugin/private_cuda_stream.h"

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include <map>
#include <mutex>
#include <vector>

namespace pride::torch_plugin {
namespace {

struct FreeStreams {
  std::mutex mutex;
  std::map<c10::DeviceIndex, std::vector<cudaStream_t>> by_device;
  // Given back with work still queued (a group destroyed with an operation that never ended, waiting
  // for a peer): not handed out until that work is done, or the next group would queue behind it.
  std::map<c10::DeviceIndex, std::vector<cudaStream_t>> draining;
};

// cudaSuccess: nothing queued; cudaErrorNotReady: work queued; anything else: unusable.
cudaError_t query(cudaStream_t stream) {
  const cudaError_t status = cudaStreamQuery(stream);
  if (status == cudaErrorNotReady) (void)cudaGetLastError();  // not an error: clear it
  return status;
}

// Never destroyed: a holder may give its stream back during exit, after static destructors.
FreeStreams& free_streams() {
  static auto* streams = new FreeStreams();
  return *streams;
}

}  // namespace

PrivateCudaStream::PrivateCudaStream(c10::DeviceIndex device) : device_(device) {
  c10::cuda::CUDAGuard guard(device_);
  {
    FreeStreams& free = free_streams();
    std::lock_guard<std::mutex> lock(free.mutex);
    std::vector<cudaStream_t>& list = free.by_device[device_];
    std::vector<cudaStream_t>& draining = free.draining[device_];
    for (auto it = draining.begin(); it != draining.end();) {
      const cudaError_t status = query(*it);
      if (status == cudaErrorNotReady) {
        ++it;
        continue;
      }
      if (status == cudaSuccess) list.push_back(*it);
      it = draining.erase(it);  // done, or unusable (left to the driver)
    }
    if (!list.empty()) {
      stream_ = list.back();
      list.pop_back();
      return;
    }
  }
  // Non-blocking, as torch's pool streams are: no implicit order with the legacy default stream.
  C10_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

PrivateCudaStream::~PrivateCudaStream() {
  // A destructor has nowhere to report an error, and the guard may throw when the CUDA runtime is
  // already gone (a holder freed at exit): the stream is then left to the driver.
  try {
    c10::cuda::CUDAGuard guard(device_);
    const cudaError_t status = query(stream_);
    if (status != cudaSuccess && status != cudaErrorNotReady) return;
    FreeStreams& free = free_streams();
    std::lock_guard<std::mutex> lock(free.mutex);
    (status == cudaSuccess ? free.by_device : free.draining)[device_].push_back(stream_);
  } catch (...) {
  }
}

}  // namespace pride::torch_plugin
