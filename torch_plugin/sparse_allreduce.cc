// allreduce (SUM) of a sparse COO tensor, as Gloo offers it: every rank's coalesced indices and values
// are all-gathered (their counts first, with the tensor's description), concatenated in rank order, and
// coalesced, which sums the entries that share an index. Every rank coalesces the same concatenation, so
// every rank gets the same bits.
#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "backend/common/error.h"
#include "collectives/engine/standard/collectives.h"
#include "collectives/engine/standard/common.h"
#include "torch_plugin/pride_backend.h"
#include "torch_plugin/tensor_types.h"

namespace pride::torch_plugin {
namespace {

// What each rank sends before its entries: the count, and what the ranks' tensors must share. The
// fingerprint check sees only an allgather of this struct, so without the description ranks whose
// sizes differed summed entries out of one another's range into an invalid tensor.
struct SparseHeader {
  static constexpr size_t kSizes = 8;  // sizes beyond the 8th are compared through sizes_hash
  int64_t nnz = 0;
  int64_t sparse_dim = 0;
  int64_t dim = 0;
  int64_t dtype = 0;
  std::array<int64_t, kSizes> sizes{};
  uint64_t sizes_hash = 0;

  bool same_tensor(const SparseHeader& o) const {
    return sparse_dim == o.sparse_dim && dim == o.dim && dtype == o.dtype && sizes == o.sizes &&
           sizes_hash == o.sizes_hash;
  }
  std::string describe() const {
    const size_t shown = std::min<size_t>(size_t(dim), kSizes);
    return fmt::format("{} of sizes [{}{}] ({} sparse dims)", c10::toString(c10::ScalarType(dtype)),
                       fmt::join(sizes.begin(), sizes.begin() + shown, ", "), size_t(dim) > kSizes ? ", ..." : "",
                       sparse_dim);
  }
};

SparseHeader header_of(const at::Tensor& t) {
  SparseHeader h;
  h.nnz = t._nnz();
  h.sparse_dim = t.sparse_dim();
  h.dim = t.dim();
  h.dtype = int64_t(t.scalar_type());
  std::vector<size_t> sizes;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (size_t(d) < SparseHeader::kSizes) h.sizes[size_t(d)] = t.size(d);
    sizes.push_back(size_t(t.size(d)));
  }
  h.sizes_hash = standard::hash_sizes(sizes);
  return h;
}

}  // namespace

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
    const size_t n = size_t(comm.size());

    const SparseHeader mine = header_of(in);
    std::vector<SparseHeader> headers(n);
    pride::allgather(comm, &mine, sizeof mine, headers.data());
    std::vector<int64_t> counts(n);
    for (size_t r = 0; r < n; ++r) {
      // Every rank sees every header, so every rank raises here alike, and the group goes on.
      if (!headers[r].same_tensor(mine)) {
        throw MismatchError(fmt::format("pride rank {}/{}: allreduce of a sparse tensor: the ranks' tensors differ: "
                                        "this rank's is {}, peer {}'s {}",
                                        comm.rank(), comm.size(), mine.describe(), r, headers[r].describe()));
      }
      counts[r] = headers[r].nnz;
    }
    // Every rank's entries have the same dense shape (the tensors' sizes match, checked above).
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
