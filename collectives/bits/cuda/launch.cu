// Launch geometry shared by the CUDA kernels.
#include <algorithm>
#include <array>
#include <atomic>

#include "collectives/bits/cuda/device_elements.cuh"

namespace pride::bits::cuda::device {

int grid_for(size_t items) {
  // Multiprocessors of the current device, asked once per device (a process may drive several, and the
  // caller's thread and the backend's worker both launch: the cache is atomic).
  static std::array<std::atomic<int>, 64> sms{};
  int dev = 0;
  cudaGetDevice(&dev);
  int count = sms[size_t(dev) % sms.size()].load(std::memory_order_relaxed);
  if (count == 0) {
    if (cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || count <= 0) count = 1;
    sms[size_t(dev) % sms.size()].store(count, std::memory_order_relaxed);
  }
  const size_t blocks = (items + kThreads - 1) / kThreads;
  return int(std::clamp<size_t>(blocks, 1, size_t(count) * 8));
}

}  // namespace pride::bits::cuda::device
