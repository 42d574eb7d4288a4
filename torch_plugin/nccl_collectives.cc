// PrideBackend's standard collectives on CUDA tensors over NCCL (nccl_group.h), where the group's CUDA
// tensors take NCCL. Each function returns null for a call it does not take as is: CPU tensors, a
// group on UCX, non-contiguous tensors, tensors on different devices, a dtype or reduce op NCCL lacks,
// or arguments that do not fit together. The staged path (host_staging.h) then takes the call, with its
// own argument errors, so a bad call reads the same whichever transport the group uses.
//
// Every call is a pride collective: the ranks' calls are checked against each other first (the
// fingerprint, over UCX), then the NCCL calls go on pride's stream as one NCCL group, and the worker
// watches them to the end (peers, abort notices, the deadline). pride.stats() counts these calls under
// "nccl"; the bytes of NCCL's own algorithms are NCCL's and are not counted.
#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <numeric>
#include <optional>

#include "collectives/engine/standard/common.h"
#include "torch_plugin/cuda_ordering.h"
#include "torch_plugin/nccl_group.h"
#include "torch_plugin/pride_backend.h"
#include "torch_plugin/tensor_types.h"

namespace pride::torch_plugin {
namespace {

using c10::intrusive_ptr;
using c10d::Work;
using standard::OpId;


std::optional<ncclDataType_t> nccl_type(at::ScalarType type) {
  switch (type) {
    case at::kChar: return ncclInt8;
    case at::kByte: return ncclUint8;
    case at::kInt: return ncclInt32;
    case at::kUInt32: return ncclUint32;
    case at::kLong: return ncclInt64;
    case at::kUInt64: return ncclUint64;
    case at::kHalf: return ncclFloat16;
    case at::kFloat: return ncclFloat32;
    case at::kDouble: return ncclFloat64;
    case at::kBFloat16: return ncclBfloat16;
    default: return std::nullopt;
  }
}

// The reductions NCCL has with pride's meaning (AVG of floating types only, as pride defines it).
std::optional<ncclRedOp_t> nccl_op(const c10d::ReduceOp& op, at::ScalarType type) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return ncclSum;
    case c10d::ReduceOp::PRODUCT: return ncclProd;
    case c10d::ReduceOp::MIN: return ncclMin;
    case c10d::ReduceOp::MAX: return ncclMax;
    case c10d::ReduceOp::AVG:
      if (at::isFloatingType(type)) return ncclAvg;
      return std::nullopt;
    default: return std::nullopt;
  }
}

