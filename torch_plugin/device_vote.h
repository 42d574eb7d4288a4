// The exchange and count of packed votes that live on a GPU, by the transport and data path the
// group's CUDA tensors take (gpu_transport_choice.h, data_path.h):
//   - NCCL: nccl_sign_allreduce.h, GPU to GPU;
//   - UCX from device memory: the direct algorithm on the device planes (cuda_plane_ops.h);
//   - UCX through pinned host memory: the planes go to host twins, the host engine runs any algorithm.
// sign_allreduce on CUDA tensors and DistributedLion's vote both come through here.
// Compiled only where pride is built with CUDA (PRIDE_WITH_CUDA_TENSORS).
#pragma once

#include <c10/core/Device.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "collectives/engine/sign/data_path.h"
#include "collectives/engine/sign/sign_allreduce.h"

namespace pride::torch_plugin {

class NcclGroup;

struct DeviceVote {
  c10::Device device;
  cudaStream_t stream;         // current on the calling thread (CUDAStreamGuard), after the packing
  const uint64_t* votes;       // device: plan.counters planes of words_for(numel) words
  uint64_t* planes;            // device: plan.result_planes planes, written
  uint64_t* votes_host = nullptr;   // pinned twins for host staging; null: allocated when needed
  uint64_t* planes_host = nullptr;
  // Null: vote_on_device returns once the result planes are written. Else it may return before the
  // device has written them and records this event on `stream` where they are: the reader's stream
  // waits on it, and neither host thread waits for the GPU (on a GPU that several processes share,
  // each such wait lasts until this process's next time slice). With host staging the copy from the
  // caller's planes_host may then still be running: the caller keeps that buffer until the event.
  cudaEvent_t written = nullptr;
};

// `nccl`: the group's NCCL side when NCCL carries its CUDA tensors, else null. `options.algorithm` as
// the caller asked (kAuto: chosen here). Returns once the result planes are written (any stream may
// read them), or with where.written recorded after the work that writes them.
SignPlan vote_on_device(Communicator& comm, NcclGroup* nccl, size_t numel, SignOptions options, uint32_t dtype_code,
                        const DeviceVote& where);

// The data path a UCX exchange of `numel` votes with these options takes on this rank (vote_on_device
// decides the same way); `options.algorithm` is set to the algorithm it runs. Other ranks may differ.
DataPath ucx_data_path(Communicator& comm, size_t numel, SignOptions& options);

}  // namespace pride::torch_plugin
