// A CUDA stream that is pride's alone while its holder lives. torch's stream pool hands its 32 streams
// per device out in turn to every caller in the process, ProcessGroupNCCL included: after enough
// requests, a stream pride took from it could be another group's NCCL stream, and each group's work
// would wait for the other's (a deadlock across ranks that order the two groups differently).
//
// The streams are never destroyed, as torch's pool streams are not: the caching allocator records an
// event on a stream whenever a tensor recordStream'd onto it is freed, which can be long after the
// group that used it is gone. A holder gone, its stream goes back to pride's own free list for the
// next group on that device, once nothing is queued on it (a destroyed group's operation that never
// ended would hold the next group's work behind it).
// Compiled only where pride is built with CUDA (PRIDE_WITH_CUDA_TENSORS).
#pragma once

#include <c10/core/Device.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

namespace pride::torch_plugin {

class PrivateCudaStream {
 public:
  // A stream from the free list of `device` (one with nothing queued), or a new one.
  explicit PrivateCudaStream(c10::DeviceIndex device);
  // Back to the free list (or the list of those that still have work queued).
  ~PrivateCudaStream();
  PrivateCudaStream(const PrivateCudaStream&) = delete;
  PrivateCudaStream& operator=(const PrivateCudaStream&) = delete;

  // As torch's streams are handed around (guards, recordStream, the caching allocator).
  c10::cuda::CUDAStream get() const { return c10::cuda::getStreamFromExternal(stream_, device_); }

 private:
  c10::DeviceIndex device_;
  cudaStream_t stream_ = nullptr;
};

}  // namespace pride::torch_plugin
