// Distributed Lion's step on CUDA parameters (the CPU step is distributed_lion.h; same layout, same
// bits). Per bucket of the flat index space:
//   1. local update + pack: one launch over every tensor piece of the bucket (tensor_slices.h) reads
//      g and m, writes m and the vote bits, on the caller's current stream;
//   2. vote, on the group's worker while the GPU packs the next bucket: the agreement (abstentions are
//      listed on the device; only their count comes back, and the list when there is one), then the
//      exchange and count of the packed bits by the transport and data path that apply (device_vote.h):
//      NCCL, device memory moved by UCX and counted on the GPU, or pinned host staging and the host
//      engine; with exact votes, a few abstentions are re-voted after a binary exchange (device_revote.h);
//   3. apply: one launch applies x ← x·(1 − lr·λ) − lr·Δ from the result planes on the device, after
//      an event the worker recorded where the planes are written (NCCL and device memory: neither
//      thread waits for the GPU there; on a GPU that processes share, each wait costs a time slice).
// A world of one (no group, or G-Lion's local step) has nothing to vote on but its own update: one
// launch over every tensor piece takes Lion's whole step (lion_local_slices: read g, m, x; write m, x),
// the same bits as the three stages with one rank. The workspace keeps the device and pinned buffers
// from step to step.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

#include "collectives/engine/sign/sign_allreduce.h"
#include "torch_plugin/distributed_lion.h"

namespace pride::torch_plugin {

class PrideBackend;

// Buffers one optimizer reuses across steps (one per device and dtype). Opaque to Python.
class CudaLionWorkspace {
 public:
  CudaLionWorkspace();
  ~CudaLionWorkspace();
  CudaLionWorkspace(const CudaLionWorkspace&) = delete;
  CudaLionWorkspace& operator=(const CudaLionWorkspace&) = delete;
  struct Buffers;
  Buffers& buffers() { return *buffers_; }
  // Device bytes held (votes, result planes, slice tables), for the memory benchmark.
  int64_t device_bytes() const;

 private:
  std::unique_ptr<Buffers> buffers_;
};

// As distributed_lion_step (undefined grads abstain, the layout digest, false when layouts differ, the
// exact votes' memory of abstentions, one per param group: may be null); the agreement
// (bucket_agreement.h) is decided from the packed planes on the device.
bool distributed_lion_step_cuda(PrideBackend* backend, CudaLionWorkspace& workspace,
                                const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                                const std::vector<at::Tensor>& momenta, const LionHyper& hyper, SignOptions options,
                                LionVotes votes, size_t bucket_elements, uint64_t layout_digest,
                                const CallSite& site, AbstentionMemory* memory = nullptr);

}  // namespace pride::torch_plugin