// Defined, dense, contiguous CUDA tensors on one device with one dtype that pride handles.
bool plain_cuda(const std::vector<at::Tensor>& tensors) {
  if (tensors.empty()) return false;
  const at::Tensor& first = tensors[0];
  for (const auto& t : tensors) {
    if (!t.defined() || !t.is_cuda() || t.layout() != at::kStrided || !t.is_contiguous()) return false;
    if (t.device() != first.device() || t.scalar_type() != first.scalar_type()) return false;
  }
  try {
    to_scalar_type(first.scalar_type(), "nccl");
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

Fingerprint fingerprint(OpId op, const at::Tensor& t, uint64_t numel, uint64_t detail) {
  return standard::fingerprint(op, to_scalar_type(t.scalar_type(), "nccl"), numel, detail | kFingerprintOverNccl);
}

size_t bytes_of(const at::Tensor& t) { return size_t(t.numel()) * t.element_size(); }

// A fingerprint detail for a call whose pieces' sizes the ranks must agree on: their hash above the low
// byte (which holds the reduce op) and below the NCCL bit.
uint64_t sizes_digest(const std::vector<size_t>& sizes) {
  return (standard::hash_sizes(sizes) << 8) & (kFingerprintOverNccl - 1);
}

}  // namespace

bool PrideBackend::nccl_takes(const std::vector<at::Tensor>& tensors) {
  // The transport is decided at the first call with any CUDA tensor, before anything about the call is
  // judged: the decision is a rendezvous of every rank, and ranks whose calls differ must still meet.
  auto cuda = std::find_if(tensors.begin(), tensors.end(), [](const at::Tensor& t) { return t.defined() && t.is_cuda(); });
  if (cuda == tensors.end() || gpu_transport(cuda->device()) != GpuTransport::kNccl) return false;
  return plain_cuda(tensors);
}

intrusive_ptr<Work> PrideBackend::enqueue_nccl(c10d::OpType type, const char* name, const char* collective,
                                               Fingerprint fp, std::vector<at::Tensor> outputs,
                                               const std::vector<at::Tensor>& inputs,
                                               std::function<void(NcclCall&)> body) {
  const c10::Device device = outputs.empty() ? inputs.at(0).device() : outputs[0].device();
  std::shared_ptr<CudaOrdering> ordering = cuda_ordering(device);
  for (const auto& t : inputs) ordering->use_on_internal_stream(t);
  for (const auto& t : outputs) ordering->use_on_internal_stream(t);
  NcclGroup* group = nccl();
  Task task = [ordering, device, group, collective, fp, body = std::move(body)](Communicator& comm, PrideWork&) {
    ordering->enter();
    c10::cuda::CUDAGuard device_guard(device);
    c10::cuda::CUDAStreamGuard stream_guard(ordering->internal());  // scratch and copies on pride's stream
    Collective c = comm.begin(collective, "nccl", fp);
    NcclCall call(c, *group, device, ordering->stream());
    body(call);
    ordering->finish();
    return true;
  };
  return enqueue(type, name, std::move(outputs), std::move(task), ordering);
}

intrusive_ptr<Work> PrideBackend::nccl_allreduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOp& op,
                                                 c10d::OpType type, const char* name) {
  if (!nccl_takes(tensors)) return {};
  const auto dtype = nccl_type(tensors[0].scalar_type());
  const auto red = nccl_op(op, tensors[0].scalar_type());
  if (!dtype || !red) return {};
  uint64_t total = 0;
  std::vector<size_t> sizes;
  for (const auto& t : tensors) {
    total += uint64_t(t.numel());
    sizes.push_back(size_t(t.numel()));
  }
  // A bucket is one NCCL allreduce per tensor: ranks whose tensors add up to the same total but are
  // cut differently would reach NCCL with different counts, so the sizes are in the fingerprint.
  const uint64_t digest = sizes.size() > 1 ? sizes_digest(sizes) : 0;
  const uint64_t detail = uint64_t(op.op_) | digest;
  std::vector<at::Tensor> ts = tensors;
  return enqueue_nccl(type, name, "allreduce", fingerprint(OpId::kAllreduce, ts[0], total, detail), ts, ts,
                      [ts, dtype, red](NcclCall& call) {
                        call.run("ncclAllReduce", [&](NcclComm& nccl, cudaStream_t stream) {
                          for (const auto& t : ts) {  // a bucket of tensors: one NCCL group
                            nccl.check(ncclAllReduce(t.data_ptr(), t.data_ptr(), size_t(t.numel()), *dtype, *red,
                                                     nccl.get(), stream),
                                       "ncclAllReduce");
                          }
                        });
                      });
}

intrusive_ptr<Work> PrideBackend::nccl_broadcast(at::Tensor& tensor, int root) {
  if (!nccl_takes({tensor}) || root < 0 || root >= getSize()) return {};
  at::Tensor t = tensor;
  return enqueue_nccl(c10d::OpType::BROADCAST, "pride:broadcast", "broadcast",
                      fingerprint(OpId::kBroadcast, t, bytes_of(t), uint64_t(root)), {t}, {t},
                      [t, root](NcclCall& call) {
                        call.run("ncclBroadcast", [&](NcclComm& nccl, cudaStream_t stream) {
                          nccl.check(ncclBroadcast(t.data_ptr(), t.data_ptr(), bytes_of(t), ncclUint8, root,
                                                   nccl.get(), stream),
                                     "ncclBroadcast");
                        });
                      });
}

