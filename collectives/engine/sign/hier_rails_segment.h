// The hierarchical algorithm's rails scheme (sign_algorithms.h, sign_hier) split into its stages, so a
// driver can run segments as a software pipeline, as DirectSegment does for the direct algorithm:
// while one segment's counts or results cross the slow inter-node link, the thread packs the next
// segment or unpacks the previous one. Run one after the other, the stages are the algorithm itself.
//
// Every node has the same L ranks; local rank l of every node carries part l of the segment's words:
//   1. inside the node, a reduce-scatter of the votes: local rank l receives its node's votes on part l
//      and counts them (shared memory);
//   2. between nodes, rail l (local rank l of each node) runs the direct algorithm on those counts:
//      node j's rank owns piece j of part l, adds the M nodes' counts, decides, sends its result piece
//      to the rail;
//   3. inside the node, an all-gather of the L parts of the result.
#pragma once

#include <vector>

#include "collectives/engine/patterns/chunks.h"
#include "collectives/engine/sign/node_groups.h"
#include "collectives/engine/sign/sign_algorithms.h"

namespace pride {

// True where every node has the same number of ranks, at least two: the rails scheme applies.
bool uniform_nodes(const NodeGroups& nodes);

class HierRailsSegment {
 public:
  // `instance` (0, 1 or 2) picks the workspace buffers: segments in flight together need different ones.
  HierRailsSegment(Collective& c, const SignPlan& plan, const SignSegment& seg, const NodeGroups& nodes,
                   uint32_t instance);
  // Stage 1: this rank's votes on part i go to local rank i; the node's votes on this rank's part are
  // posted to arrive. Returns at once.
  void post_votes();
  // Stage 2: waits for the node's votes, counts them, and sends each rail peer its piece of the count.
  void count_and_post_counts();
  // Stage 3: waits for the rail's counts on this rank's piece, adds them to the count of all N votes,
  // decides, and sends the result piece to the rail.
  void decide_and_post_results();
  // Stage 4: waits for the rail's result pieces (decoding them where they travel coded) and sends the
  // node's other ranks this rank's part.
  void share_part();
  // Stage 5: waits for the node's other parts (received into the segment's result planes) and for
  // every send of the segment.
  void finish();

 private:
  int rail_rank(int node) const { return nodes_.ranks[size_t(node)][size_t(l_)]; }
  // Stage 2's exchange with the node counts packed in base L + 1 (plan.packed_node_counts).
  void post_packed_counts();
  size_t packed_piece_bytes(size_t words) const;  // a piece's C runs of limbs

  Collective& c_;
  const SignPlan& plan_;
  SignSegment seg_;
  const NodeGroups& nodes_;
  uint32_t instance_;
  int M_, L_, l_;            // nodes, ranks per node, this rank's local index
  int local_planes_, NP_;    // planes of a count of L votes; of one node's count (all counters)
  patterns::Range part_{};   // this rank's part of the segment's words
  patterns::Range piece_{};  // this node's piece of the part, which this rank owns on its rail
  const uint64_t* own_votes_ = nullptr;  // my votes on my part (`counters` planes of the part)
  uint64_t* inbox_ = nullptr;    // the local peers' votes on my part, local-rank-major (my slot unused)
  uint64_t* staged_ = nullptr;   // the node's count on my part, piece-major (one message per rail peer)
  uint8_t* coded_ = nullptr;     // the rail's result pieces coded (plan.result_coding), piece-major bytes
  bits::counts::CountCode node_code_{};  // base L + 1, where the node counts travel packed
  uint8_t* packed_in_ = nullptr;  // the rail's packed node counts on my piece, node-major
  // A stage waits for what it receives only. A send completes when the peer has taken the data, which
  // over shared memory's rendezvous means when the peer next runs; on a host whose ranks outnumber its
  // cores that can be a scheduler slice away. The sends are awaited in finish(), before this
  // instance's buffers can be reused.
  std::vector<RequestPtr> recvs_, sends_;
};

}  // namespace pride
