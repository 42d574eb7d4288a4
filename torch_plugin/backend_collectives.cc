// PrideBackend's standard collectives: argument checks in torch's terms on the caller's thread, then
// the engine's collective on the worker. CUDA tensors go over NCCL where the group's CUDA tensors take
// it and NCCL takes the call (nccl_collectives.cc); otherwise they are staged through pinned host twins
// (host_staging.h). Non-contiguous tensors are staged through contiguous copies; the *_coalesced calls
// that delegate to another collective leave that to it.
#include <c10/util/Exception.h>

#include <algorithm>
#include <numeric>

#include "torch_plugin/coalesced_work.h"
#include "torch_plugin/host_staging.h"
#include "torch_plugin/pride_backend.h"
#include "torch_plugin/tensor_types.h"

namespace pride::torch_plugin {
namespace {

using c10::intrusive_ptr;
using c10d::Work;

// A contiguous view of `t` to hand to the engine, written back to `t` by commit() when it is a copy.
struct Staged {
  at::Tensor target;
  at::Tensor buffer;
  explicit Staged(const at::Tensor& t) : target(t), buffer(t.is_contiguous() ? t : t.contiguous()) {}
  void* data() const { return buffer.data_ptr(); }
  void commit() const {
    if (!buffer.is_same(target)) const_cast<at::Tensor&>(target).copy_(buffer);
  }
};

// Concatenates tensors (any shapes, one dtype) into one flat contiguous buffer.
at::Tensor flatten(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> flat;
  flat.reserve(tensors.size());
  for (const auto& t : tensors) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

// Copies consecutive pieces of `flat` back into `tensors`.
void unflatten_into(const at::Tensor& flat, std::vector<at::Tensor>& tensors) {
  int64_t offset = 0;
  for (auto& t : tensors) {
    t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

// One tensor per rank (`pieces`, with `mine`'s dtype). Of one size, the usual case, they are checked as
// such. Of different sizes (torch's all_gather_v and reduce_scatter_v, which ProcessGroupNCCL takes),
// piece r belongs to rank r, so `mine` must have the size of this rank's piece; the engine checks that
// the ranks agree on every size (their digest is in its call description). Returns whether the pieces
// have one size.
bool check_pieces(const at::Tensor& mine, const std::vector<at::Tensor>& pieces, int rank, const char* collective,
                  const char* piece, const char* mine_name) {
  // One size is the pieces' own (as ProcessGroupNCCL decides): pieces of one size and a `mine` of another
  // get the one-size error, not the per-rank one.
  const bool even = std::all_of(pieces.begin(), pieces.end(),
                                [&](const at::Tensor& p) { return p.numel() == pieces.front().numel(); });
  if (even) {
    check_same_type_and_size(mine, pieces, {collective, rank}, piece);
    return true;
  }
  for (const auto& p : pieces) {
    check_cpu_tensor(p, {collective, rank});
    TORCH_CHECK_TYPE(p.scalar_type() == mine.scalar_type(), "pride ", collective, " (rank ", rank, "): ", piece,
                     " tensors must have dtype ", mine.scalar_type(), ", got ", p.scalar_type());
  }
  TORCH_CHECK_VALUE(pieces[size_t(rank)].numel() == mine.numel(), "pride ", collective, " (rank ", rank, "): ", piece,
                    "s of different sizes need this rank's ", mine_name, " to have the size of ", piece, " ", rank, ", ",
                    pieces[size_t(rank)].numel(), " elements; it has ", mine.numel());
  return false;
}

}  // namespace

intrusive_ptr<Work> PrideBackend::allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  if (tensors.size() == 1) {
    if (auto w = nccl_allreduce(tensors, opts.reduceOp, c10d::OpType::ALLREDUCE, "pride:allreduce")) return w;
  }
  if (tensors.size() == 1 && tensors[0].defined() && tensors[0].is_sparse()) return allreduce_sparse(tensors[0], opts);
  StagingScope staging(*this, tensor_refs(tensors), "allreduce");
  check_single_tensor(tensors, {"allreduce", getRank()});
  at::Tensor t = tensors[0];
  const ScalarType type = to_scalar_type(t.scalar_type(), {"allreduce", getRank()});
  const ReduceOp op = to_reduce_op(opts.reduceOp, type, {"allreduce", getRank()});
  return enqueue(c10d::OpType::ALLREDUCE, "pride:allreduce", tensors, [t, type, op](Communicator& comm, PrideWork&) {
    Staged s(t);
    pride::allreduce(comm, s.data(), size_t(t.numel()), type, op);
    s.commit();
    return true;
  });
}

intrusive_ptr<Work> PrideBackend::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                      const c10d::AllreduceCoalescedOptions& opts) {
  if (auto w = nccl_allreduce(tensors, opts.reduceOp, c10d::OpType::ALLREDUCE_COALESCED, "pride:allreduce_coalesced")) {
    return w;
  }
  StagingScope staging(*this, tensor_refs(tensors), "allreduce_coalesced");
  TORCH_CHECK_VALUE(!tensors.empty(), "pride allreduce_coalesced (rank ", getRank(), "): no tensors");
  check_cpu_tensor(tensors[0], {"allreduce_coalesced", getRank()});
  for (const auto& t : tensors) {
    check_cpu_tensor(t, {"allreduce_coalesced", getRank()});
    TORCH_CHECK_TYPE(t.scalar_type() == tensors[0].scalar_type(),
                     "pride allreduce_coalesced (rank ", getRank(), "): tensors must share one dtype, got ",
                     tensors[0].scalar_type(), " and ", t.scalar_type());
  }
  const ScalarType type = to_scalar_type(tensors[0].scalar_type(), {"allreduce_coalesced", getRank()});
  const ReduceOp op = to_reduce_op(opts.reduceOp, type, {"allreduce_coalesced", getRank()});
  return enqueue(c10d::OpType::ALLREDUCE_COALESCED, "pride:allreduce_coalesced", tensors,
                 [tensors, type, op](Communicator& comm, PrideWork&) mutable {
                   at::Tensor flat = flatten(tensors);  // one collective for the whole bucket
                   pride::allreduce(comm, flat.data_ptr(), size_t(flat.numel()), type, op);
                   unflatten_into(flat, tensors);
                   return true;
                 });
}

intrusive_ptr<Work> PrideBackend::broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  if (tensors.size() == 1) {
    if (auto w = nccl_broadcast(tensors[0], int(opts.rootRank))) return w;
  }
  StagingScope staging(*this, tensor_refs(tensors), "broadcast");
  check_single_tensor(tensors, {"broadcast", getRank()});
  check_root(int(opts.rootRank), getSize(), {"broadcast", getRank()});
  check_movable_dtype(tensors[0].scalar_type(), {"broadcast", getRank()});
  at::Tensor t = tensors[0];
  const int root = int(opts.rootRank);
  return enqueue(c10d::OpType::BROADCAST, "pride:broadcast", tensors, [t, root](Communicator& comm, PrideWork&) {
    Staged s(t);
    pride::broadcast(comm, s.data(), nbytes(t), root);
    s.commit();
    return true;
  });
}

intrusive_ptr<Work> PrideBackend::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  if (tensors.size() == 1) {
    if (auto w = nccl_reduce(tensors[0], opts.reduceOp, int(opts.rootRank))) return w;
  }
  StagingScope staging(*this, tensor_refs(tensors), "reduce");
  check_single_tensor(tensors, {"reduce", getRank()});
  check_root(int(opts.rootRank), getSize(), {"reduce", getRank()});
  at::Tensor t = tensors[0];
  const ScalarType type = to_scalar_type(t.scalar_type(), {"reduce", getRank()});
  const ReduceOp op = to_reduce_op(opts.reduceOp, type, {"reduce", getRank()});
  const int root = int(opts.rootRank);
  return enqueue(c10d::OpType::REDUCE, "pride:reduce", tensors, [t, type, op, root](Communicator& comm, PrideWork&) {
    // The engine may use non-root buffers as scratch; torch leaves them unspecified too, but keep
    // the caller's data intact off-root the way Gloo does.
    at::Tensor buf = comm.rank() == root ? Staged(t).buffer : t.contiguous().clone();
    pride::reduce(comm, buf.data_ptr(), size_t(t.numel()), type, op, root);
    if (comm.rank() == root && !buf.is_same(t)) const_cast<at::Tensor&>(t).copy_(buf);
    return true;
  });
}