intrusive_ptr<Work> PrideBackend::nccl_reduce(at::Tensor& tensor, const c10d::ReduceOp& op, int root) {
  if (!nccl_takes({tensor}) || root < 0 || root >= getSize()) return {};
  const auto dtype = nccl_type(tensor.scalar_type());
  const auto red = nccl_op(op, tensor.scalar_type());
  if (!dtype || !red) return {};
  at::Tensor t = tensor;
  // Off the root the tensor is left as it was (as Gloo and the staged path do): NCCL reads it only.
  return enqueue_nccl(c10d::OpType::REDUCE, "pride:reduce", "reduce",
                      fingerprint(OpId::kReduce, t, uint64_t(t.numel()), uint64_t(op.op_) | uint64_t(root) << 8),
                      {t}, {t}, [t, dtype, red, root](NcclCall& call) {
                        const bool is_root = call.collective().rank() == root;
                        at::Tensor out = is_root ? t : at::empty_like(t);
                        call.run("ncclReduce", [&](NcclComm& nccl, cudaStream_t stream) {
                          nccl.check(ncclReduce(t.data_ptr(), out.data_ptr(), size_t(t.numel()), *dtype, *red, root,
                                                nccl.get(), stream),
                                     "ncclReduce");
                        });
                      });
}

intrusive_ptr<Work> PrideBackend::nccl_allgather_base(at::Tensor& output, at::Tensor& input) {
  if (!nccl_takes({output, input}) || output.numel() != input.numel() * getSize()) return {};
  at::Tensor in = input, out = output;
  return enqueue_nccl(c10d::OpType::_ALLGATHER_BASE, "pride:all_gather_into_tensor", "allgather",
                      fingerprint(OpId::kAllgather, in, bytes_of(in), 0), {out}, {in},
                      [in, out](NcclCall& call) {
                        call.run("ncclAllGather", [&](NcclComm& nccl, cudaStream_t stream) {
                          nccl.check(ncclAllGather(in.data_ptr(), out.data_ptr(), bytes_of(in), ncclUint8, nccl.get(),
                                                   stream),
                                     "ncclAllGather");
                        });
                      });
}

intrusive_ptr<Work> PrideBackend::nccl_allgather(std::vector<at::Tensor>& outputs, at::Tensor& input) {
  std::vector<at::Tensor> all = outputs;
  all.push_back(input);
  const int n = getSize(), me = getRank();
  if (!nccl_takes(all) || int(outputs.size()) != n) return {};
  const bool even = std::all_of(outputs.begin(), outputs.end(),
                                [&](const at::Tensor& o) { return o.numel() == input.numel(); });
  if (!even) {
    // Outputs of different sizes (torch's all_gather_v): this rank's input goes to output `me` of every
    // rank, as point-to-point pieces in one NCCL group (NCCL's all-gather wants equal pieces). The
    // ranks must agree on every size: their digest is in the fingerprint. An input that misses its
    // slot takes the staged path, which raises the error.
    if (outputs[size_t(me)].numel() != input.numel()) return {};
    std::vector<size_t> sizes;
    uint64_t total = 0;
    for (const auto& o : outputs) {
      sizes.push_back(bytes_of(o));
      total += bytes_of(o);
    }
    const uint64_t digest = sizes_digest(sizes);
    return nccl_exchange(c10d::OpType::ALLGATHER, "pride:allgather", "allgatherv",
                         fingerprint(OpId::kAllgatherv, input, total, digest), outputs, {input},
                         std::vector<at::Tensor>(size_t(n), input), outputs, input, outputs[size_t(me)]);
  }
  at::Tensor in = input;
  std::vector<at::Tensor> outs = outputs;
  return enqueue_nccl(c10d::OpType::ALLGATHER, "pride:allgather", "allgather",
                      fingerprint(OpId::kAllgather, in, bytes_of(in), 0), outs, {in},
                      [in, outs](NcclCall& call) {
                        // NCCL gathers into one buffer; the pieces are copied out on the same stream.
                        at::Tensor flat = at::empty({int64_t(outs.size()) * in.numel()}, in.options());
                        call.run("ncclAllGather", [&](NcclComm& nccl, cudaStream_t stream) {
                          nccl.check(ncclAllGather(in.data_ptr(), flat.data_ptr(), bytes_of(in), ncclUint8, nccl.get(),
                                                   stream),
                                     "ncclAllGather");
                        });
                        for (size_t r = 0; r < outs.size(); ++r) {
                          const_cast<at::Tensor&>(outs[r]).copy_(
                              flat.narrow(0, int64_t(r) * in.numel(), in.numel()).view(outs[r].sizes()));
                        }
                      });
}

