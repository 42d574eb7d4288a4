// pride.compressed_allreduce: the 1-bit error-feedback allreduce of 1-bit Adam and 0/1 Adam
// (collectives/engine/compressed/onebit_allreduce.h) on float32 tensors. CUDA tensors stay on their GPU:
// the compressions run there (cuda_onebit_ops.h) on pride's stream, ordered after the caller's
// (cuda_ordering.h), and only the packed signs cross to the host messages.
#include <ATen/ATen.h>

#include "collectives/engine/compressed/onebit_allreduce.h"
#include "torch_plugin/pride_backend.h"
#include "torch_plugin/tensor_types.h"
#ifdef PRIDE_WITH_CUDA_TENSORS
#include <c10/cuda/CUDAGuard.h>

#include "torch_plugin/cuda_onebit_ops.h"
#include "torch_plugin/cuda_ordering.h"
#endif

namespace pride::torch_plugin {
namespace {
constexpr const char* kName = "compressed_allreduce";
}  // namespace

c10::intrusive_ptr<c10d::Work> PrideBackend::compressed_allreduce(at::Tensor& tensor, at::Tensor& worker_error,
                                                                  at::Tensor& server_error) {
  const int rank = getRank(), size = getSize();
  for (const at::Tensor* t : {&tensor, &worker_error, &server_error}) {
    TORCH_CHECK_VALUE(t->defined(), "pride ", kName, " (rank ", rank, "): undefined tensor");
    TORCH_CHECK_TYPE(t->scalar_type() == at::kFloat, "pride ", kName, " (rank ", rank,
                     "): the tensor and its errors must be float32, got ", t->scalar_type());
    TORCH_CHECK_VALUE(t->device() == tensor.device(), "pride ", kName, " (rank ", rank,
                      "): the tensor and its errors must be on one device, got ", tensor.device(), " and ",
                      t->device());
  }
  TORCH_CHECK_VALUE(worker_error.is_contiguous() && server_error.is_contiguous(), "pride ", kName, " (rank ", rank,
                    "): the error tensors must be contiguous (they are updated in place)");
  const size_t numel = size_t(tensor.numel());
  TORCH_CHECK_VALUE(size_t(worker_error.numel()) == numel, "pride ", kName, " (rank ", rank, "): worker_error has ",
                    worker_error.numel(), " elements, the tensor ", numel);
  const size_t owned = onebit_owned_elements(numel, size, rank).size;
  TORCH_CHECK_VALUE(size_t(server_error.numel()) == owned, "pride ", kName, " (rank ", rank, " of ", size,
                    "): server_error has ", server_error.numel(), " elements; this rank owns ", owned, " of the ",
                    numel, " (pride.compressed_allreduce_server_numel)");
  if (tensor.is_cuda()) {
    TORCH_CHECK_VALUE(tensor.layout() == at::kStrided, "pride ", kName, " (rank ", rank,
                      "): expected a dense tensor, got layout ", tensor.layout());
    return compressed_allreduce_cuda(tensor, worker_error, server_error);
  }
  check_cpu_tensor(tensor, {kName, rank});
  return enqueue(c10d::OpType::ALLREDUCE, "pride:compressed_allreduce", {tensor, worker_error, server_error},
                 [tensor, worker_error, server_error, numel](Communicator& comm, PrideWork&) {
                   at::Tensor buf = tensor.is_contiguous() ? tensor : tensor.contiguous();
                   onebit_allreduce(comm, buf.data_ptr<float>(), worker_error.data_ptr<float>(),
                                    server_error.data_ptr<float>(), numel);
                   if (!buf.is_same(tensor)) const_cast<at::Tensor&>(tensor).copy_(buf);
                   return true;
                 });
}

#ifdef PRIDE_WITH_CUDA_TENSORS
c10::intrusive_ptr<c10d::Work> PrideBackend::compressed_allreduce_cuda(at::Tensor& tensor, at::Tensor& worker_error,
                                                                       at::Tensor& server_error) {
  std::shared_ptr<CudaOrdering> ordering = cuda_ordering(tensor.device());
  for (const at::Tensor* t : {&tensor, &worker_error, &server_error}) ordering->use_on_internal_stream(*t);
  Task task = [tensor, worker_error, server_error, ordering](Communicator& comm, PrideWork&) {
    ordering->enter();
    c10::cuda::CUDAGuard device_guard(tensor.device());
    c10::cuda::CUDAStreamGuard stream_guard(ordering->internal());  // allocations and copies on pride's stream
    at::Tensor x = tensor.is_contiguous() ? tensor : tensor.contiguous();
    const size_t numel = size_t(x.numel());
    CudaOnebitOps ops(tensor.device(), ordering->stream(), comm.rank(), x.data_ptr<float>(),
                      worker_error.data_ptr<float>(), server_error.data_ptr<float>(), numel);
    onebit_allreduce(comm, ops, numel);
    if (!x.is_same(tensor)) const_cast<at::Tensor&>(tensor).copy_(x, /*non_blocking=*/true);
    ordering->finish();
    return true;
  };
  return enqueue(c10d::OpType::ALLREDUCE, "pride:compressed_allreduce", {tensor, worker_error, server_error},
                 std::move(task), ordering);
}
#else
c10::intrusive_ptr<c10d::Work> PrideBackend::compressed_allreduce_cuda(at::Tensor& tensor, at::Tensor&, at::Tensor&) {
  TORCH_CHECK_VALUE(false, "pride ", kName, " (rank ", getRank(), "): got a tensor on ", tensor.device(),
                    ", but this build of pride has no CUDA support");
}
#endif

}  // namespace pride::torch_plugin

