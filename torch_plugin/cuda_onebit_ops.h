// The compressed allreduce's tensor and errors on one GPU (OnebitOps,
// collectives/engine/compressed/onebit_ops.h): the CUDA kernels queued on one stream compress, average
// and expand in device memory, and only the packed signs (1/32 of the tensor) and two doubles cross
// to the host, where the algorithm's messages are. Compiled only where pride is built with CUDA
// (PRIDE_WITH_CUDA_TENSORS).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <cuda_runtime_api.h>

#include "collectives/engine/compressed/onebit_ops.h"

namespace pride::torch_plugin {

class CudaOnebitOps final : public OnebitOps {
 public:
  // Device pointers: x and worker_error of `numel` floats, server_error of this rank's owned elements.
  // `stream` must be current on the calling thread (c10::cuda::CUDAStreamGuard) while this object
  // lives, so that its buffers are allocated and freed in that stream's order.
  CudaOnebitOps(c10::Device device, cudaStream_t stream, int rank, float* x, float* worker_error, float* server_error,
                size_t numel);

  double add_worker_error() override;
  void compress_worker(float scale, patterns::Range elements, uint64_t* signs) override;
  double average_owner(const uint64_t* const* signs, const float* scales, int count, size_t n) override;
  void compress_owner(float scale, size_t n, uint64_t* signs) override;
  void expand(const uint64_t* signs, float scale, patterns::Range elements) override;
  void settle() override;

 private:
  // Σ x² of the last add_error_and_square_sum, brought to the host.
  double fetch_sum();
  float* device_floats(at::Tensor& buffer, size_t count);
  uint64_t* device_words(at::Tensor& buffer, size_t count);

  c10::Device device_;
  cudaStream_t stream_;
  int rank_;
  float* x_;
  float* worker_error_;
  float* server_error_;
  size_t numel_;
  at::Tensor sums_;          // device: kSquareSumBlocks partials, then the sum
  at::Tensor sum_host_;      // pinned: the sum
  at::Tensor plane_;         // device: the worker's signs, then the results' (words_for(numel))
  at::Tensor plane_host_;    // pinned: the worker's signs
  at::Tensor inbox_;         // device: the owner's sign vectors
  at::Tensor average_;       // device: the owner's z
  at::Tensor owner_signs_;   // device: the owner's result signs
  float worker_scale_ = 0;
  bool worker_signs_fetched_ = false;
};

}  // namespace pride::torch_plugin
