// The CUDA pack/unpack kernels against the CPU kernels (themselves tested against the oracles), on
// every dtype and awkward lengths. Skips cleanly where no GPU is present, as on the CI machines.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <vector>

#include "collectives/bits/cuda/pack_kernels.h"
#include "tests/kernels/oracle.h"

namespace pride::bits::test {
namespace {

bool have_gpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

template <class T>
T* device_copy(const std::vector<T>& host) {
  T* d = nullptr;
  EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), std::max<size_t>(1, host.size()) * sizeof(T)), cudaSuccess);
  if (!host.empty()) {
    EXPECT_EQ(cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  return d;
}

template <class T>
std::vector<T> host_copy(const T* d, size_t n) {
  std::vector<T> h(n);
  if (n > 0) {
    EXPECT_EQ(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  }
  return h;
}

TEST(CudaKernels, PackAndUnpackMatchTheCpuKernels) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device on this machine";
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    for (size_t n : {size_t(0), size_t(1), size_t(63), size_t(64), size_t(65), size_t(100003), size_t(1) << 20}) {
      const auto x = random_values(dtype, n);
      std::vector<uint64_t> want(words_for(n));
      pack_binary(x.data(), dtype, n, want.data());
      uint8_t* dx = device_copy(x);
      uint64_t* dplane = nullptr;
      ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dplane), std::max<size_t>(1, want.size()) * 8), cudaSuccess);
      ASSERT_EQ(cuda::pack_binary(dx, dtype, n, dplane, nullptr), cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_EQ(host_copy(dplane, want.size()), want) << dtype_name(dtype) << " n=" << n;

      const auto tie = random_plane(n, 0.2);
      std::vector<uint8_t> y_cpu(n * dtype_size(dtype));
      unpack_vote(want.data(), tie.data(), n, y_cpu.data(), dtype);
      uint64_t* dtie = device_copy(tie);
      uint8_t* dy = nullptr;
      ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dy), std::max<size_t>(1, y_cpu.size())), cudaSuccess);
      ASSERT_EQ(cuda::unpack_vote(dplane, dtie, n, dy, dtype, nullptr), cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_EQ(host_copy(dy, y_cpu.size()), y_cpu) << dtype_name(dtype) << " n=" << n;
      cudaFree(dx);
      cudaFree(dplane);
      cudaFree(dtie);
      cudaFree(dy);
    }
  }
}

}  // namespace
}  // namespace pride::bits::test