intrusive_ptr<Work> PrideBackend::nccl_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                           const c10d::ReduceOp& op) {
  if (!nccl_takes({output, input}) || input.numel() != output.numel() * getSize()) return {};
  const auto dtype = nccl_type(input.scalar_type());
  const auto red = nccl_op(op, input.scalar_type());
  if (!dtype || !red) return {};
  at::Tensor in = input, out = output;
  return enqueue_nccl(c10d::OpType::_REDUCE_SCATTER_BASE, "pride:reduce_scatter_tensor", "reduce_scatter",
                      fingerprint(OpId::kReduceScatter, in, uint64_t(in.numel()), uint64_t(op.op_)), {out}, {in},
                      [in, out, dtype, red](NcclCall& call) {
                        call.run("ncclReduceScatter", [&](NcclComm& nccl, cudaStream_t stream) {
                          nccl.check(ncclReduceScatter(in.data_ptr(), out.data_ptr(), size_t(out.numel()), *dtype,
                                                       *red, nccl.get(), stream),
                                     "ncclReduceScatter");
                        });
                      });
}

intrusive_ptr<Work> PrideBackend::nccl_reduce_scatter(at::Tensor& output, std::vector<at::Tensor>& inputs,
                                                      const c10d::ReduceOp& op) {
  std::vector<at::Tensor> all = inputs;
  all.push_back(output);
  if (!nccl_takes(all) || int(inputs.size()) != getSize()) return {};
  const auto dtype = nccl_type(output.scalar_type());
  const auto red = nccl_op(op, output.scalar_type());
  if (!dtype || !red) return {};
  at::Tensor out = output;
  std::vector<at::Tensor> ins = inputs;
  const bool even = std::all_of(inputs.begin(), inputs.end(),
                                [&](const at::Tensor& i) { return i.numel() == output.numel(); });
  if (!even) {
    // Inputs of different sizes (torch's reduce_scatter_v): input r is reduced into rank r's output, one
    // ncclReduce per rank in one NCCL group (NCCL's reduce-scatter wants equal pieces). The ranks must
    // agree on the sizes (their digest is in the fingerprint); an output that misses its input's size
    // takes the staged path, which raises the error.
    if (inputs[size_t(getRank())].numel() != output.numel()) return {};
    std::vector<size_t> sizes;
    uint64_t total = 0;
    for (const auto& i : inputs) {
      sizes.push_back(size_t(i.numel()));
      total += uint64_t(i.numel());
    }
    const uint64_t digest = sizes_digest(sizes);
    // An output that shares memory with an input another rank's reduce reads (all in one NCCL group)
    // could be written before that read: then this rank's reduce goes to a new tensor, copied after.
    bool output_is_read = false;
    for (size_t r = 0; r < inputs.size(); ++r) {
      if (int(r) != getRank() && inputs[r].numel() > 0 &&
          at::get_overlap_status(output, inputs[r]) != at::MemOverlapStatus::No) {
        output_is_read = true;
      }
    }
    return enqueue_nccl(c10d::OpType::REDUCE_SCATTER, "pride:reduce_scatter", "reduce_scatter",
                        fingerprint(OpId::kReduceScatter, out, total, uint64_t(op.op_) | digest), {out}, ins,
                        [out, ins, dtype, red, output_is_read](NcclCall& call) {
                          const size_t me = size_t(call.collective().rank());
                          at::Tensor into = output_is_read ? at::empty_like(out) : out;  // on pride's stream
                          // ncclReduce writes the root's recvbuff only; the other roots' calls get one
                          // scratch buffer rather than the caller's inputs, which stay as they were.
                          int64_t largest = 0;
                          for (size_t r = 0; r < ins.size(); ++r) {
                            if (r != me) largest = std::max(largest, ins[r].numel());
                          }
                          at::Tensor scratch = at::empty({largest}, out.options());  // on pride's stream
                          call.run("grouped ncclReduce", [&](NcclComm& nccl, cudaStream_t stream) {
                            for (size_t r = 0; r < ins.size(); ++r) {
                              if (ins[r].numel() == 0) continue;  // on every rank: the sizes are agreed
                              void* recv = r == me ? into.data_ptr() : scratch.data_ptr();
                              nccl.check(ncclReduce(ins[r].data_ptr(), recv, size_t(ins[r].numel()), *dtype, *red,
                                                    int(r), nccl.get(), stream),
                                         "ncclReduce");
                            }
                          });
                          if (output_is_read) const_cast<at::Tensor&>(out).copy_(into);
                        });
  }
  return enqueue_nccl(c10d::OpType::REDUCE_SCATTER, "pride:reduce_scatter", "reduce_scatter",
                      fingerprint(OpId::kReduceScatter, out, uint64_t(out.numel()) * ins.size(), uint64_t(op.op_)),
                      {out}, ins, [out, ins, dtype, red](NcclCall& call) {
                        std::vector<at::Tensor> flat_pieces;
                        for (const auto& i : ins) flat_pieces.push_back(i.reshape({-1}));
                        at::Tensor flat = at::cat(flat_pieces);  // on pride's stream
                        call.run("ncclReduceScatter", [&](NcclComm& nccl, cudaStream_t stream) {
                          nccl.check(ncclReduceScatter(flat.data_ptr(), out.data_ptr(), size_t(out.numel()), *dtype,
                                                       *red, nccl.get(), stream),
                                     "ncclReduceScatter");
                        });
                      });
}

