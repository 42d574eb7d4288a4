// allreduce (SUM) of a sparse COO tensor, as Gloo offers it: every rank's coalesced indices and values
// are all-gathered (their counts first), concatenated in rank order, and coalesced, which sums the
// entries that share an index. Every rank coalesces the same concatenation, so every rank gets the
// same bits.
#include <ATen/ATen.h>

#include <vector>

#include "collectives/engine/standard/collectives.h"
#include "torch_plugin/pride_backend.h"
#include "torch_plugin/tensor_types.h"

namespace pride::torch_plugin {

c10::intrusive_ptr<c10d::Work> PrideBackend::allreduce_sparse(at::Tensor t, const c10d::AllreduceOptions& opts) {
  TORCH_CHECK_VALUE(t.device().is_cpu(), "pride allreduce (rank ", getRank(),
                    "): sparse tensors must be on the CPU, got one on ", t.device());
  TORCH_CHECK_VALUE(opts.reduceOp == c10d::ReduceOp::SUM, "pride allreduce (rank ", getRank(),
                    "): sparse tensors support ReduceOp.SUM only");
  to_scalar_type(t.scalar_type(), {"allreduce", getRank()});  // a dtype pride can move
  return enqueue(c10d::OpType::ALLREDUCE, "pride:allreduce_sparse", {t}, [t](Communicator& comm, PrideWork&) mutable {
    const at::Tensor in = t.coalesce();
    const at::Tensor indices = in._indices().t().contiguous();  // nnz × sparse_dim: one row per entry
    const at::Tensor values = in._values().contiguous();        // nnz × dense dims
    const int64_t nnz = in._nnz();
    const size_t n = size_t(comm.size());

    std::vector<int64_t> counts(n);
    pride::allgather(comm, &nnz, sizeof nnz, counts.data());
    // Every rank's entries have the same dense shape (the tensors' sizes match).
    int64_t dense = 1;
    for (int64_t d = in.sparse_dim(); d < in.dim(); ++d) dense *= in.size(d);
    std::vector<size_t> index_bytes(n), value_bytes(n);
    int64_t total = 0;
    for (size_t r = 0; r < n; ++r) {
      index_bytes[r] = size_t(counts[r]) * size_t(in.sparse_dim()) * sizeof(int64_t);
      value_bytes[r] = size_t(counts[r] * dense) * values.element_size();
      total += counts[r];
    }
    std::vector<int64_t> value_shape{total};
    for (int64_t d = in.sparse_dim(); d < in.dim(); ++d) value_shape.push_back(in.size(d));
    at::Tensor all_indices = at::empty({total, in.sparse_dim()}, indices.options());
    at::Tensor all_values = at::empty(value_shape, values.options());
    pride::allgatherv(comm, indices.data_ptr(), index_bytes, all_indices.data_ptr());
    pride::allgatherv(comm, values.data_ptr(), value_bytes, all_values.data_ptr());
    const at::Tensor sum = at::sparse_coo_tensor(all_indices.t(), all_values, in.sizes()).coalesce();
    t.copy_(sum);
    return true;
  });
}

}  // namespace pride::torch_plugin
