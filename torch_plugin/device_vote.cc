#include "torch_plugin/device_vote.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>

#include "backend/common/settings.h"
#include "collectives/engine/sign/data_path.h"
#include "torch_plugin/cuda_plane_ops.h"
#include "torch_plugin/word_buffers.h"
#ifdef PRIDE_WITH_NCCL_TRANSPORT
#include "torch_plugin/nccl_sign_allreduce.h"
#endif

namespace pride::torch_plugin {
namespace {

// The work queued on where.stream writes the result planes: mark where that ends, or wait for it.
void planes_written(const DeviceVote& where) {
  if (where.written != nullptr) {
    C10_CUDA_CHECK(cudaEventRecord(where.written, where.stream));
  } else {
    C10_CUDA_CHECK(cudaStreamSynchronize(where.stream));
  }
}

}  // namespace

DataPath ucx_data_path(Communicator& comm, size_t numel, SignOptions& options) {
  const SignPlan plan = SignPlan::make(comm.size(), options.mode, options.votes);
  options.algorithm = choose_sign_algorithm(comm, plan, numel, options);  // it decides the data path
  return choose_data_path(Settings::get().cuda_path, comm.transport().carries(MemoryType::kCuda), options.algorithm,
                          comm.rank());
}

SignPlan vote_on_device(Communicator& comm, NcclGroup* nccl, size_t numel, SignOptions options, uint32_t dtype_code,
                        const DeviceVote& where) {
#ifdef PRIDE_WITH_NCCL_TRANSPORT
  if (nccl != nullptr) {
    const SignPlan plan = nccl_sign_allreduce(comm, *nccl, where.device, where.stream, where.votes, numel, options,
                                              dtype_code, where.planes);
    // Its last kernels (count, threshold, scatter) are queued on where.stream; the caller may read the
    // planes on another stream (DistributedLion applies on the caller's), as after the other paths.
    planes_written(where);
    return plan;
  }
#else
  (void)nccl;
#endif
  const SignPlan plan = SignPlan::make(comm.size(), options.mode, options.votes);
  const DataPath path = ucx_data_path(comm, numel, options);
  if (path == DataPath::kDeviceMemory) {
    CudaPlaneOps ops(where.device, where.stream, comm.rank(), /*reads_follow_stream=*/where.written != nullptr);
    const SignPlan result =
        sign_allreduce_planes(comm, ops, where.votes, numel, options, dtype_code, numel > 0 ? where.planes : nullptr)
            .plan;
    planes_written(where);
    return result;
  }
  const size_t nwords = bits::words_for(numel);
  const size_t vote_words = size_t(plan.counters) * nwords, result_words = size_t(plan.result_planes) * nwords;
  at::Tensor votes_twin, planes_twin;  // released when this returns: every copy of them is waited for
  uint64_t* votes_host = where.votes_host;
  uint64_t* planes_host = where.planes_host;
  const auto pinned = word_options(at::kCPU, /*pinned=*/true);
  if (votes_host == nullptr) {
    votes_twin = empty_words(vote_words, pinned);
    votes_host = words_of(votes_twin);
  }
  if (planes_host == nullptr) {
    planes_twin = empty_words(result_words, pinned);
    planes_host = words_of(planes_twin);
  }
  if (numel > 0) {
    C10_CUDA_CHECK(cudaMemcpyAsync(votes_host, where.votes, vote_words * 8, cudaMemcpyDeviceToHost, where.stream));
    C10_CUDA_CHECK(cudaStreamSynchronize(where.stream));
  }
  const SignPlan result = sign_allreduce_planes(comm, votes_host, numel, options, dtype_code, planes_host).plan;
  if (numel > 0) {
    C10_CUDA_CHECK(cudaMemcpyAsync(where.planes, planes_host, result_words * 8, cudaMemcpyHostToDevice, where.stream));
  }
  // A twin of ours goes when this returns, so its copy must be done; the caller's own pinned buffer
  // outlives the copy, and with `written` the caller orders its next use after the event.
  if (planes_twin.defined()) C10_CUDA_CHECK(cudaStreamSynchronize(where.stream));
  planes_written(where);
  return result;
}

}  // namespace pride::torch_plugin
