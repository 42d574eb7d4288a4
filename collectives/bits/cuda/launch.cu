// Launch geometry shared by the CUDA kernels.
#include <algorithm>
#include <array>

#include "collectives/bits/cuda/device_elements.cuh"

namespace pride::bits::cuda::device {

int grid_for(size_t items) {
  // Multiprocessors of the current device, asked once per device (a process may drive several).
  static std::array<int, 64> sms{};
  int dev = 0;
  cudaGetDevice(&dev);
  int& count = sms[size_t(dev) % sms.size()];
  if (count == 0) {
    cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev);
    if (count <= 0) count = 1;
  }
  const size_t blocks = (items + kThreads - 1) / kThreads;
  return int(std::clamp<size_t>(blocks, 1, size_t(count) * 8));
}

}  // namespace pride::bits::cuda::device
