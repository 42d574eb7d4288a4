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
};

// Never destroyed: a holder may give its stream back during exit, after static destructors.
FreeStreams& free_streams() {
  static auto* streams = new FreeStreams();
  return *streams;
}

}  // namespace

PrivateCudaStream::PrivateCudaStream(c10::DeviceIndex device) : device_(device) {
  {
    FreeStreams& free = free_streams();
    std::lock_guard<std::mutex> lock(free.mutex);
    std::vector<cudaStream_t>& list = free.by_device[device_];
    if (!list.empty()) {
      stream_ = list.back();
      list.pop_back();
      return;
    }
  }
  c10::cuda::CUDAGuard guard(device_);
  // Non-blocking, as torch's pool streams are: no implicit order with the legacy default stream.
  C10_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

PrivateCudaStream::~PrivateCudaStream() {
  FreeStreams& free = free_streams();
  std::lock_guard<std::mutex> lock(free.mutex);
  free.by_device[device_].push_back(stream_);
}

}  // namespace pride::torch_plugin
