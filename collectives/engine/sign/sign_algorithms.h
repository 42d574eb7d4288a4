// The sign-allreduce algorithms (SPEC §4), one file each. Each runs one segment of the packed tensor
// through the communicator; all produce the identical result planes.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "backend/communicator.h"
#include "collectives/bits/kernels.h"
#include "collectives/engine/sign/sign_plan.h"

namespace pride {

// One segment: plan.counters vote planes in (plane c at votes + c * vote_stride), plan.result_planes
// result planes out (plane p at result + p * result_stride), nwords 64-bit words each. Messages use
// slots [slot_base, slot_base + sign_slots_per_segment(N)).
struct SignSegment {
  const uint64_t* votes = nullptr;
  size_t vote_stride = 0;
  uint64_t* result = nullptr;
  size_t result_stride = 0;
  size_t nwords = 0;
  uint32_t slot_base = 0;
};

// 2N, and at least what messages sent one result plane at a time need (hier's rails: 2 + 2R slots,
// R ≤ planes_for(2N) result planes).
inline uint32_t sign_slots_per_segment(int nranks) {
  return uint32_t(std::max(2 * nranks, 2 + 2 * bits::planes_for(2 * nranks)));
}

// Ring: reduce-scatter where the partial count of k votes travels as planes_for(k) planes, then a
// ring all-gather of the result. Bandwidth-friendly, 2(N−1) latency steps.
void sign_ring(Collective& c, const SignPlan& plan, const SignSegment& seg);
// Binary tree: counters reduced up to rank 0, the result broadcast down. 2·log2(N) steps: small tensors.
void sign_tree(Collective& c, const SignPlan& plan, const SignSegment& seg);
// Direct (scatter–vote–gather): 1-bit shards to their owners, the owner counts N planes with a
// positional popcount, then every owner sends its result to everyone. Bandwidth-optimal, 2 steps.
void sign_direct(Collective& c, const SignPlan& plan, const SignSegment& seg);
// The same over planes that `ops` keeps (plane_ops.h), e.g. in GPU memory; the segment's pointers are in
// that memory, and the result is complete when this returns.
class PlaneOps;
void sign_direct(Collective& c, PlaneOps& ops, const SignPlan& plan, const SignSegment& seg);
// Baseline of the paper's code and signSGD-MV: every rank's votes to every rank, counted locally.
void sign_allgather(Collective& c, const SignPlan& plan, const SignSegment& seg);
// Hierarchical (SPEC §4): between nodes only counts and the result travel, once per node. Where every
// node has the same L ≥ 2 ranks, rails: the node's ranks reduce-scatter their votes (local rank l
// counts the node's votes on part l of the segment), local rank l of every node runs the direct
// algorithm on those counts with its peers, and the node's ranks all-gather the parts of the result.
// Otherwise the leader scheme: each node's ranks send their votes to its leader (its first rank), which
// counts them; the leaders run the direct algorithm on those counts; each leader sends the result to
// its node. Both send the same bytes per node; rails spread them, and the counting, over the node's ranks.
void sign_hier(Collective& c, const SignPlan& plan, const SignSegment& seg);

}  // namespace pride
