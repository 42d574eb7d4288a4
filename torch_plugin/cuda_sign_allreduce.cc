// Sign-allreduce of a CUDA tensor. Only the bits leave the GPU:
//   1. pack the votes on pride's stream (after the caller's stream, cuda_ordering.h);
//   2. exchange and count them, by one of two data paths (collectives/engine/sign/data_path.h):
//      - device memory: the direct algorithm on the device planes; the transport moves them between
//        GPUs itself (UCX cuda_ipc / cuda_copy) and the owner counts on its GPU (cuda_plane_ops.h);
//      - host staging: the packed planes (1/32 of float32) go to pinned host memory and the host
//        engine runs any algorithm on them with any transport, then the result planes come back;
//   3. unpack the result planes on the GPU, in place.
// Both paths send the same messages and give the same bits as a CPU tensor's sign-allreduce.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include "backend/common/settings.h"
#include "collectives/bits/cuda/kernels.h"
#include "collectives/engine/sign/data_path.h"
#include "torch_plugin/cuda_plane_ops.h"
#include "torch_plugin/cuda_ordering.h"
#include "torch_plugin/pride_backend.h"
#include "torch_plugin/tensor_types.h"

namespace pride::torch_plugin {
namespace {

void check_launch(cudaError_t status, const char* what) {
  TORCH_CHECK(status == cudaSuccess, "pride sign_allreduce: ", what, " failed: ", cudaGetErrorString(status));
}

at::Tensor pinned_words(size_t words) {
  return at::empty({int64_t(words)}, at::TensorOptions().dtype(at::kLong).device(at::kCPU).pinned_memory(true));
}

// Unpacks the result planes (device memory) into x.
void unpack_result(const SignPlan& plan, const uint64_t* planes, size_t nwords, size_t numel, void* x,
                   bits::DType dtype, cudaStream_t stream) {
  if (plan.mode == SignMode::kVote) {
    check_launch(bits::cuda::unpack_vote(planes, plan.has_tie_plane() ? planes + nwords : nullptr, numel, x, dtype,
                                         stream),
                 "unpack_vote");
  } else {
    check_launch(bits::cuda::unpack_mean(planes, plan.result_planes, numel, plan.mean_scale, plan.mean_offset,
                                         plan.nranks, x, dtype, stream),
                 "unpack_mean");
  }
}

}  // namespace

c10::intrusive_ptr<c10d::Work> PrideBackend::sign_allreduce_cuda(at::Tensor& tensor, SignOptions options) {
  TORCH_CHECK_VALUE(tensor.layout() == at::kStrided, "pride sign_allreduce: expected a dense tensor, got layout ",
                    tensor.layout());
  const bits::DType dtype = to_sign_dtype(tensor.scalar_type(), "sign_allreduce");
  std::shared_ptr<CudaOrdering> ordering = cuda_ordering(tensor.device());
  ordering->use_on_internal_stream(tensor);
  Task task = [tensor, dtype, options, ordering](Communicator& comm, PrideWork&) {
    ordering->enter();
    c10::cuda::CUDAGuard device_guard(tensor.device());
    c10::cuda::CUDAStreamGuard stream_guard(ordering->internal());  // allocations and copies on pride's stream
    const cudaStream_t stream = ordering->stream();
    const size_t numel = size_t(tensor.numel()), nwords = bits::words_for(numel);
    const SignPlan plan = SignPlan::make(comm.size(), options.mode, options.votes);
    SignOptions chosen = options;  // the algorithm decides the data path, so it is fixed here
    chosen.algorithm = choose_sign_algorithm(comm, plan, numel, options);
    const DataPath path = choose_data_path(Settings::get().cuda_path, comm.transport().carries(MemoryType::kCuda),
                                           chosen.algorithm, comm.rank());
    const size_t vote_words = size_t(plan.counters) * nwords, result_words = size_t(plan.result_planes) * nwords;
    at::Tensor x = tensor.is_contiguous() ? tensor : tensor.contiguous();
    const auto on_device = tensor.options().dtype(at::kLong);
    at::Tensor votes = at::empty({int64_t(vote_words)}, on_device), planes = at::empty({int64_t(result_words)}, on_device);
    auto* dvotes = reinterpret_cast<uint64_t*>(votes.data_ptr<int64_t>());
    auto* dplanes = reinterpret_cast<uint64_t*>(planes.data_ptr<int64_t>());
    if (numel > 0) {
      if (options.votes == VoteKind::kBinary) {
        check_launch(bits::cuda::pack_binary(x.data_ptr(), dtype, numel, dvotes, stream), "pack_binary");
      } else {
        check_launch(bits::cuda::pack_ternary(x.data_ptr(), dtype, numel, dvotes, dvotes + nwords, stream), "pack_ternary");
      }
    }
    if (path == DataPath::kDeviceMemory) {
      CudaPlaneOps ops(tensor.device(), stream, comm.rank());
      sign_allreduce_planes(comm, ops, dvotes, numel, chosen, uint32_t(dtype), numel > 0 ? dplanes : nullptr);
    } else {
      at::Tensor votes_host = pinned_words(vote_words), planes_host = pinned_words(result_words);
      auto* host_planes = reinterpret_cast<uint64_t*>(planes_host.data_ptr<int64_t>());
      if (numel > 0) {
        C10_CUDA_CHECK(cudaMemcpyAsync(votes_host.data_ptr(), dvotes, vote_words * 8, cudaMemcpyDeviceToHost, stream));
        C10_CUDA_CHECK(cudaStreamSynchronize(stream));
      }
      sign_allreduce_planes(comm, reinterpret_cast<const uint64_t*>(votes_host.data_ptr<int64_t>()), numel, chosen,
                            uint32_t(dtype), host_planes);
      if (numel > 0) {
        C10_CUDA_CHECK(cudaMemcpyAsync(dplanes, host_planes, result_words * 8, cudaMemcpyHostToDevice, stream));
        C10_CUDA_CHECK(cudaStreamSynchronize(stream));  // planes_host is released when this scope ends
      }
    }
    if (numel > 0) {
      unpack_result(plan, dplanes, nwords, numel, x.data_ptr(), dtype, stream);
      if (!x.is_same(tensor)) const_cast<at::Tensor&>(tensor).copy_(x, /*non_blocking=*/true);
    }
    ordering->finish();
    return true;
  };
  return enqueue(c10d::OpType::ALLREDUCE, "pride:sign_allreduce", {tensor}, std::move(task), ordering);
}

}  // namespace pride::torch_plugin