namespace {

// Whether the exchange writes memory that it also reads (torch's all_to_all_single(t, t), or list
// arguments that share tensors): then NCCL could receive a piece into memory before the send of that
// memory has read it, or the local copy could overwrite a piece not yet sent. Pieces of this rank's own
// index are skipped, as the exchange skips them; a local copy onto exactly its own source writes
// nothing new.
bool writes_what_it_reads(const std::vector<at::Tensor>& sends, const std::vector<at::Tensor>& recvs,
                          const at::Tensor& local_in, const at::Tensor& local_out, int me) {
  const auto used = [](const at::Tensor& t) { return t.defined() && t.numel() > 0; };
  std::vector<at::Tensor> reads, writes;
  for (size_t p = 0; p < sends.size(); ++p) {
    if (int(p) != me && used(sends[p])) reads.push_back(sends[p]);
  }
  for (size_t p = 0; p < recvs.size(); ++p) {
    if (int(p) != me && used(recvs[p])) writes.push_back(recvs[p]);
  }
  if (used(local_in) && used(local_out)) {
    reads.push_back(local_in);
    if (at::get_overlap_status(local_out, local_in) != at::MemOverlapStatus::Full) writes.push_back(local_out);
  }
  for (const auto& w : writes) {
    for (const auto& r : reads) {
      if (at::get_overlap_status(w, r) != at::MemOverlapStatus::No) return true;
    }
  }
  return false;
}

}  // namespace

