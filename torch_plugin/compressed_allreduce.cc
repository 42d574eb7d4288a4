// pride.compressed_allreduce: the 1-bit error-feedback allreduce of 1-bit Adam and 0/1 Adam
// (collectives/engine/compressed/onebit_allreduce.h) on float32 tensors. CUDA tensors are staged
// through pinned host twins (host_staging.h): the three tensors go to the host, the collective runs,
// and all three (result and both errors) come back on pride's stream.
#include <ATen/ATen.h>

#include "collectives/engine/compressed/onebit_allreduce.h"
#include "torch_plugin/host_staging.h"
#include "torch_plugin/pride_backend.h"
#include "torch_plugin/tensor_types.h"

namespace pride::torch_plugin {

c10::intrusive_ptr<c10d::Work> PrideBackend::compressed_allreduce(at::Tensor& tensor, at::Tensor& worker_error,
                                                                  at::Tensor& server_error) {
  constexpr const char* kName = "compressed_allreduce";
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
  StagingScope staging(*this, tensor_refs(tensor, worker_error, server_error), kName);
  check_cpu_tensor(tensor, kName);
  return enqueue(c10d::OpType::ALLREDUCE, "pride:compressed_allreduce", {tensor, worker_error, server_error},
                 [tensor, worker_error, server_error, numel](Communicator& comm, PrideWork&) {
                   at::Tensor buf = tensor.is_contiguous() ? tensor : tensor.contiguous();
                   onebit_allreduce(comm, buf.data_ptr<float>(), worker_error.data_ptr<float>(),
                                    server_error.data_ptr<float>(), numel);
                   if (!buf.is_same(tensor)) const_cast<at::Tensor&>(tensor).copy_(buf);
                   return true;
                 });
}

}  // namespace pride::torch_plugin
