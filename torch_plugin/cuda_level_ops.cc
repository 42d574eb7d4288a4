#include "torch_plugin/cuda_level_ops.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>

#include <algorithm>
#include <cstring>

#include "collectives/bits/cuda/kernels.h"
#include "collectives/bits/kernels.h"
#include "collectives/bits/levels.h"
#include "collectives/engine/sign/plane_copy.h"
#include "torch_plugin/word_buffers.h"

namespace pride::torch_plugin {
namespace {

void check_launch(cudaError_t status, int rank, const char* what) {
  TORCH_CHECK(status == cudaSuccess, "pride level_vote (rank ", rank, ") on device memory: ", what,
              " failed: ", cudaGetErrorString(status));
}


}  // namespace

CudaLevelOps::~CudaLevelOps() {
  // Only after an error (the one being reported; this wait's own is dropped): torch's pinned-memory
  // cache knows nothing of our raw copies and could hand the buffer out while one still runs.
  if (copies_pending_) (void)cudaStreamSynchronize(stream_);
}

bool CudaLevelOps::within(int max_level) {
  // The whole tensor in one launch and one copy (its planes, then the flag word); pack() then copies
  // each chunk's words out of the host copy.
  const size_t W = bits::words_for(numel_), planes = size_t(bits::level_planes(max_level));
  planes_ = empty_words(planes * W + 1, word_options(device_));
  planes_host_ = empty_words(planes * W + 1, word_options(at::kCPU, /*pinned=*/true));
  uint64_t* on_device = words_of(planes_);
  auto* flag = reinterpret_cast<uint32_t*>(on_device + planes * W);
  check_launch(bits::cuda::pack_levels(q_, numel_, max_level, on_device, flag, stream_), rank_, "pack_levels");
  copies_pending_ = true;
  C10_CUDA_CHECK(cudaMemcpyAsync(words_of(planes_host_), on_device, (planes * W + 1) * 8, cudaMemcpyDeviceToHost,
                                 stream_));
  C10_CUDA_CHECK(cudaStreamSynchronize(stream_));
  copies_pending_ = false;
  packed_level_ = max_level;
  uint32_t outside = 0;
  std::memcpy(&outside, words_of(planes_host_) + planes * W, sizeof outside);
  return outside == 0;
}

void CudaLevelOps::pack(int max_level, patterns::Range elements, uint64_t* out) {
  TORCH_CHECK(max_level == packed_level_, "pride level_vote (rank ", rank_, "): packing with max_level ", max_level,
              " but the values were checked and packed with ", packed_level_);
  const patterns::Range words{elements.begin / 64, bits::words_for(elements.size)};
  gather_planes(words_of(planes_host_), bits::words_for(numel_), bits::level_planes(max_level), words, out);
}

void CudaLevelOps::unpack(const uint64_t* pos, const uint64_t* tie, patterns::Range elements) {
  if (elements.size == 0) return;
  // The chunk's two planes into their own place in the pinned buffer (its levels were all sent by now,
  // and it holds at least 2W words) and in a device buffer of the whole tensor's results (the kernels of
  // earlier chunks may still read theirs), then its values. The caller's buffers are free once this
  // returns, whatever memory they are (a copy from memory UCX has pinned would be asynchronous).
  const size_t W = bits::words_for(numel_), first = elements.begin / 64, words = bits::words_for(elements.size);
  if (!results_.defined()) results_ = empty_words(2 * W, word_options(device_));
  uint64_t* staged = words_of(planes_host_) + 2 * first;
  std::memcpy(staged, pos, words * 8);
  std::memcpy(staged + words, tie, words * 8);
  uint64_t* on_device = words_of(results_) + 2 * first;
  copies_pending_ = true;
  C10_CUDA_CHECK(cudaMemcpyAsync(on_device, staged, 2 * words * 8, cudaMemcpyHostToDevice, stream_));
  check_launch(bits::cuda::unpack_vote(on_device, on_device + words, elements.size, q_ + elements.begin,
                                       bits::DType::kInt8, stream_),
               rank_, "unpack_vote");
}

void CudaLevelOps::release_host_memory() {
  if (!copies_pending_) return;
  C10_CUDA_CHECK(cudaStreamSynchronize(stream_));
  copies_pending_ = false;
}

}  // namespace pride::torch_plugin
