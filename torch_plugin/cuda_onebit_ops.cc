#include "torch_plugin/cuda_onebit_ops.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "collectives/bits/cuda/kernels.h"
#include "collectives/bits/kernels.h"
#include "collectives/bits/onebit.h"
#include "torch_plugin/word_buffers.h"

namespace pride::torch_plugin {
namespace {

void check_launch(cudaError_t status, int rank, const char* what) {
  TORCH_CHECK(status == cudaSuccess, "pride compressed_allreduce (rank ", rank, ") on device memory: ", what,
              " failed: ", cudaGetErrorString(status));
}


}  // namespace

CudaOnebitOps::CudaOnebitOps(c10::Device device, cudaStream_t stream, int rank, float* x, float* worker_error,
                             float* server_error, size_t numel)
    : device_(device), stream_(stream), rank_(rank), x_(x), worker_error_(worker_error),
      server_error_(server_error), numel_(numel) {
  sums_ = at::empty({bits::cuda::kSquareSumBlocks + 1}, at::TensorOptions().dtype(at::kDouble).device(device_));
  sum_host_ = at::empty({1}, at::TensorOptions().dtype(at::kDouble).device(at::kCPU).pinned_memory(true));
}

float* CudaOnebitOps::device_floats(at::Tensor& buffer, size_t count) {
  if (!buffer.defined() || size_t(buffer.numel()) < count) {
    buffer = at::empty({int64_t(std::max<size_t>(count, 1))}, at::TensorOptions().dtype(at::kFloat).device(device_));
  }
  return buffer.data_ptr<float>();
}

uint64_t* CudaOnebitOps::device_words(at::Tensor& buffer, size_t count) {
  ensure_words(buffer, count, word_options(device_));
  return words_of(buffer);
}

double CudaOnebitOps::fetch_sum() {
  double* sums = sums_.data_ptr<double>();
  C10_CUDA_CHECK(cudaMemcpyAsync(sum_host_.data_ptr<double>(), sums + bits::cuda::kSquareSumBlocks, sizeof(double),
                                 cudaMemcpyDeviceToHost, stream_));
  C10_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return *sum_host_.data_ptr<double>();
}

double CudaOnebitOps::add_worker_error() {
  double* sums = sums_.data_ptr<double>();
  check_launch(bits::cuda::add_error_and_square_sum(x_, worker_error_, numel_, sums,
                                                    sums + bits::cuda::kSquareSumBlocks, stream_),
               rank_, "add_error_and_square_sum");
  worker_signs_fetched_ = false;
  return fetch_sum();
}

void CudaOnebitOps::compress_worker(float scale, patterns::Range elements, uint64_t* signs) {
  // The whole tensor at the first chunk (one launch, one copy of its signs to the host); every chunk's
  // words are then copied out of the host copy.
  const size_t nwords = bits::words_for(numel_);
  if (!worker_signs_fetched_) {
    uint64_t* plane = device_words(plane_, nwords);
    check_launch(bits::cuda::compress_signs(x_, scale, numel_, plane, worker_error_, stream_), rank_,
                 "compress_signs");
    ensure_words(plane_host_, nwords, word_options(at::kCPU, /*pinned=*/true));
    C10_CUDA_CHECK(cudaMemcpyAsync(words_of(plane_host_), plane, nwords * 8, cudaMemcpyDeviceToHost, stream_));
    C10_CUDA_CHECK(cudaStreamSynchronize(stream_));
    worker_scale_ = scale;
    worker_signs_fetched_ = true;
  }
  const uint64_t* host = words_of(plane_host_);
  std::memcpy(signs, host + elements.begin / 64, bits::words_for(elements.size) * 8);
}

double CudaOnebitOps::average_owner(const uint64_t* const* signs, const float* scales, int count, size_t n) {
  const size_t words = bits::words_for(n);
  float* z = device_floats(average_, n);
  if (count > bits::cuda::kMaxCountPlanes) {
    // More sign vectors than a launch carries: the average on the CPU (its bits are the same), then z
    // to the GPU for the server error.
    at::Tensor host = at::empty({int64_t(std::max<size_t>(n, 1))},
                                at::TensorOptions().dtype(at::kFloat).device(at::kCPU).pinned_memory(true));
    bits::average_signs(signs, scales, count, n, host.data_ptr<float>());
    if (n > 0) {
      C10_CUDA_CHECK(cudaMemcpyAsync(z, host.data_ptr<float>(), n * 4, cudaMemcpyHostToDevice, stream_));
    }
    double* sums = sums_.data_ptr<double>();
    check_launch(bits::cuda::add_error_and_square_sum(z, server_error_, n, sums, sums + bits::cuda::kSquareSumBlocks,
                                                      stream_),
                 rank_, "add_error_and_square_sum");
    return fetch_sum();  // also waits for the copy out of `host`
  }
  uint64_t* inbox = device_words(inbox_, size_t(count) * std::max<size_t>(words, 1));
  std::vector<const uint64_t*> on_device(size_t(count), nullptr);
  for (int i = 0; i < count; ++i) {
    on_device[size_t(i)] = inbox + size_t(i) * words;
    if (words > 0) {
      C10_CUDA_CHECK(cudaMemcpyAsync(inbox + size_t(i) * words, signs[i], words * 8, cudaMemcpyHostToDevice, stream_));
    }
  }
  check_launch(bits::cuda::average_signs(on_device.data(), scales, count, n, z, stream_), rank_, "average_signs");
  double* sums = sums_.data_ptr<double>();
  check_launch(bits::cuda::add_error_and_square_sum(z, server_error_, n, sums, sums + bits::cuda::kSquareSumBlocks,
                                                    stream_),
               rank_, "add_error_and_square_sum");
  return fetch_sum();  // also waits for the copies out of the caller's host messages
}

void CudaOnebitOps::compress_owner(float scale, size_t n, uint64_t* signs) {
  const size_t words = bits::words_for(n);
  uint64_t* result = device_words(owner_signs_, words);
  check_launch(bits::cuda::compress_signs(device_floats(average_, n), scale, n, result, server_error_, stream_), rank_,
               "compress_signs");
  if (words > 0) C10_CUDA_CHECK(cudaMemcpyAsync(signs, result, words * 8, cudaMemcpyDeviceToHost, stream_));
  C10_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaOnebitOps::expand(const uint64_t* signs, float scale, patterns::Range elements) {
  if (elements.size == 0) return;
  // The chunk's words into their place in the device plane (the worker's signs are spent by now), then
  // the chunk's elements of x. Copies from pageable host memory return once the data is staged.
  uint64_t* plane = device_words(plane_, bits::words_for(numel_)) + elements.begin / 64;
  C10_CUDA_CHECK(cudaMemcpyAsync(plane, signs, bits::words_for(elements.size) * 8, cudaMemcpyHostToDevice, stream_));
  check_launch(bits::cuda::expand_signs(plane, scale, elements.size, x_ + elements.begin, stream_), rank_,
               "expand_signs");
}

void CudaOnebitOps::settle() { C10_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

}  // namespace pride::torch_plugin
