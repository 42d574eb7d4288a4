#include "collectives/engine/sign/hier_rails_segment.h"

#include <algorithm>

#include "collectives/bits/kernels.h"
#include "collectives/bits/packed_counts.h"
#include "collectives/engine/patterns/chunks.h"
#include "collectives/engine/sign/coded_results.h"
#include "collectives/engine/sign/plane_copy.h"
#include "collectives/engine/sign/sign_scratch.h"

namespace pride {

using patterns::chunk;
using patterns::Range;

namespace {
// Slots of one segment: result plane p travels on kRailResults + p between nodes and on
// kLocalResult(R) + p inside the node (2 + 2R <= sign_slots_per_segment(N)).
constexpr uint32_t kLocalVotes = 0, kRailCounts = 1, kRailResults = 2;
constexpr uint32_t kLocalResult(int result_planes) { return kRailResults + uint32_t(result_planes); }
}  // namespace

bool uniform_nodes(const NodeGroups& nodes) {
  for (int k = 0; k < nodes.num_nodes(); ++k) {
    if (nodes.local_size(k) != nodes.local_size(0)) return false;
  }
  return nodes.local_size(0) >= 2;
}

HierRailsSegment::HierRailsSegment(Collective& c, const SignPlan& plan, const SignSegment& seg,
                                   const NodeGroups& nodes, uint32_t instance)
    : c_(c), plan_(plan), seg_(seg), nodes_(nodes), instance_(instance) {
  const std::vector<int>& locals = nodes_.ranks[size_t(nodes_.my_node)];
  M_ = nodes_.num_nodes();
  L_ = int(locals.size());
  l_ = int(std::find(locals.begin(), locals.end(), c_.rank()) - locals.begin());
  local_planes_ = bits::planes_for(L_);
  NP_ = plan_.counters * local_planes_;
  part_ = chunk(seg_.nwords, L_, l_);
  piece_ = chunk(part_.size, M_, nodes_.my_node);
}

void HierRailsSegment::post_votes() {
  const int C = plan_.counters;
  const size_t W = seg_.nwords;
  const std::vector<int>& locals = nodes_.ranks[size_t(nodes_.my_node)];
  Workspace& ws = c_.workspace();
  // My votes on every part, part-major: one message per local peer. A single plane (binary votes) is
  // that already; ternary votes' two planes are interleaved part by part.
  const uint64_t* staged_votes = seg_.votes;
  if (C > 1) {
    uint64_t* staged = sign_scratch(ws, SignScratch::kHierVotes, size_t(C) * W, instance_);
    for (int i = 0; i < L_; ++i) {
      const Range pi = chunk(W, L_, i);
      gather_planes(seg_.votes, seg_.vote_stride, C, pi, staged + size_t(C) * pi.begin);
    }
    staged_votes = staged;
  }
  own_votes_ = staged_votes + size_t(C) * part_.begin;  // counted where it is, not copied into the inbox
  inbox_ = sign_scratch(ws, SignScratch::kHierCountsIn, size_t(L_) * C * part_.size, instance_);
  for (int i = 0; i < L_; ++i) {
    if (i == l_) continue;
    recvs_.push_back(c_.recv(locals[size_t(i)], seg_.slot_base + kLocalVotes, inbox_ + size_t(i) * C * part_.size,
                             size_t(C) * part_.size * 8));
  }
  for (int d = 1; d < L_; ++d) {
    const int to = (l_ + d) % L_;
    const Range pt = chunk(W, L_, to);
    sends_.push_back(c_.send(locals[size_t(to)], seg_.slot_base + kLocalVotes, staged_votes + size_t(C) * pt.begin,
                             size_t(C) * pt.size * 8));
  }
}

void HierRailsSegment::count_and_post_counts() {
  const int C = plan_.counters, me = nodes_.my_node;
  c_.wait_all(recvs_);
  recvs_.clear();
  Workspace& ws = c_.workspace();
  // The node's count on my part, counter-major, then piece-major over the M rail peers.
  uint64_t* node_count = sign_scratch(ws, SignScratch::kHierNodeCount, size_t(NP_) * part_.size, instance_);
  std::vector<const uint64_t*> ballots(static_cast<size_t>(L_));
  for (int k = 0; k < C; ++k) {
    for (int i = 0; i < L_; ++i) {
      ballots[size_t(i)] = (i == l_ ? own_votes_ : inbox_ + size_t(i) * C * part_.size) + size_t(k) * part_.size;
    }
    bits::count_planes(ballots.data(), L_, part_.size, node_count + size_t(k * local_planes_) * part_.size,
                       local_planes_);
  }
  staged_ = sign_scratch(ws, SignScratch::kHierStaged, size_t(NP_) * part_.size, instance_);
  for (int j = 0; j < M_; ++j) {
    const Range pj = chunk(part_.size, M_, j);
    gather_planes(node_count, part_.size, NP_, pj, staged_ + size_t(NP_) * pj.begin);
  }
  // Rail l: every node's count on my piece arrives; each rail peer gets mine on its piece.
  uint64_t* counts_in = sign_scratch(ws, SignScratch::kHierTotal, size_t(M_) * NP_ * piece_.size, instance_);
  if (plan_.packed_node_counts) {
    post_packed_counts();
    return;
  }
  for (int d = 1; d < M_; ++d) {
    const int from = (me - d + M_) % M_;
    recvs_.push_back(c_.recv(rail_rank(from), seg_.slot_base + kRailCounts,
                             counts_in + size_t(from) * NP_ * piece_.size, size_t(NP_) * piece_.size * 8));
  }
  for (int d = 1; d < M_; ++d) {
    const int to = (me + d) % M_;
    const Range pt = chunk(part_.size, M_, to);
    sends_.push_back(c_.send(rail_rank(to), seg_.slot_base + kRailCounts, staged_ + size_t(NP_) * pt.begin,
                             size_t(NP_) * pt.size * 8));
  }
}

// The node counts in base L + 1 (plan.packed_node_counts): each counter of a piece is one run of limbs,
// the C runs of a piece back to back, the pieces one after another in node order; what arrives for my
// piece, one such block per rail peer.
size_t HierRailsSegment::packed_piece_bytes(size_t words) const {
  return size_t(plan_.counters) * bits::counts::bytes_for_words(node_code_, words);
}

void HierRailsSegment::post_packed_counts() {
  const int C = plan_.counters, me = nodes_.my_node;
  Workspace& ws = c_.workspace();
  node_code_ = bits::counts::make_code(uint32_t(L_) + 1);
  std::vector<size_t> offset(size_t(M_) + 1);
  for (int j = 0; j <= M_; ++j) {
    offset[size_t(j)] =
        patterns::chunk_offset(part_.size, M_, j, [this](size_t words) { return packed_piece_bytes(words); });
  }
  uint8_t* out = reinterpret_cast<uint8_t*>(
      sign_scratch(ws, SignScratch::kHierCountsCoded, (offset[size_t(M_)] + 7) / 8, instance_));
  const size_t in_bytes = packed_piece_bytes(piece_.size);
  packed_in_ = reinterpret_cast<uint8_t*>(
      sign_scratch(ws, SignScratch::kHierCountsCodedIn, (size_t(M_) * in_bytes + 7) / 8, instance_));
  for (int j = 0; j < M_; ++j) {
    if (j == me) continue;  // my own piece is counted where it was staged
    const Range pj = chunk(part_.size, M_, j);
    const size_t run = bits::counts::bytes_for_words(node_code_, pj.size);
    for (int k = 0; k < C; ++k) {
      bits::encode_counts(node_code_, staged_ + size_t(NP_) * pj.begin + size_t(k * local_planes_) * pj.size, pj.size,
                          pj.size, reinterpret_cast<uint32_t*>(out + offset[size_t(j)] + size_t(k) * run));
    }
  }
  for (int d = 1; d < M_; ++d) {
    const int from = (me - d + M_) % M_;
    recvs_.push_back(
        c_.recv(rail_rank(from), seg_.slot_base + kRailCounts, packed_in_ + size_t(from) * in_bytes, in_bytes));
  }
  for (int d = 1; d < M_; ++d) {
    const int to = (me + d) % M_;
    sends_.push_back(c_.send(rail_rank(to), seg_.slot_base + kRailCounts, out + offset[size_t(to)],
                             offset[size_t(to) + 1] - offset[size_t(to)]));
  }
}

void HierRailsSegment::decide_and_post_results() {
  const int C = plan_.counters, R = plan_.result_planes, me = nodes_.my_node;
  const int full_planes = bits::planes_for(c_.size());
  c_.wait_all(recvs_);
  recvs_.clear();
  Workspace& ws = c_.workspace();
  uint64_t* counts_in = sign_scratch(ws, SignScratch::kHierTotal, size_t(M_) * NP_ * piece_.size, instance_);
  if (plan_.packed_node_counts) {  // the rail's node counts on my piece back into planes, counter-major
    const size_t in_bytes = packed_piece_bytes(piece_.size);
    const size_t run = bits::counts::bytes_for_words(node_code_, piece_.size);
    for (int j = 0; j < M_; ++j) {
      if (j == me) continue;
      for (int k = 0; k < C; ++k) {
        const auto* in = reinterpret_cast<const uint32_t*>(packed_in_ + size_t(j) * in_bytes + size_t(k) * run);
        uint64_t* out = counts_in + size_t(j) * NP_ * piece_.size + size_t(k * local_planes_) * piece_.size;
        bits::decode_counts(node_code_, in, piece_.size, out, piece_.size);
      }
    }
  }
  uint64_t* total = sign_scratch(ws, SignScratch::kHierSum, size_t(C * full_planes) * piece_.size, instance_);
  std::fill(total, total + size_t(C * full_planes) * piece_.size, 0);
  for (int j = 0; j < M_; ++j) {
    // My node's count on my piece is added where it was staged; the rail's arrived in counts_in.
    const uint64_t* node_j = j == me ? staged_ + size_t(NP_) * piece_.begin : counts_in + size_t(j) * NP_ * piece_.size;
    for (int k = 0; k < C; ++k) {
      bits::counter_add(total + size_t(k * full_planes) * piece_.size, full_planes,
                        node_j + size_t(k * local_planes_) * piece_.size, local_planes_, piece_.size);
    }
  }
  // The result goes straight into the segment's result planes: my piece is decided there, and each
  // plane of a piece or part travels as its own message into its place, so nothing is scattered into
  // planes at the end. Between nodes, a coded result (trits, packed counts) is one message per piece
  // instead, decoded into its place in share_part().
  const size_t stride = seg_.result_stride;
  uint64_t* my_part = seg_.result + part_.begin;
  plan_.finalize(total, full_planes, piece_.size, my_part + piece_.begin, stride);
  if (plan_.result_coding != ResultCoding::kPlanes) {
    const size_t total_bytes = coded_offset(plan_, part_.size, M_, M_);
    coded_ =
        reinterpret_cast<uint8_t*>(sign_scratch(ws, SignScratch::kHierCoded, (total_bytes + 7) / 8, instance_));
    HostPlaneOps host(ws);
    encode_result(host, plan_, my_part + piece_.begin, stride, piece_.size,
                  coded_ + coded_offset(plan_, part_.size, M_, me));
    for (int d = 1; d < M_; ++d) {
      const int from = (me - d + M_) % M_;
      recvs_.push_back(c_.recv(rail_rank(from), seg_.slot_base + kRailResults,
                               coded_ + coded_offset(plan_, part_.size, M_, from),
                               plan_.result_bytes(chunk(part_.size, M_, from).size)));
    }
    for (int d = 1; d < M_; ++d) {
      sends_.push_back(c_.send(rail_rank((me + d) % M_), seg_.slot_base + kRailResults,
                               coded_ + coded_offset(plan_, part_.size, M_, me), plan_.result_bytes(piece_.size)));
    }
    return;
  }
  for (int d = 1; d < M_; ++d) {
    const int from = (me - d + M_) % M_;
    const Range pf = chunk(part_.size, M_, from);
    for (int p = 0; p < R; ++p) {
      recvs_.push_back(c_.recv(rail_rank(from), seg_.slot_base + kRailResults + uint32_t(p),
                               my_part + size_t(p) * stride + pf.begin, pf.size * 8));
    }
  }
  for (int d = 1; d < M_; ++d) {
    for (int p = 0; p < R; ++p) {
      sends_.push_back(c_.send(rail_rank((me + d) % M_), seg_.slot_base + kRailResults + uint32_t(p),
                               my_part + size_t(p) * stride + piece_.begin, piece_.size * 8));
    }
  }
}

void HierRailsSegment::share_part() {
  const int R = plan_.result_planes;
  const size_t stride = seg_.result_stride;
  const std::vector<int>& locals = nodes_.ranks[size_t(nodes_.my_node)];
  c_.wait_all(recvs_);
  recvs_.clear();
  if (coded_ != nullptr) {  // the rail's result pieces, coded, into my part's planes
    HostPlaneOps host(c_.workspace());
    for (int j = 0; j < M_; ++j) {
      if (j == nodes_.my_node) continue;
      const Range pj = chunk(part_.size, M_, j);
      decode_result(host, plan_, coded_ + coded_offset(plan_, part_.size, M_, j), pj.size,
                    seg_.result + part_.begin + pj.begin, stride);
    }
  }
  for (int i = 0; i < L_; ++i) {
    if (i == l_) continue;
    const Range pi = chunk(seg_.nwords, L_, i);
    for (int p = 0; p < R; ++p) {
      recvs_.push_back(c_.recv(locals[size_t(i)], seg_.slot_base + kLocalResult(R) + uint32_t(p),
                               seg_.result + size_t(p) * stride + pi.begin, pi.size * 8));
    }
  }
  for (int d = 1; d < L_; ++d) {
    for (int p = 0; p < R; ++p) {
      sends_.push_back(c_.send(locals[size_t((l_ + d) % L_)], seg_.slot_base + kLocalResult(R) + uint32_t(p),
                               seg_.result + size_t(p) * stride + part_.begin, part_.size * 8));
    }
  }
}

void HierRailsSegment::finish() {
  c_.wait_all(recvs_);
  recvs_.clear();
  c_.wait_all(sends_);  // this instance's buffers are reused three segments on
  sends_.clear();
}

}  // namespace pride
