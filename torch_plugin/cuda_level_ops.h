// The level vote's values on one GPU (LevelOps, collectives/engine/compressed/level_ops.h): the range
// check and the packing run on the GPU in one pass over the int8 values (bits::cuda::pack_levels), the
// unpacking too, on one stream; only the planes cross to and from the host messages. The host waits
// twice: for the range check, which the ranks must agree on before anything is sent, and for the
// results' copy out of pinned memory before that memory is released (release_host_memory); the
// plugin's end event on the stream (cuda_ordering.h) orders the caller's readers after the unpacking.
// Compiled only where pride is built with CUDA (PRIDE_WITH_CUDA_TENSORS).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <cuda_runtime_api.h>

#include "collectives/engine/compressed/level_ops.h"

namespace pride::torch_plugin {

class CudaLevelOps final : public LevelOps {
 public:
  // `q`: a device pointer to `numel` int8 values. `stream` must be current on the calling thread
  // (c10::cuda::CUDAStreamGuard) while this object lives, so that its buffers are allocated and freed in
  // that stream's order.
  CudaLevelOps(c10::Device device, cudaStream_t stream, int rank, int8_t* q, size_t numel)
      : device_(device), stream_(stream), rank_(rank), q_(q), numel_(numel) {}
  // Where an error cut the vote short, waits (best effort) for copies still using the pinned buffer.
  ~CudaLevelOps() override;
  CudaLevelOps(const CudaLevelOps&) = delete;
  CudaLevelOps& operator=(const CudaLevelOps&) = delete;

  bool within(int max_level) override;
  void pack(int max_level, patterns::Range elements, uint64_t* out) override;
  void unpack(const uint64_t* pos, const uint64_t* tie, patterns::Range elements) override;
  // Waits until the unpacking's copies out of this object's pinned buffer are done (the unpacking itself
  // is a few microseconds more): the buffer goes back to torch's pinned-memory cache with this object.
  void release_host_memory();

 private:
  c10::Device device_;
  cudaStream_t stream_;
  int rank_;
  int8_t* q_;
  size_t numel_;
  int packed_level_ = 0;    // the max_level of the planes in planes_host_ (0: none yet)
  at::Tensor planes_;       // device: the whole tensor's planes and the out-of-range word after them
  at::Tensor planes_host_;  // pinned: the same, copied back; then the result planes on their way out
  at::Tensor results_;      // device: the result planes of the chunks unpacked so far
  bool copies_pending_ = false;  // copies to or from planes_host_ queued and not yet waited for
};

}  // namespace pride::torch_plugin
