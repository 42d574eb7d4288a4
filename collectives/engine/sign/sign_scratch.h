// The sign-allreduce's buffers in the communicator's workspace (backend/workspace.h): one key per
// buffer and live instance, so buffers in use at the same time never share memory.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/workspace.h"

namespace pride {

enum class SignScratch : uint32_t {
  kVotes, kResultPlanes,                                         // the values API, whole tensor
  kRingPartial, kRingIncoming, kRingResults,                     // per segment
  kTreeAcc, kTreeFromChild0, kTreeFromChild1, kTreeResult,
  kAllgatherAll, kAllgatherCounts,
  kDirectShards, kDirectInbox, kDirectResults, kDirectCounts, kDirectCoded,
  kHierVotes, kHierNodeCount, kHierStaged, kHierCountsIn, kHierTotal, kHierResults, kHierSum, kHierCoded,
  kHierCountsCoded, kHierCountsCodedIn,
};

// `instance` tells apart segments that are in flight together (the direct pipeline has two, hier's three).
inline uint64_t* sign_scratch(Workspace& ws, SignScratch what, size_t count, uint32_t instance = 0) {
  constexpr uint32_t kOwner = 0x5160;  // the sign-allreduce's fingerprint op id
  return ws.get<uint64_t>({kOwner, uint32_t(what) * 4 + instance}, count);
}

}  // namespace pride