// Point-to-point pieces as one NCCL group: sends[p] goes to rank p, recvs[p] comes from it (empty
// tensors skip), and local_in is copied into local_out (this rank's own piece; undefined for none).
// All-to-all, gather, scatter and all_gather_v are this: NCCL has no call for them.
intrusive_ptr<Work> PrideBackend::nccl_exchange(c10d::OpType type, const char* name, const char* collective,
                                                Fingerprint fp, std::vector<at::Tensor> outputs,
                                                std::vector<at::Tensor> inputs, std::vector<at::Tensor> sends,
                                                std::vector<at::Tensor> recvs, at::Tensor local_in,
                                                at::Tensor local_out) {
  const bool snapshot = writes_what_it_reads(sends, recvs, local_in, local_out, getRank());
  return enqueue_nccl(type, name, collective, fp, std::move(outputs), inputs,
                      [sends, recvs, local_in, local_out, snapshot](NcclCall& call) {
                        const int n = call.collective().size(), me = call.collective().rank();
                        // In place: what is read is first copied, on pride's stream (its memory returns
                        // to that stream's pool, behind the NCCL calls that read it).
                        std::vector<at::Tensor> from = sends;
                        at::Tensor mine = local_in;
                        if (snapshot) {
                          // One copy per distinct tensor (all_gather_v sends its one input to every peer);
                          // this rank's own send piece is never sent.
                          std::vector<std::pair<at::Tensor, at::Tensor>> copies;
                          const auto copy_of = [&copies](const at::Tensor& t) {
                            for (const auto& [original, copy] : copies) {
                              if (original.is_same(t)) return copy;
                            }
                            copies.emplace_back(t, t.clone());
                            return copies.back().second;
                          };
                          for (int p = 0; p < n; ++p) {
                            at::Tensor& t = from[size_t(p)];
                            if (p != me && t.defined() && t.numel() > 0) t = copy_of(t);
                          }
                          if (mine.defined()) mine = copy_of(mine);
                        }
                        if (mine.defined() && local_out.defined()) {
                          const_cast<at::Tensor&>(local_out).copy_(mine.view(local_out.sizes()));
                        }
                        call.run("grouped ncclSend/ncclRecv", [&](NcclComm& nccl, cudaStream_t stream) {
                          for (int peer = 0; peer < n; ++peer) {
                            if (peer == me) continue;
                            const at::Tensor& out = from[size_t(peer)];
                            const at::Tensor& in = recvs[size_t(peer)];
                            if (out.defined() && out.numel() > 0) {
                              nccl.check(ncclSend(out.data_ptr(), bytes_of(out), ncclUint8, peer, nccl.get(), stream),
                                         "ncclSend");
                            }
                            if (in.defined() && in.numel() > 0) {
                              nccl.check(ncclRecv(in.data_ptr(), bytes_of(in), ncclUint8, peer, nccl.get(), stream),
                                         "ncclRecv");
                            }
                          }
                        });
                      });
}

namespace {

// Rows of dim 0 per rank: `splits`, or equal parts when empty (torch's rule); nullopt when they do not
// fit the tensor (the staged path then raises torch's error).
std::optional<std::vector<int64_t>> rows_per_rank(const at::Tensor& t, const std::vector<int64_t>& splits, int n) {
  if (t.dim() == 0) return std::nullopt;
  const int64_t rows = t.size(0);
  if (splits.empty()) {
    if (rows % n != 0) return std::nullopt;
    return std::vector<int64_t>(size_t(n), rows / n);
  }
  if (int(splits.size()) != n) return std::nullopt;
  int64_t total = 0;
  for (int64_t s : splits) {
    if (s < 0) return std::nullopt;
    total += s;
  }
  if (total != rows) return std::nullopt;
  return splits;
}

std::vector<at::Tensor> split_rows(const at::Tensor& t, const std::vector<int64_t>& rows) {
  std::vector<at::Tensor> pieces;
  int64_t offset = 0;
  for (int64_t r : rows) {
    pieces.push_back(t.narrow(0, offset, r));  // a dim-0 slice of a contiguous tensor is contiguous
    offset += r;
  }
  return pieces;
}

}  // namespace

intrusive_ptr<Work> PrideBackend::nccl_alltoall_base(at::Tensor& output, at::Tensor& input,
                                                     const std::vector<int64_t>& output_splits,
                                                     const std::vector<int64_t>& input_splits) {
  if (!nccl_takes({output, input})) return {};
  const auto send_rows = rows_per_rank(input, input_splits, getSize());
  const auto recv_rows = rows_per_rank(output, output_splits, getSize());
  if (!send_rows || !recv_rows) return {};
  std::vector<at::Tensor> sends = split_rows(input, *send_rows), recvs = split_rows(output, *recv_rows);
  const at::Tensor mine_in = sends[size_t(getRank())], mine_out = recvs[size_t(getRank())];
  if (mine_in.numel() != mine_out.numel()) return {};
  return nccl_exchange(c10d::OpType::ALLTOALL_BASE, "pride:all_to_all_single", "alltoallv",
                       fingerprint(OpId::kAlltoallv, input, 0, 0), {output}, {input}, sends, recvs, mine_in,
                       mine_out);
}

