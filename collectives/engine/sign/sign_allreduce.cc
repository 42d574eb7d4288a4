#include "collectives/engine/sign/sign_allreduce.h"

#include <algorithm>
#include <cstring>

#include "backend/common/error.h"
#include "backend/common/settings.h"
#include "collectives/engine/sign/selector.h"
#include "collectives/engine/sign/sign_algorithms.h"

namespace pride {
namespace {

constexpr uint32_t kSignAllreduceOp = 0x5160;  // fingerprint op id
constexpr uint32_t kPackedDtypeCode = 0xFF;

using AlgorithmFn = void (*)(Collective&, const SignPlan&, const SignSegment&);

AlgorithmFn algorithm_fn(SignAlgorithm a) {
  switch (a) {
    case SignAlgorithm::kRing: return &sign_ring;
    case SignAlgorithm::kTree: return &sign_tree;
    case SignAlgorithm::kDirect: return &sign_direct;
    case SignAlgorithm::kAllgather: return &sign_allgather;
    case SignAlgorithm::kAuto: break;
  }
  throw Error("sign_allreduce: no algorithm selected");
}

}  // namespace

void SignResult::write(void* y, bits::DType dtype) const {
  if (numel == 0) return;
  if (plan.mode == SignMode::kVote) {
    bits::unpack_vote(plane(0), tie_plane(), numel, y, dtype);
  } else {
    bits::unpack_mean(planes.data(), plan.result_planes, numel, plan.mean_scale, plan.mean_offset, plan.nranks, y,
                      dtype);
  }
}

SignResult sign_allreduce_planes(Communicator& comm, const uint64_t* votes, size_t numel, const SignOptions& options,
                                 uint32_t dtype_code) {
  SignResult result;
  result.plan = SignPlan::make(comm.size(), options.mode, options.votes);
  result.numel = numel;
  result.nwords = bits::words_for(numel);
  result.algorithm = options.algorithm != SignAlgorithm::kAuto
                         ? options.algorithm
                         : select_sign_algorithm(result.plan, numel, comm.num_nodes(), comm.ranks_per_core());
  result.planes.assign(size_t(result.plan.result_planes) * result.nwords, 0);

  Fingerprint fp;
  fp.op = kSignAllreduceOp;
  fp.dtype = dtype_code;
  fp.numel = numel;
  fp.detail = uint64_t(options.mode) | uint64_t(options.votes) << 8 | uint64_t(result.algorithm) << 16;
  Collective c = comm.begin("sign_allreduce", name(result.algorithm), fp);

  // Large tensors go through in segments: bounded scratch memory per step, and each segment's
  // messages are tagged apart by their slot range.
  const size_t segment_words = std::max<size_t>(1, Settings::get().segment_bytes / 8);
  const size_t total = result.nwords;
  AlgorithmFn run = algorithm_fn(result.algorithm);
  uint32_t slot = 0;
  for (size_t begin = 0; begin < total; begin += segment_words) {
    SignSegment seg;
    seg.nwords = std::min(segment_words, total - begin);
    seg.votes = votes + begin;
    seg.vote_stride = total;
    seg.result = result.planes.data() + begin;
    seg.result_stride = total;
    seg.slot_base = slot;
    run(c, result.plan, seg);
    slot += sign_slots_per_segment(comm.size());
    if (slot + sign_slots_per_segment(comm.size()) > Collective::kMaxSlot) slot = 0;  // earlier ones are done
  }
  return result;
}

void sign_allreduce(Communicator& comm, void* x, bits::DType dtype, size_t numel, const SignOptions& options) {
  PRIDE_CHECK_ARG(dtype == bits::DType::kFloat32 || dtype == bits::DType::kBFloat16 || dtype == bits::DType::kFloat16,
                  "sign_allreduce: unsupported dtype {} (float32, bfloat16 or float16)", bits::dtype_name(dtype));
  PRIDE_CHECK_ARG(x != nullptr || numel == 0, "sign_allreduce: null buffer");
  const size_t nwords = bits::words_for(numel);
  const int counters = options.votes == VoteKind::kBinary ? 1 : 2;
  std::vector<uint64_t> votes(size_t(counters) * nwords);
  if (numel > 0) {
    if (options.votes == VoteKind::kBinary) bits::pack_binary(x, dtype, numel, votes.data());
    else bits::pack_ternary(x, dtype, numel, votes.data(), votes.data() + nwords);
  }
  SignResult r = sign_allreduce_planes(comm, votes.data(), numel, options, uint32_t(dtype));
  r.write(x, dtype);
}

void sign_allreduce_packed(Communicator& comm, const uint8_t* packed, size_t numel, const SignOptions& options,
                           void* out) {
  PRIDE_CHECK_ARG(options.votes == VoteKind::kBinary, "sign_allreduce_packed: packed input carries binary votes only");
  PRIDE_CHECK_ARG((packed != nullptr && out != nullptr) || numel == 0, "sign_allreduce_packed: null buffer");
  const size_t nwords = bits::words_for(numel);
  std::vector<uint64_t> votes(nwords, 0);
  if (numel > 0) {
    std::memcpy(votes.data(), packed, bits::bytes_for(numel));
    if (numel % 64 != 0) votes[nwords - 1] &= (uint64_t(1) << (numel % 64)) - 1;  // readers ignore trailing bits
  }
  SignResult r = sign_allreduce_planes(comm, votes.data(), numel, options, kPackedDtypeCode);
  r.write(out, options.mode == SignMode::kVote ? bits::DType::kInt8 : bits::DType::kFloat32);
}

}  // namespace pride
