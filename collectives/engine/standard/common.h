// What the standard collectives share: their fingerprint op ids, the slot layout of their messages,
// the message segment size, and the argument checks that run before anything is sent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "backend/common/error.h"
#include "backend/communicator.h"
#include "collectives/engine/call_description.h"
#include "collectives/engine/standard/collectives.h"

namespace pride::standard {

// Fingerprint::op of each standard collective. 0x100 and up, clear of the sign-allreduce ids, so that
// ranks calling different collectives always disagree.
enum class OpId : uint32_t {
  kAllreduce = 0x101, kBroadcast, kReduce, kAllgather, kAllgatherv, kGather, kScatter, kReduceScatter,
  kAlltoallv, kBarrier,
};

inline Fingerprint fingerprint(OpId op, ScalarType type, uint64_t numel, uint64_t detail) {
  return Fingerprint{0, static_cast<uint32_t>(op), static_cast<uint32_t>(type), numel, detail, &describe_call};
}

// Fingerprint detail of a per-rank size vector (FNV-1a over its entries): the v-variants pass the
// same vector on every rank, so a single differing entry changes the fingerprint.
inline uint64_t hash_sizes(const std::vector<size_t>& sizes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t s : sizes) {
    for (int byte = 0; byte < 8; ++byte) {
      h ^= (static_cast<uint64_t>(s) >> (8 * byte)) & 0xff;
      h *= 0x100000001b3ull;
    }
  }
  return h;
}

// hash_sizes as a fingerprint's detail holds it: below bit 56, since bits 59-62 of a detail are flags
// (call_description.h: "over NCCL" and the sign codings). Unmasked, half of all digests carried the NCCL
// bit: the message said "over NCCL" on a UCX call, and a UCX rank and an NCCL rank could agree.
inline uint64_t sizes_detail(const std::vector<size_t>& sizes) {
  return hash_sizes(sizes) & ((uint64_t(1) << 56) - 1);
}

// Largest message a collective sends from a scratch buffer (reduction rounds) or as one pipeline
// segment: big enough that per-message overhead is negligible, small enough that scratch memory
// stays a few MiB whatever the buffer size.
constexpr size_t kSegmentBytes = size_t(1) << 20;

// Slots: a collective with several phases (reduce-scatter then all-gather, scatter then all-gather)
// gives each phase its own range, so a fast rank's next-phase message can never match a receive of
// the phase a slow rank is still in. Within a phase the index wraps; callers keep far fewer than
// kSlotsPerPhase messages per peer in flight, so a slot is reused only after its previous message
// was matched. Collective::kMaxSlot itself belongs to the communicator's fingerprint exchange.
constexpr uint32_t kSlotsPerPhase = uint32_t(1) << 20;
constexpr uint32_t kPhases = 3;
static_assert(kPhases * kSlotsPerPhase <= Collective::kMaxSlot);
inline uint32_t slot(uint32_t phase, uint64_t index) {
  return phase * kSlotsPerPhase + static_cast<uint32_t>(index % kSlotsPerPhase);
}

inline int ring_mod(int64_t x, int n) { return static_cast<int>(((x % n) + n) % n); }

// ---- Argument checks (InvalidArgument, before begin(): the group stays usable) ---------------------

inline size_t checked_bytes(const Communicator& comm, const char* name, size_t count, ScalarType type) {
  const size_t element = scalar_size(type);
  PRIDE_CHECK_ARG(count <= std::numeric_limits<size_t>::max() / element,
                  "pride rank {}/{}: {}: {} elements of {} overflow size_t", comm.rank(), comm.size(), name,
                  count, scalar_name(type));
  return count * element;
}

inline void check_buffer(const Communicator& comm, const char* name, const void* buf, size_t bytes,
                         const char* what) {
  PRIDE_CHECK_ARG(buf != nullptr || bytes == 0, "pride rank {}/{}: {}: {} is null but {} bytes were asked for",
                  comm.rank(), comm.size(), name, what, bytes);
}

inline void check_root(const Communicator& comm, const char* name, int root) {
  PRIDE_CHECK_ARG(root >= 0 && root < comm.size(), "pride rank {}/{}: {}: root {} is not a rank in [0, {})",
                  comm.rank(), comm.size(), name, root, comm.size());
}

// check_reduce_op(), with the rank and the collective in the message.
inline void check_op(const Communicator& comm, const char* name, ReduceOp op, ScalarType type) {
  try {
    check_reduce_op(op, type);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(fmt::format("pride rank {}/{}: {}: {}", comm.rank(), comm.size(), name, e.what()));
  }
}

// Validates a per-rank size vector and returns its sum.
inline size_t check_sizes(const Communicator& comm, const char* name, const std::vector<size_t>& sizes,
                          const char* what) {
  PRIDE_CHECK_ARG(sizes.size() == static_cast<size_t>(comm.size()),
                  "pride rank {}/{}: {}: {} has {} entries, one per rank ({}) expected", comm.rank(), comm.size(),
                  name, what, sizes.size(), comm.size());
  size_t total = 0;
  for (size_t s : sizes) {
    PRIDE_CHECK_ARG(s <= std::numeric_limits<size_t>::max() - total, "pride rank {}/{}: {}: {} overflow size_t",
                    comm.rank(), comm.size(), name, what);
    total += s;
  }
  return total;
}

}  // namespace pride::standard
