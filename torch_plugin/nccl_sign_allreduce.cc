#include "torch_plugin/nccl_sign_allreduce.h"

#include <vector>

#include "backend/common/settings.h"
#include "collectives/bits/kernels.h"
#include "collectives/engine/call_description.h"
#include "collectives/engine/patterns/chunks.h"
#include "collectives/engine/sign/direct_segment.h"
#include "collectives/engine/sign/data_path.h"
#include "torch_plugin/cuda_plane_ops.h"
#include "torch_plugin/nccl_group.h"

namespace pride::torch_plugin {
namespace {

using patterns::chunk;
using patterns::Range;


void direct(NcclCall& call, CudaPlaneOps& ops, const SignPlan& plan, const uint64_t* votes, size_t W,
            uint64_t* planes) {
  Collective& c = call.collective();
  const int n = c.size(), r = c.rank(), C = plan.counters, R = plan.result_planes;
  const Range mine = chunk(W, n, r);
  // Chunk-major staging: one message per owner, as the UCX direct.
  const uint64_t* shards = stage_direct_shards(ops, votes, W, C, W, n, 0);
  const size_t shard_words = size_t(C) * mine.size;
  uint64_t* inbox = ops.scratch(SignScratch::kDirectInbox, size_t(n) * shard_words, 0);
  call.run("the shard exchange (ncclSend/ncclRecv)", [&](NcclComm& nccl, cudaStream_t stream) {
    for (int d = 1; d < n; ++d) {
      const int to = (r + d) % n, from = (r - d + n) % n;
      const Range ch = chunk(W, n, to);
      if (ch.size > 0) {
        nccl.check(ncclSend(shards + size_t(C) * ch.begin, size_t(C) * ch.size, ncclUint64, to, nccl.get(), stream),
                   "ncclSend");
      }
      if (mine.size > 0) {
        nccl.check(ncclRecv(inbox + size_t(from) * shard_words, shard_words, ncclUint64, from, nccl.get(), stream),
                   "ncclRecv");
      }
    }
  });
  call.count(size_t(C) * (W - mine.size) * 8, size_t(n - 1) * shard_words * 8);

  // The owner counts its chunk (positional popcount over the N ballots, per counter) and decides it.
  const int count_planes = bits::planes_for(n);
  const uint64_t* counts = count_direct_chunk(ops, shards, inbox, C, W, n, r, 0);
  // One result plane is its own chunk-major layout: the owners' chunks go straight into `planes`.
  uint64_t* results = R == 1 ? planes : ops.scratch(SignScratch::kDirectResults, size_t(R) * W, 0);
  ops.finalize(plan, counts, count_planes, mine.size, results + size_t(R) * mine.begin, mine.size);

  const bool equal_chunks = W % size_t(n) == 0;
  call.run(equal_chunks ? "the result all-gather (ncclAllGather)" : "the result exchange (ncclSend/ncclRecv)",
           [&](NcclComm& nccl, cudaStream_t stream) {
             if (equal_chunks) {  // in place: this rank's chunk already sits at its slot of the output
               nccl.check(ncclAllGather(results + size_t(R) * mine.begin, results, size_t(R) * mine.size, ncclUint64,
                                        nccl.get(), stream),
                          "ncclAllGather");
               return;
             }
             for (int d = 1; d < n; ++d) {
               const int to = (r + d) % n, from = (r - d + n) % n;
               const Range ch = chunk(W, n, from);
               if (mine.size > 0) {
                 nccl.check(ncclSend(results + size_t(R) * mine.begin, size_t(R) * mine.size, ncclUint64, to,
                                     nccl.get(), stream),
                            "ncclSend");
               }
               if (ch.size > 0) {
                 nccl.check(ncclRecv(results + size_t(R) * ch.begin, size_t(R) * ch.size, ncclUint64, from,
                                     nccl.get(), stream),
                            "ncclRecv");
               }
             }
           });
  call.count(size_t(n - 1) * size_t(R) * mine.size * 8, size_t(R) * (W - mine.size) * 8);
  if (R > 1) {
    for (int j = 0; j < n; ++j) {
      const Range ch = chunk(W, n, j);
      ops.scatter(results + size_t(R) * ch.begin, R, ch, planes, W);
    }
  }
}

void allgather(NcclCall& call, CudaPlaneOps& ops, const SignPlan& plan, const uint64_t* votes, size_t W,
               uint64_t* planes) {
  Collective& c = call.collective();
  const int n = c.size(), C = plan.counters;
  const size_t ballot_words = size_t(C) * W;
  uint64_t* gathered = ops.scratch(SignScratch::kDirectInbox, size_t(n) * ballot_words, 0);
  call.run("the vote all-gather (ncclAllGather)", [&](NcclComm& nccl, cudaStream_t stream) {
    nccl.check(ncclAllGather(votes, gathered, ballot_words, ncclUint64, nccl.get(), stream), "ncclAllGather");
  });
  call.count(size_t(n - 1) * ballot_words * 8, size_t(n - 1) * ballot_words * 8);
  const int count_planes = bits::planes_for(n);
  uint64_t* counts = ops.scratch(SignScratch::kDirectCounts, size_t(C * count_planes) * W, 0);
  std::vector<const uint64_t*> ballots(static_cast<size_t>(n));
  for (int k = 0; k < C; ++k) {
    for (int j = 0; j < n; ++j) ballots[size_t(j)] = gathered + size_t(j) * ballot_words + size_t(k) * W;
    ops.count(ballots.data(), n, W, counts + size_t(k * count_planes) * W, count_planes);
  }
  ops.finalize(plan, counts, count_planes, W, planes, W);
}

}  // namespace

SignPlan nccl_sign_allreduce(Communicator& comm, NcclGroup& nccl, c10::Device device, cudaStream_t stream,
                             const uint64_t* votes, size_t numel, const SignOptions& options, uint32_t dtype_code,
                             uint64_t* planes) {
  const SignPlan plan = SignPlan::make(comm.size(), options.mode, options.votes);
  const SignAlgorithm algorithm = choose_nccl_sign_algorithm(options.algorithm, Settings::get().algo, comm.rank());
  Fingerprint fp;
  fp.op = kSignAllreduceOp;
  fp.dtype = dtype_code;
  fp.numel = numel;
  fp.describe = &describe_call;
  fp.detail = uint64_t(options.mode) | uint64_t(options.votes) << 8 | uint64_t(algorithm) << 16 | kFingerprintOverNccl;
  const bool is_direct = algorithm == SignAlgorithm::kDirect;
  Collective c = comm.begin("sign_allreduce", is_direct ? "nccl_direct" : "nccl_allgather", fp);
  const size_t W = bits::words_for(numel);
  CudaPlaneOps ops(device, stream, comm.rank());
  if (W == 0) return plan;
  if (comm.size() == 1) {  // a world of one: its own votes are the count
    ops.finalize(plan, votes, 1, W, planes, W);
    return plan;
  }
  NcclCall call(c, nccl, device, stream);
  if (is_direct) {
    direct(call, ops, plan, votes, W, planes);
  } else {
    allgather(call, ops, plan, votes, W, planes);
  }
  return plan;
}

}  // namespace pride::torch_plugin