intrusive_ptr<Work> PrideBackend::nccl_alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs) {
  std::vector<at::Tensor> all = outputs;
  all.insert(all.end(), inputs.begin(), inputs.end());
  const int n = getSize(), me = getRank();
  if (!nccl_takes(all) || int(outputs.size()) != n || int(inputs.size()) != n) return {};
  if (inputs[size_t(me)].numel() != outputs[size_t(me)].numel()) return {};
  return nccl_exchange(c10d::OpType::ALLTOALL, "pride:all_to_all", "alltoallv",
                       fingerprint(OpId::kAlltoallv, inputs[0], 0, 0), outputs, inputs, inputs, outputs,
                       inputs[size_t(me)], outputs[size_t(me)]);
}

intrusive_ptr<Work> PrideBackend::nccl_gather(std::vector<std::vector<at::Tensor>>& outputs,
                                              std::vector<at::Tensor>& inputs, int root) {
  const int n = getSize(), me = getRank();
  if (inputs.size() != 1 || root < 0 || root >= n) return {};
  std::vector<at::Tensor> all = inputs, outs;
  if (me == root) {
    if (outputs.size() != 1 || int(outputs[0].size()) != n) return {};
    outs = outputs[0];
    for (const auto& o : outs) {
      if (o.numel() != inputs[0].numel()) return {};
    }
    all.insert(all.end(), outs.begin(), outs.end());
  } else if (!(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()))) {
    return {};
  }
  if (!nccl_takes(all)) return {};
  const at::Tensor in = inputs[0];
  std::vector<at::Tensor> sends(static_cast<size_t>(n)), recvs(static_cast<size_t>(n));
  at::Tensor local_in, local_out;
  if (me == root) {
    recvs = outs;
    local_in = in;
    local_out = outs[size_t(me)];
  } else {
    sends[size_t(root)] = in;
  }
  return nccl_exchange(c10d::OpType::GATHER, "pride:gather", "gather",
                       fingerprint(OpId::kGather, in, bytes_of(in), uint64_t(root)), outs, {in}, sends, recvs,
                       local_in, local_out);
}

intrusive_ptr<Work> PrideBackend::nccl_scatter(std::vector<at::Tensor>& outputs,
                                               std::vector<std::vector<at::Tensor>>& inputs, int root) {
  const int n = getSize(), me = getRank();
  if (outputs.size() != 1 || root < 0 || root >= n) return {};
  std::vector<at::Tensor> all = outputs, ins;
  if (me == root) {
    if (inputs.size() != 1 || int(inputs[0].size()) != n) return {};
    ins = inputs[0];
    for (const auto& i : ins) {
      if (i.numel() != outputs[0].numel()) return {};
    }
    all.insert(all.end(), ins.begin(), ins.end());
  } else if (!(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()))) {
    return {};
  }
  if (!nccl_takes(all)) return {};
  const at::Tensor out = outputs[0];
  std::vector<at::Tensor> sends(static_cast<size_t>(n)), recvs(static_cast<size_t>(n));
  at::Tensor local_in, local_out;
  if (me == root) {
    sends = ins;
    local_in = ins[size_t(me)];
    local_out = out;
  } else {
    recvs[size_t(root)] = out;
  }
  return nccl_exchange(c10d::OpType::SCATTER, "pride:scatter", "scatter",
                       fingerprint(OpId::kScatter, out, bytes_of(out), uint64_t(root)), {out}, ins, sends,
                       recvs, local_in, local_out);
}

}  // namespace pride::torch_plugin