intrusive_ptr<Work> PrideBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                            std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions&) {
  if (outputs.size() == 1 && inputs.size() == 1) {
    if (auto w = nccl_allgather(outputs[0], inputs[0])) return w;
  }
  StagingScope staging(*this, tensor_refs(outputs, inputs), "allgather");
  check_single_tensor(inputs, {"allgather", getRank()});
  TORCH_CHECK_VALUE(outputs.size() == 1,
                    "pride allgather (rank ", getRank(), "): expected one output list, got ", outputs.size());
  TORCH_CHECK_VALUE(int(outputs[0].size()) == getSize(),
                    "pride allgather (rank ", getRank(), "): output list has ", outputs[0].size(),
                    " tensors, the group has ", getSize(), " ranks");
  const bool even = check_pieces(inputs[0], outputs[0], getRank(), "allgather", "output", "input");
  check_movable_dtype(inputs[0].scalar_type(), {"allgather", getRank()});
  at::Tensor in = inputs[0];
  std::vector<at::Tensor> outs = outputs[0];
  return enqueue(c10d::OpType::ALLGATHER, "pride:allgather", outs,
                 [in, outs, even](Communicator& comm, PrideWork&) mutable {
                   at::Tensor src = in.contiguous();
                   int64_t total = 0;
                   std::vector<size_t> bytes;
                   for (const auto& o : outs) {
                     total += o.numel();
                     bytes.push_back(nbytes(o));
                   }
                   at::Tensor flat = at::empty({total}, in.options());
                   if (even) {
                     pride::allgather(comm, src.data_ptr(), nbytes(src), flat.data_ptr());
                   } else {
                     pride::allgatherv(comm, src.data_ptr(), bytes, flat.data_ptr());
                   }
                   unflatten_into(flat, outs);
                   return true;
                 });
}

