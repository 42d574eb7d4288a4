#include "torch_plugin/nccl_sign_allreduce.h"

#include <vector>

#include "backend/common/settings.h"
#include "collectives/bits/kernels.h"
#include "collectives/engine/call_description.h"
#include "collectives/engine/patterns/chunks.h"
#include "collectives/engine/sign/coded_results.h"
#include "collectives/engine/sign/data_path.h"
#include "collectives/engine/sign/direct_segment.h"
#include "collectives/engine/sign/selector.h"
#include "torch_plugin/cuda_plane_ops.h"
#include "torch_plugin/nccl_group.h"

namespace pride::torch_plugin {
namespace {

using patterns::chunk;
using patterns::Range;


// The direct algorithm's result phase when the results travel coded (trits or packed counts,
// coded_results.h): the owner decides its chunk into `planes`, encodes it into its place in a byte
// buffer laid out chunk-major, every owner's bytes go to every rank (ncclAllGather when the chunks are
// all the same size, grouped send/recv otherwise), and each rank decodes the others' chunks into
// `planes`. The same bytes, on the same slots of the buffer, as the UCX direct algorithm's.
void coded_results(NcclCall& call, CudaPlaneOps& ops, const SignPlan& plan, const uint64_t* counts,
                   int count_planes, size_t W, uint64_t* planes) {
  Collective& c = call.collective();
  const int n = c.size(), r = c.rank();
  const Range mine = chunk(W, n, r);
  const size_t total = coded_offset(plan, W, n, n), my_bytes = plan.result_bytes(mine.size);
  uint8_t* coded = reinterpret_cast<uint8_t*>(ops.scratch(SignScratch::kDirectCoded, (total + 7) / 8, 0));
  ops.finalize(plan, counts, count_planes, mine.size, planes + mine.begin, W);
  encode_result(ops, plan, planes + mine.begin, W, mine.size, coded + coded_offset(plan, W, n, r));

  const bool equal_chunks = W % size_t(n) == 0;
  const char* what =
      equal_chunks ? "the coded result all-gather (ncclAllGather)" : "the coded result exchange (ncclSend/ncclRecv)";
  call.run(what, [&](NcclComm& nccl, cudaStream_t stream) {
    if (equal_chunks) {  // in place: chunk r's bytes sit at r · my_bytes
      nccl.check(ncclAllGather(coded + coded_offset(plan, W, n, r), coded, my_bytes, ncclUint8, nccl.get(),
                               stream),
                 "ncclAllGather");
      return;
    }
    for (int d = 1; d < n; ++d) {
      const int to = (r + d) % n, from = (r - d + n) % n;
      const size_t from_bytes = plan.result_bytes(chunk(W, n, from).size);
      if (my_bytes > 0) {
        nccl.check(ncclSend(coded + coded_offset(plan, W, n, r), my_bytes, ncclUint8, to, nccl.get(), stream),
                   "ncclSend");
      }
      if (from_bytes > 0) {
        nccl.check(ncclRecv(coded + coded_offset(plan, W, n, from), from_bytes, ncclUint8, from, nccl.get(),
                            stream),
                   "ncclRecv");
      }
    }
  });
  call.count(size_t(n - 1) * my_bytes, total - my_bytes);
  for (int j = 0; j < n; ++j) {
    const Range ch = chunk(W, n, j);
    if (j == r || ch.size == 0) continue;
    decode_result(ops, plan, coded + coded_offset(plan, W, n, j), ch.size, planes + ch.begin, W);
  }
}

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
  if (plan.result_coding != ResultCoding::kPlanes) {
    coded_results(call, ops, plan, counts, count_planes, W, planes);
    return;
  }
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
  SignPlan plan = SignPlan::make(comm.size(), options.mode, options.votes);
  const SignAlgorithm algorithm = choose_nccl_sign_algorithm(options.algorithm, Settings::get().algo, comm.rank());
  // The direct algorithm's results travel coded as they would over UCX (PRIDE_RESULT_CODING; auto weighs
  // the wire saved against the coding's measured CPU cost, which overstates the GPU's), so that a call
  // puts the same bytes on the wire on either transport.
  plan.result_coding = select_result_coding(plan, algorithm, numel, comm.num_nodes(), comm.ranks_per_core());
  Fingerprint fp;
  fp.op = kSignAllreduceOp;
  fp.dtype = dtype_code;
  fp.numel = numel;
  fp.describe = &describe_call;
  fp.detail = uint64_t(options.mode) | uint64_t(options.votes) << 8 | uint64_t(algorithm) << 16 | kFingerprintOverNccl |
              (plan.result_coding == ResultCoding::kTrits ? kFingerprintTritResults : 0) |
              (plan.result_coding == ResultCoding::kCounts ? kFingerprintCountResults : 0);
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
