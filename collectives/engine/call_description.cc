#include "collectives/engine/call_description.h"

#include <fmt/format.h>

#include "collectives/bits/kernels.h"
#include "collectives/engine/sign/sign_types.h"
#include "collectives/engine/standard/common.h"

namespace pride {
namespace {

using standard::OpId;

std::string scalar(uint32_t code) {
  return code <= uint32_t(ScalarType::kComplex32) ? scalar_name(ScalarType(code)) : fmt::format("dtype {}", code);
}

std::string reduce_op(uint64_t code) {
  return code <= uint64_t(ReduceOp::kBxor) ? reduce_op_name(ReduceOp(code)) : fmt::format("op {}", code);
}

std::string sign_input(uint32_t code) {
  if (code == kSignInputPacked) return "packed bits";
  if (code == kSignInputOptimizerBucket) return "DistributedLion bucket";
  if (code <= uint32_t(bits::DType::kInt8)) return bits::dtype_name(bits::DType(code));
  return fmt::format("dtype {}", code);
}

template <class Enum>
std::string sign_enum(uint64_t code, Enum last) {
  return code <= uint64_t(last) ? name(Enum(code)) : fmt::format("{}", code);
}

std::string describe_standard(const Fingerprint& f) {
  switch (OpId(f.op)) {
    case OpId::kAllreduce:  // detail: the op, and over NCCL a bucket's sizes digest above it
      return fmt::format("allreduce {} {} numel {}{}", reduce_op(f.detail & 0xff), scalar(f.dtype), f.numel,
                         f.detail >> 8 ? fmt::format(" (sizes digest {:#x})", f.detail >> 8) : "");
    case OpId::kReduce:
      return fmt::format("reduce {} {} numel {} to root {}", reduce_op(f.detail & 0xff), scalar(f.dtype), f.numel,
                         f.detail >> 8);
    case OpId::kReduceScatter:
      return fmt::format("reduce_scatter {} numel {} (counts and op digest {:#x})", scalar(f.dtype), f.numel, f.detail);
    case OpId::kBroadcast: return fmt::format("broadcast {} bytes from root {}", f.numel, f.detail);
    case OpId::kGather: return fmt::format("gather {} bytes per rank to root {}", f.numel, f.detail);
    case OpId::kScatter: return fmt::format("scatter {} bytes per rank from root {}", f.numel, f.detail);
    case OpId::kAllgather: return fmt::format("allgather {} bytes per rank", f.numel);
    case OpId::kAllgatherv: return fmt::format("allgatherv {} bytes in all (sizes digest {:#x})", f.numel, f.detail);
    case OpId::kAlltoallv: return "alltoall";
    case OpId::kBarrier: return "barrier";
  }
  return {};
}

std::string describe_sign(const Fingerprint& f) {
  // detail: mode | votes << 8 | algorithm << 16 | segment words << 24 (sign_allreduce.cc).
  const uint64_t detail =
      f.detail & ~(kFingerprintTritResults | kFingerprintCountResults | kFingerprintPackedNodeCounts);
  const char* coding = f.detail & kFingerprintTritResults    ? ", results as trits"
                       : f.detail & kFingerprintCountResults ? ", results as packed counts"
                                                             : "";
  return fmt::format("sign_allreduce {} {} {} numel {} ({}, segments of {} words{}{})",
                     sign_enum(detail & 0xff, SignMode::kMean), sign_enum((detail >> 8) & 0xff, VoteKind::kTernary),
                     sign_input(f.dtype), f.numel, sign_enum((detail >> 16) & 0xff, SignAlgorithm::kHier),
                     detail >> 24, coding, f.detail & kFingerprintPackedNodeCounts ? ", node counts packed" : "");
}

std::string describe_level_vote(const Fingerprint& f) {
  // detail: max_level | the coding bits (level_vote.cc).
  const int32_t level = int32_t(uint32_t(f.detail));
  return fmt::format("level_vote int8 numel {} levels +-{}{}{}", f.numel, level,
                     f.detail & kFingerprintCountResults ? ", levels packed" : "",
                     f.detail & kFingerprintTritResults ? ", results as trits" : "");
}

}  // namespace

std::string describe_call(const Fingerprint& f) {
  Fingerprint plain = f;
  plain.detail &= ~kFingerprintOverNccl;
  std::string call = f.op == kSignAllreduceOp ? describe_sign(plain)
                     : f.op == kOnebitAllreduceOp
                         ? fmt::format("compressed_allreduce (1-bit, error feedback) {} numel {}", sign_input(f.dtype), f.numel)
                     : f.op == kLevelVoteOp ? describe_level_vote(plain)
                                            : describe_standard(plain);
  if (call.empty()) call = fmt::format("op {:#x} dtype {} numel {} detail {:#x}", f.op, f.dtype, f.numel, f.detail);
  if (f.detail & kFingerprintOverNccl) call += " over NCCL";
  return fmt::format("{} (#{})", call, f.sequence);
}

}  // namespace pride