intrusive_ptr<Work> PrideBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                  const c10d::AllgatherOptions&) {
  if (auto w = nccl_allgather_base(output, input)) return w;
  StagingScope staging(*this, tensor_refs(output, input), "all_gather_into_tensor");
  check_cpu_tensor(input, {"all_gather_into_tensor", getRank()});
  check_cpu_tensor(output, {"all_gather_into_tensor", getRank()});
  TORCH_CHECK_TYPE(output.scalar_type() == input.scalar_type(),
                   "pride all_gather_into_tensor (rank ", getRank(), "): output dtype ",
                   output.scalar_type(), " differs from input dtype ", input.scalar_type());
  TORCH_CHECK_VALUE(output.numel() == input.numel() * getSize(),
                    "pride all_gather_into_tensor (rank ", getRank(), "): output has ",
                    output.numel(), " elements, expected ", input.numel() * getSize());
  check_movable_dtype(input.scalar_type(), {"all_gather_into_tensor", getRank()});
  at::Tensor in = input, out = output;
  return enqueue(c10d::OpType::_ALLGATHER_BASE, "pride:all_gather_into_tensor", {out},
                 [in, out](Communicator& comm, PrideWork&) {
                   at::Tensor src = in.contiguous();
                   Staged dst(out);
                   pride::allgather(comm, src.data_ptr(), nbytes(src), dst.data());
                   dst.commit();
                   return true;
                 });
}

// c10d's layout (as Gloo's): outputs[r][i] receives rank r's inputs[i], one list per rank.
intrusive_ptr<Work> PrideBackend::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                      std::vector<at::Tensor>& inputs,
                                                      const c10d::AllgatherOptions& opts) {
  TORCH_CHECK_VALUE(int(outputs.size()) == getSize(), "pride allgather_coalesced (rank ", getRank(), "): ",
                    outputs.size(), " output lists for a group of ", getSize(), " ranks (one list per rank)");
  for (size_t r = 0; r < outputs.size(); ++r) {
    TORCH_CHECK_VALUE(outputs[r].size() == inputs.size(), "pride allgather_coalesced (rank ", getRank(),
                      "): output list ", r, " holds ", outputs[r].size(), " tensors for ", inputs.size(), " inputs");
  }
  std::vector<c10::intrusive_ptr<Work>> works;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<std::vector<at::Tensor>> out(1);
    for (const auto& per_rank : outputs) out[0].push_back(per_rank[i]);
    std::vector<at::Tensor> in{inputs[i]};
    works.push_back(allgather(out, in, opts));
  }
  if (works.empty()) return barrier({});
  return c10::make_intrusive<CoalescedWork>(getRank(), c10d::OpType::ALLGATHER_COALESCED, std::move(works));
}

