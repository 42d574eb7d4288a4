// How an error message names a collective call from its fingerprint: "allreduce SUM float32 numel
// 100", not "op 257 dtype 11". One describer for every collective of the engine, because a rank that
// disagrees may have called a different collective: each rank prints the other's call with this.
#pragma once

#include <cstdint>
#include <string>

#include "backend/communicator.h"

namespace pride {

// Fingerprint::op of the sign-allreduce (the standard collectives' ids are in standard/common.h).
constexpr uint32_t kSignAllreduceOp = 0x5160;
// Fingerprint::op of the 1-bit compressed allreduce (compressed/onebit_allreduce.h).
constexpr uint32_t kOnebitAllreduceOp = 0x5161;
// Fingerprint::op of the level vote (compressed/level_vote.h); its detail is the max level.
constexpr uint32_t kLevelVoteOp = 0x5162;
// Fingerprint::dtype of a sign-allreduce whose input was not a float tensor: already packed bits
// (sign_allreduce_packed), or the planes of a DistributedLion bucket. Float inputs use bits::DType.
constexpr uint32_t kSignInputPacked = 0xFF;
constexpr uint32_t kSignInputOptimizerBucket = 0x11;
// Set in Fingerprint::detail of a call whose bytes go over NCCL (torch_plugin/nccl_*): a rank on NCCL
// and a rank on UCX disagree before either sends anything. Printed as "over NCCL".
constexpr uint64_t kFingerprintOverNccl = uint64_t(1) << 62;
// Set in the detail of a sign-allreduce whose result chunks travel coded (SignPlan::result_coding):
// ranks that chose differently disagree before anything is sent. Printed as "results as trits" and
// "results as packed counts". The level vote (LevelCoding) sets them for its trit results and its
// packed levels: "results as trits", "levels packed".
constexpr uint64_t kFingerprintTritResults = uint64_t(1) << 61;
constexpr uint64_t kFingerprintCountResults = uint64_t(1) << 60;
// Set in the detail of a hierarchical sign-allreduce whose node counts travel packed
// (SignPlan::packed_node_counts). Printed as "node counts packed".
constexpr uint64_t kFingerprintPackedNodeCounts = uint64_t(1) << 59;

// "allreduce SUM float32 numel 100", "broadcast 400 bytes from root 2",
// "sign_allreduce vote binary float32 numel 1000 (ring, segments of 1048576 words)", ...
std::string describe_call(const Fingerprint& f);

}  // namespace pride
