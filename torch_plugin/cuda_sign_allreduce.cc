// Sign-allreduce of a CUDA tensor. Only the bits leave the GPU:
//   1. pack the votes on pride's stream (after the caller's stream, cuda_ordering.h);
//   2. exchange and count them over NCCL, or over UCX from device memory or through pinned host memory
//      (device_vote.h);
//   3. unpack the result planes on the GPU, in place.
// Every path gives the same bits as a CPU tensor's sign-allreduce.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include "backend/common/settings.h"
#include "collectives/bits/cuda/kernels.h"
#include "torch_plugin/cuda_ordering.h"
#include "torch_plugin/device_vote.h"
#include "torch_plugin/pride_backend.h"
#include "torch_plugin/tensor_types.h"
#include "torch_plugin/word_buffers.h"

namespace pride::torch_plugin {
namespace {

void check_launch(cudaError_t status, const char* what) {
  TORCH_CHECK(status == cudaSuccess, "pride sign_allreduce: ", what, " failed: ", cudaGetErrorString(status));
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
  TORCH_CHECK_VALUE(tensor.layout() == at::kStrided, "pride sign_allreduce (rank ", getRank(),
                    "): expected a dense tensor, got layout ", tensor.layout());
  const bits::DType dtype = to_sign_dtype(tensor.scalar_type(), {"sign_allreduce", getRank()});
  std::shared_ptr<CudaOrdering> ordering = cuda_ordering(tensor.device());
  ordering->use_on_internal_stream(tensor);
  gpu_transport(tensor.device());  // decided here, on the caller's thread, the first time
  NcclGroup* nccl = this->nccl();
  Task task = [tensor, dtype, options, ordering, nccl](Communicator& comm, PrideWork&) {
    ordering->enter();
    c10::cuda::CUDAGuard device_guard(tensor.device());
    c10::cuda::CUDAStreamGuard stream_guard(ordering->internal());  // allocations and copies on pride's stream
    const cudaStream_t stream = ordering->stream();
    const size_t numel = size_t(tensor.numel()), nwords = bits::words_for(numel);
    const SignPlan plan = SignPlan::make(comm.size(), options.mode, options.votes);
    at::Tensor x = tensor.is_contiguous() ? tensor : tensor.contiguous();
    const auto on_device = tensor.options().dtype(at::kLong);
    at::Tensor votes = empty_words(size_t(plan.counters) * nwords, on_device);
    at::Tensor planes = empty_words(size_t(plan.result_planes) * nwords, on_device);
    uint64_t* dvotes = words_of(votes);
    uint64_t* dplanes = words_of(planes);
    if (numel > 0) {
      if (options.votes == VoteKind::kBinary) {
        check_launch(bits::cuda::pack_binary(x.data_ptr(), dtype, numel, dvotes, stream), "pack_binary");
      } else {
        check_launch(bits::cuda::pack_ternary(x.data_ptr(), dtype, numel, dvotes, dvotes + nwords, stream), "pack_ternary");
      }
    }
    vote_on_device(comm, nccl, numel, options, uint32_t(dtype), DeviceVote{tensor.device(), stream, dvotes, dplanes});
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