intrusive_ptr<Work> PrideBackend::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                  std::vector<at::Tensor>& inputs,
                                                                  const c10d::AllgatherOptions& opts) {
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(),
                    "pride allgather_into_tensor_coalesced (rank ", getRank(), "): ", outputs.size(),
                    " outputs for ", inputs.size(), " inputs");
  std::vector<intrusive_ptr<Work>> works;
  for (size_t i = 0; i < inputs.size(); ++i) works.push_back(_allgather_base(outputs[i], inputs[i], opts));
  if (works.empty()) return barrier({});
  // OpType::COALESCED: torch 2.11's OpType has no value of its own for this call or the reduce-scatter one.
  return c10::make_intrusive<CoalescedWork>(getRank(), c10d::OpType::COALESCED, std::move(works));
}

intrusive_ptr<Work> PrideBackend::gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                         const c10d::GatherOptions& opts) {
  if (auto w = nccl_gather(outputs, inputs, int(opts.rootRank))) return w;
  StagingScope staging(*this, tensor_refs(outputs, inputs), "gather");
  check_single_tensor(inputs, {"gather", getRank()});
  const int root = int(opts.rootRank);
  check_root(root, getSize(), {"gather", getRank()});
  check_movable_dtype(inputs[0].scalar_type(), {"gather", getRank()});
  std::vector<at::Tensor> outs;
  if (getRank() == root) {
    TORCH_CHECK_VALUE(outputs.size() == 1 && int(outputs[0].size()) == getSize(),
                      "pride gather (rank ", getRank(), "): the root needs one output list of ", getSize(), " tensors");
    check_same_type_and_size(inputs[0], outputs[0], {"gather", getRank()}, "output");
    outs = outputs[0];
  } else {
    TORCH_CHECK_VALUE(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()),
                      "pride gather (rank ", getRank(), "): only the root rank takes output tensors");
  }
  at::Tensor in = inputs[0];
  return enqueue(c10d::OpType::GATHER, "pride:gather", outs, [in, outs, root](Communicator& comm, PrideWork&) mutable {
    at::Tensor src = in.contiguous();
    at::Tensor flat = comm.rank() == root ? at::empty({int64_t(comm.size()) * in.numel()}, in.options()) : at::Tensor();
    pride::gather(comm, src.data_ptr(), nbytes(src), flat.defined() ? flat.data_ptr() : nullptr, root);
    if (flat.defined()) unflatten_into(flat, outs);
    return true;
  });
}

intrusive_ptr<Work> PrideBackend::scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                          const c10d::ScatterOptions& opts) {
  if (auto w = nccl_scatter(outputs, inputs, int(opts.rootRank))) return w;
  StagingScope staging(*this, tensor_refs(outputs, inputs), "scatter");
  check_single_tensor(outputs, {"scatter", getRank()});
  const int root = int(opts.rootRank);
  check_root(root, getSize(), {"scatter", getRank()});
  check_movable_dtype(outputs[0].scalar_type(), {"scatter", getRank()});
  std::vector<at::Tensor> ins;
  if (getRank() == root) {
    TORCH_CHECK_VALUE(inputs.size() == 1 && int(inputs[0].size()) == getSize(),
                      "pride scatter (rank ", getRank(), "): the root needs one input list of ", getSize(), " tensors");
    check_same_type_and_size(outputs[0], inputs[0], {"scatter", getRank()}, "input");
    ins = inputs[0];
  } else {
    TORCH_CHECK_VALUE(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()),
                      "pride scatter (rank ", getRank(), "): only the root rank takes input tensors");
  }
  at::Tensor out = outputs[0];
  return enqueue(c10d::OpType::SCATTER, "pride:scatter", outputs, [out, ins, root](Communicator& comm, PrideWork&) {
    at::Tensor flat = comm.rank() == root ? flatten(ins) : at::Tensor();
    Staged dst(out);
    pride::scatter(comm, flat.defined() ? flat.data_ptr() : nullptr, dst.data(), nbytes(out), root);
    dst.commit();
    return true;
  });
}

