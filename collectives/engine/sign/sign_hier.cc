#include <algorithm>
#include <vector>

#include "collectives/bits/kernels.h"
#include "collectives/engine/patterns/chunks.h"
#include "collectives/engine/sign/coded_results.h"
#include "collectives/engine/sign/hier_rails_segment.h"
#include "collectives/engine/sign/node_groups.h"
#include "collectives/engine/sign/plane_copy.h"
#include "collectives/engine/sign/sign_algorithms.h"
#include "collectives/engine/sign/sign_scratch.h"

namespace pride {

using patterns::chunk;
using patterns::Range;

namespace {

// Slots of one segment (sign_slots_per_segment(N) >= 4 for N >= 2).
constexpr uint32_t kLocalVotes = 0, kLeaderShards = 1, kLeaderResults = 2, kLocalResult = 3;

// The leaders' result, chunk-major over the M leader chunks (chunk j: R planes of its words at word
// R * begin_j), into the segment's plane-major result.
void scatter_leader_chunks(const uint64_t* results, int R, size_t W, int M, const SignSegment& seg) {
  for (int j = 0; j < M; ++j) {
    const Range ch = chunk(W, M, j);
    scatter_planes(results + size_t(R) * ch.begin, R, ch, seg.result, seg.result_stride);
  }
}

}  // namespace

void sign_hier(Collective& c, const SignPlan& plan, const SignSegment& seg) {
  const NodeGroups nodes = NodeGroups::make(c.node_of_rank(), c.rank());
  // Rails where every node has the same ranks (2 hosts × 2 ranks at 1 Gbit/s: 52–60 ms against the
  // leader's 63–66, docs/performance.md); the leader scheme otherwise.
  if (uniform_nodes(nodes)) {
    if (seg.nwords == 0) return;  // every rank has the same empty segment: nothing to send
    HierRailsSegment rails(c, plan, seg, nodes, 0);
    rails.post_votes();
    rails.count_and_post_counts();
    rails.decide_and_post_results();
    rails.share_part();
    rails.finish();
    return;
  }
  const int me = c.rank(), counters = plan.counters, R = plan.result_planes, M = nodes.num_nodes();
  const int my_node = nodes.my_node, leader = nodes.leader(my_node), L = nodes.local_size(my_node);
  const size_t W = seg.nwords;
  uint64_t* results = sign_scratch(c.workspace(), SignScratch::kHierResults, size_t(R) * W);

  // Phase 1, inside the node: every rank's votes to its leader (shared memory), which counts them.
  // A non-leader then only waits for the node's result.
  if (me != leader) {
    const uint64_t* mine = seg.votes;
    if (counters > 1 && seg.vote_stride != W) {
      uint64_t* staged = sign_scratch(c.workspace(), SignScratch::kHierVotes, size_t(counters) * W);
      gather_planes(seg.votes, seg.vote_stride, counters, {0, W}, staged);
      mine = staged;
    }
    RequestPtr result = c.recv(leader, seg.slot_base + kLocalResult, results, size_t(R) * W * 8);
    RequestPtr votes = c.send(leader, seg.slot_base + kLocalVotes, mine, size_t(counters) * W * 8);
    c.wait(votes);
    c.wait(result);
    scatter_leader_chunks(results, R, W, M, seg);
    return;
  }

  const int local_planes = bits::planes_for(L);
  uint64_t* inbox = sign_scratch(c.workspace(), SignScratch::kHierVotes, size_t(L) * size_t(counters) * W);
  std::vector<RequestPtr> requests;
  const std::vector<int>& locals = nodes.ranks[size_t(my_node)];
  for (int i = 1; i < L; ++i) {
    requests.push_back(c.recv(locals[size_t(i)], seg.slot_base + kLocalVotes, inbox + size_t(i) * counters * W,
                              size_t(counters) * W * 8));
  }
  c.wait_all(requests);
  requests.clear();
  // The node's count: counters × planes_for(L) planes over the segment, counter-major.
  uint64_t* node_count = sign_scratch(c.workspace(), SignScratch::kHierNodeCount, size_t(counters * local_planes) * W);
  std::vector<const uint64_t*> ballots(static_cast<size_t>(L));
  for (int k = 0; k < counters; ++k) {
    ballots[0] = seg.votes + size_t(k) * seg.vote_stride;
    for (int i = 1; i < L; ++i) ballots[size_t(i)] = inbox + size_t(i) * counters * W + size_t(k) * W;
    bits::count_planes(ballots.data(), L, W, node_count + size_t(k * local_planes) * W, local_planes);
  }

  // Phase 2, between nodes: the direct algorithm among the leaders, on counts instead of votes. Leader
  // j owns word chunk j; every leader sends it its node's count there, the owner adds the M counts to
  // the full count of N votes, decides, and sends its result chunk to every leader.
  const int my_index = my_node;  // leaders are indexed by node
  const Range mine = chunk(W, M, my_index);
  const int full_planes = bits::planes_for(c.size());
  auto node_planes = [&](int node) { return counters * bits::planes_for(nodes.local_size(node)); };
  // My count, chunk-major over the leader chunks, so each owner's part is one message.
  uint64_t* staged = sign_scratch(c.workspace(), SignScratch::kHierStaged, size_t(node_planes(my_node)) * W);
  for (int j = 0; j < M; ++j) {
    const Range ch = chunk(W, M, j);
    gather_planes(node_count, W, node_planes(my_node), ch, staged + size_t(node_planes(my_node)) * ch.begin);
  }
  std::vector<size_t> from_offset(static_cast<size_t>(M) + 1, 0);  // inbox of counts on my chunk, per node
  for (int j = 0; j < M; ++j) from_offset[size_t(j) + 1] = from_offset[size_t(j)] + size_t(node_planes(j)) * mine.size;
  uint64_t* counts_in = sign_scratch(c.workspace(), SignScratch::kHierCountsIn, from_offset[size_t(M)]);
  for (int d = 1; d < M; ++d) {
    const int from = (my_index - d + M) % M;
    requests.push_back(c.recv(nodes.leader(from), seg.slot_base + kLeaderShards, counts_in + from_offset[size_t(from)],
                              size_t(node_planes(from)) * mine.size * 8));
  }
  for (int d = 1; d < M; ++d) {
    const int to = (my_index + d) % M;
    const Range ch = chunk(W, M, to);
    requests.push_back(c.send(nodes.leader(to), seg.slot_base + kLeaderShards,
                              staged + size_t(node_planes(my_node)) * ch.begin,
                              size_t(node_planes(my_node)) * ch.size * 8));
  }
  c.wait_all(requests);
  requests.clear();
  uint64_t* total = sign_scratch(c.workspace(), SignScratch::kHierTotal, size_t(counters * full_planes) * mine.size);
  std::fill(total, total + size_t(counters * full_planes) * mine.size, 0);
  for (int j = 0; j < M; ++j) {
    const int planes_j = bits::planes_for(nodes.local_size(j));
    const uint64_t* count_j = j == my_index ? staged + size_t(node_planes(my_node)) * mine.begin
                                            : counts_in + from_offset[size_t(j)];
    for (int k = 0; k < counters; ++k) {
      bits::counter_add(total + size_t(k * full_planes) * mine.size, full_planes,
                        count_j + size_t(k * planes_j) * mine.size, planes_j, mine.size);
    }
  }
  plan.finalize(total, full_planes, mine.size, results + size_t(R) * mine.begin, mine.size);
  // The leaders' all-gather of result chunks: as planes (chunk j's R planes at word R · begin_j, each
  // ch.size words), or coded, one message per chunk, decoded into that place.
  const bool coded = plan.result_coding != ResultCoding::kPlanes;
  HostPlaneOps host(c.workspace());
  uint8_t* coded_chunks = nullptr;
  if (coded) {
    coded_chunks = reinterpret_cast<uint8_t*>(
        sign_scratch(c.workspace(), SignScratch::kHierCoded, (coded_offset(plan, W, M, M) + 7) / 8));
    encode_result(host, plan, results + size_t(R) * mine.begin, mine.size, mine.size,
                  coded_chunks + coded_offset(plan, W, M, my_index));
  }
  // Leader j's chunk as one message: where it lies, and its bytes (plan.result_bytes: R · 8 per word
  // as planes).
  auto chunk_at = [&](int j) -> void* {
    return coded ? static_cast<void*>(coded_chunks + coded_offset(plan, W, M, j))
                 : static_cast<void*>(results + size_t(R) * chunk(W, M, j).begin);
  };
  for (int d = 1; d < M; ++d) {
    const int from = (my_index - d + M) % M;
    requests.push_back(c.recv(nodes.leader(from), seg.slot_base + kLeaderResults, chunk_at(from),
                              plan.result_bytes(chunk(W, M, from).size)));
  }
  for (int d = 1; d < M; ++d) {
    requests.push_back(c.send(nodes.leader((my_index + d) % M), seg.slot_base + kLeaderResults, chunk_at(my_index),
                              plan.result_bytes(mine.size)));
  }
  c.wait_all(requests);
  requests.clear();
  for (int j = 0; j < M && coded; ++j) {
    const Range ch = chunk(W, M, j);
    if (j != my_index) {
      decode_result(host, plan, coded_chunks + coded_offset(plan, W, M, j), ch.size, results + size_t(R) * ch.begin,
                    ch.size);
    }
  }

  // Phase 3, inside the node: the result to the node's other ranks.
  for (int i = 1; i < L; ++i) {
    requests.push_back(c.send(locals[size_t(i)], seg.slot_base + kLocalResult, results, size_t(R) * W * 8));
  }
  scatter_leader_chunks(results, R, W, M, seg);
  c.wait_all(requests);
}

}  // namespace pride
