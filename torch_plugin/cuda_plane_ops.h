// The direct algorithm's planes on one GPU (PlaneOps, collectives/engine/sign/plane_ops.h): buffers
// from torch's caching allocator on the device, the CUDA kernels queued on one stream, settle() waits
// for that stream. The transport moves the buffers itself (UCX cuda_ipc / cuda_copy), so only the
// packed bits of a tensor ever leave the GPU, and they go straight to the peer's GPU.
// Compiled only where pride is built with CUDA (PRIDE_WITH_CUDA_TENSORS).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <cuda_runtime_api.h>

#include <map>
#include <utility>

#include "collectives/engine/sign/plane_ops.h"

namespace pride::torch_plugin {

class CudaPlaneOps final : public PlaneOps {
 public:
  // `stream` must be current on the calling thread (c10::cuda::CUDAStreamGuard) while this object
  // allocates, so that its buffers are freed in that stream's order. `reads_follow_stream`: whoever
  // reads the result planes orders itself after `stream` (an event recorded there once the algorithm
  // returns), so finish_results() need not wait for the device.
  CudaPlaneOps(c10::Device device, cudaStream_t stream, int rank, bool reads_follow_stream = false)
      : device_(device), stream_(stream), rank_(rank), reads_follow_stream_(reads_follow_stream) {}

  MemoryType memory() const override { return MemoryType::kCuda; }
  uint64_t* scratch(SignScratch what, size_t words, uint32_t instance) override;
  void gather(const uint64_t* base, size_t stride, int planes, patterns::Range words, uint64_t* out) override;
  void scatter(const uint64_t* in, int planes, patterns::Range words, uint64_t* base, size_t stride) override;
  void count(const uint64_t* const* ballots, int nballots, size_t nwords, uint64_t* counter,
             int counter_planes) override;
  void finalize(const SignPlan& plan, const uint64_t* counts, int planes, size_t nwords, uint64_t* result,
                size_t result_stride) override;
  void encode_trits(const uint64_t* planes, size_t stride, size_t nwords, uint8_t* out) override;
  void decode_trits(const uint8_t* in, size_t nwords, uint64_t* planes, size_t stride) override;
  void encode_counts(const bits::counts::CountCode& code, const uint64_t* planes, size_t stride, size_t nwords,
                     uint32_t* out) override;
  void decode_counts(const bits::counts::CountCode& code, const uint32_t* in, size_t nwords, uint64_t* planes,
                     size_t stride) override;
  void settle() override;
  void finish_results() override;

 private:
  c10::Device device_;
  cudaStream_t stream_;
  int rank_;
  bool reads_follow_stream_;
  std::map<std::pair<uint32_t, uint32_t>, at::Tensor> buffers_;
};

// SignPlan::finalize on device planes, queued on `stream` (counts: `counters` counters of `planes`
// planes, counter-major; result plane p at result + p * result_stride, which for the mean of ternary
// votes must be nwords). With planes = 1 and N = 1 it turns one rank's own votes into its result.
void finalize_on_device(const SignPlan& plan, const uint64_t* counts, int planes, size_t nwords, uint64_t* result,
                        size_t result_stride, cudaStream_t stream);

}  // namespace pride::torch_plugin