intrusive_ptr<Work> PrideBackend::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                 std::vector<std::vector<at::Tensor>>& inputs,
                                                 const c10d::ReduceScatterOptions& opts) {
  if (outputs.size() == 1 && inputs.size() == 1) {
    if (auto w = nccl_reduce_scatter(outputs[0], inputs[0], opts.reduceOp)) return w;
  }
  StagingScope staging(*this, tensor_refs(outputs, inputs), "reduce_scatter");
  check_single_tensor(outputs, {"reduce_scatter", getRank()});
  TORCH_CHECK_VALUE(inputs.size() == 1 && int(inputs[0].size()) == getSize(),
                    "pride reduce_scatter (rank ", getRank(), "): expected one input list of ", getSize(), " tensors");
  check_pieces(outputs[0], inputs[0], getRank(), "reduce_scatter", "input", "output");
  const ScalarType type = to_scalar_type(outputs[0].scalar_type(), {"reduce_scatter", getRank()});
  const ReduceOp op = to_reduce_op(opts.reduceOp, type, {"reduce_scatter", getRank()});
  at::Tensor out = outputs[0];
  std::vector<at::Tensor> ins = inputs[0];
  return enqueue(c10d::OpType::REDUCE_SCATTER, "pride:reduce_scatter", outputs,
                 [out, ins, type, op](Communicator& comm, PrideWork&) {
                   at::Tensor flat = flatten(ins);
                   Staged dst(out);
                   std::vector<size_t> counts;
                   for (const auto& i : ins) counts.push_back(size_t(i.numel()));
                   pride::reduce_scatter(comm, flat.data_ptr(), dst.data(), counts, type, op);
                   dst.commit();
                   return true;
                 });
}

intrusive_ptr<Work> PrideBackend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                       const c10d::ReduceScatterOptions& opts) {
  if (auto w = nccl_reduce_scatter_base(output, input, opts.reduceOp)) return w;
  StagingScope staging(*this, tensor_refs(output, input), "reduce_scatter_tensor");
  check_cpu_tensor(input, {"reduce_scatter_tensor", getRank()});
  check_cpu_tensor(output, {"reduce_scatter_tensor", getRank()});
  TORCH_CHECK_TYPE(output.scalar_type() == input.scalar_type(),
                   "pride reduce_scatter_tensor (rank ", getRank(), "): output dtype ",
                   output.scalar_type(), " differs from input dtype ", input.scalar_type());
  TORCH_CHECK_VALUE(input.numel() == output.numel() * getSize(),
                    "pride reduce_scatter_tensor (rank ", getRank(), "): input has ",
                    input.numel(), " elements, expected ", output.numel() * getSize());
  const ScalarType type = to_scalar_type(input.scalar_type(), {"reduce_scatter_tensor", getRank()});
  const ReduceOp op = to_reduce_op(opts.reduceOp, type, {"reduce_scatter_tensor", getRank()});
  at::Tensor in = input, out = output;
  return enqueue(c10d::OpType::_REDUCE_SCATTER_BASE, "pride:reduce_scatter_tensor", {out},
                 [in, out, type, op](Communicator& comm, PrideWork&) {
                   at::Tensor src = in.contiguous();
                   Staged dst(out);
                   std::vector<size_t> counts(size_t(comm.size()), size_t(out.numel()));
                   pride::reduce_scatter(comm, src.data_ptr(), dst.data(), counts, type, op);
                   dst.commit();
                   return true;
                 });
}

intrusive_ptr<Work> PrideBackend::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                  std::vector<at::Tensor>& inputs,
                                                                  const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(),
                    "pride reduce_scatter_tensor_coalesced (rank ", getRank(), "): ", outputs.size(),
                    " outputs for ", inputs.size(), " inputs");
  std::vector<intrusive_ptr<Work>> works;
  for (size_t i = 0; i < inputs.size(); ++i) works.push_back(_reduce_scatter_base(outputs[i], inputs[i], opts));
  if (works.empty()) return barrier({});
  return c10::make_intrusive<CoalescedWork>(getRank(), c10d::OpType::COALESCED, std::move(works));
}

