#include "torch_plugin/cuda_event_pool.h"

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>

#include <mutex>
#include <vector>

namespace pride::torch_plugin {
namespace {

// More events than calls in flight are never needed; past this many free ones a returned event is
// destroyed instead (a burst of async calls does not keep its events for the life of the process).
constexpr size_t kMaxFreePerDevice = 256;

struct EventPool {
  std::mutex mutex;
  std::vector<std::vector<cudaEvent_t>> free;  // by device index
};

// Never destroyed: its events may be handed back by objects destroyed at exit, after the CUDA runtime
// has been torn down, where cudaEventDestroy must not be called (torch leaks its event cache likewise).
EventPool& pool() {
  static auto* p = new EventPool;
  return *p;
}

}  // namespace

PooledCudaEvent::PooledCudaEvent(c10::DeviceIndex device) : device_(device) {
  TORCH_CHECK(device >= 0, "pride: a CUDA event needs a device index, got ", int(device));
  {
    EventPool& p = pool();
    std::lock_guard<std::mutex> lock(p.mutex);
    if (size_t(device) < p.free.size() && !p.free[size_t(device)].empty()) {
      event_ = p.free[size_t(device)].back();
      p.free[size_t(device)].pop_back();
      return;
    }
  }
  c10::cuda::CUDAGuard guard(device_);
  C10_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
}

PooledCudaEvent::~PooledCudaEvent() {
  if (event_ == nullptr) return;
  {
    EventPool& p = pool();
    std::lock_guard<std::mutex> lock(p.mutex);
    if (p.free.size() <= size_t(device_)) p.free.resize(size_t(device_) + 1);
    if (p.free[size_t(device_)].size() < kMaxFreePerDevice) {
      p.free[size_t(device_)].push_back(event_);
      return;
    }
  }
  // On its device, as torch destroys its events; a destructor has nowhere to report an error, and the
  // guard's cudaSetDevice may throw (at exit, the runtime gone): then the event is left to the driver.
  try {
    c10::cuda::CUDAGuard guard(device_);
    (void)cudaEventDestroy(event_);
  } catch (...) {
  }
}

}  // namespace pride::torch_plugin