intrusive_ptr<Work> PrideBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                std::vector<int64_t>& output_splits, std::vector<int64_t>& input_splits,
                                                const c10d::AllToAllOptions&) {
  if (auto w = nccl_alltoall_base(output, input, output_splits, input_splits)) return w;
  StagingScope staging(*this, tensor_refs(output, input), "all_to_all_single");
  check_cpu_tensor(input, {"all_to_all_single", getRank()});
  check_cpu_tensor(output, {"all_to_all_single", getRank()});
  TORCH_CHECK_TYPE(output.scalar_type() == input.scalar_type(),
                   "pride all_to_all_single (rank ", getRank(), "): output dtype ",
                   output.scalar_type(), " differs from input dtype ", input.scalar_type());
  check_movable_dtype(input.scalar_type(), {"all_to_all_single", getRank()});
  const int n = getSize();
  // Splits count rows of dim 0; empty splits mean equal parts (torch's rule).
  auto to_bytes = [this, n](const at::Tensor& t, const std::vector<int64_t>& splits, const char* which) {
    const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    const size_t row_bytes = rows == 0 ? 0 : nbytes(t) / size_t(rows);
    std::vector<size_t> bytes(static_cast<size_t>(n));
    if (splits.empty()) {
      TORCH_CHECK_VALUE(rows % n == 0, "pride all_to_all_single (rank ", getRank(), "): ", which, " dim 0 (", rows,
                        ") is not divisible by the group size ", n);
      std::fill(bytes.begin(), bytes.end(), size_t(rows / n) * row_bytes);
    } else {
      TORCH_CHECK_VALUE(int(splits.size()) == n,
                        "pride all_to_all_single (rank ", getRank(), "): ", which, " splits has ", splits.size(),
                        " entries, the group has ", n, " ranks");
      int64_t total = 0;
      for (size_t i = 0; i < splits.size(); ++i) {
        TORCH_CHECK_VALUE(splits[i] >= 0, "pride all_to_all_single (rank ", getRank(), "): negative split");
        bytes[i] = size_t(splits[i]) * row_bytes;
        total += splits[i];
      }
      TORCH_CHECK_VALUE(total == rows,
                        "pride all_to_all_single (rank ", getRank(), "): ", which, " splits sum to ", total,
                        ", dim 0 is ", rows);
    }
    return bytes;
  };
  std::vector<size_t> send_bytes = to_bytes(input, input_splits, "input");
  std::vector<size_t> recv_bytes = to_bytes(output, output_splits, "output");
  at::Tensor in = input, out = output;
  return enqueue(c10d::OpType::ALLTOALL_BASE, "pride:all_to_all_single", {out},
                 [in, out, send_bytes, recv_bytes](Communicator& comm, PrideWork&) {
                   at::Tensor src = in.contiguous();
                   Staged dst(out);
                   pride::alltoallv(comm, src.data_ptr(), send_bytes, dst.data(), recv_bytes);
                   dst.commit();
                   return true;
                 });
}

intrusive_ptr<Work> PrideBackend::alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                           const c10d::AllToAllOptions&) {
  if (auto w = nccl_alltoall(outputs, inputs)) return w;
  StagingScope staging(*this, tensor_refs(outputs, inputs), "all_to_all");
  const int n = getSize();
  TORCH_CHECK_VALUE(int(outputs.size()) == n && int(inputs.size()) == n,
                    "pride all_to_all (rank ", getRank(), "): expected ", n,
                    " input and output tensors, got ", inputs.size(), " and ", outputs.size());
  for (const auto& t : inputs) check_cpu_tensor(t, {"all_to_all", getRank()});
  for (const auto& t : outputs) check_cpu_tensor(t, {"all_to_all", getRank()});
  const auto dtype = inputs[0].scalar_type();
  check_movable_dtype(dtype, {"all_to_all", getRank()});
  std::vector<size_t> send_bytes, recv_bytes;
  for (int r = 0; r < n; ++r) {
    TORCH_CHECK_TYPE(inputs[size_t(r)].scalar_type() == dtype && outputs[size_t(r)].scalar_type() == dtype,
                     "pride all_to_all (rank ", getRank(), "): all tensors must have dtype ", dtype);
    send_bytes.push_back(nbytes(inputs[size_t(r)]));
    recv_bytes.push_back(nbytes(outputs[size_t(r)]));
  }
  return enqueue(c10d::OpType::ALLTOALL, "pride:all_to_all", outputs,
                 [inputs, outputs, send_bytes, recv_bytes](Communicator& comm, PrideWork&) mutable {
                   at::Tensor src = flatten(inputs);
                   const size_t total = std::accumulate(recv_bytes.begin(), recv_bytes.end(), size_t(0));
                   at::Tensor dst = at::empty({int64_t(total / outputs[0].element_size())}, outputs[0].options());
                   pride::alltoallv(comm, src.data_ptr(), send_bytes, dst.data_ptr(), recv_bytes);
                   unflatten_into(dst, outputs);
                   return true;
                 });
}

intrusive_ptr<Work> PrideBackend::barrier(const c10d::BarrierOptions&) {
  return enqueue(c10d::OpType::BARRIER, "pride:barrier", {}, [](Communicator& comm, PrideWork&) {
    pride::barrier(comm);
    return true;
  });
}

}  // namespace pride::torch_plugin
