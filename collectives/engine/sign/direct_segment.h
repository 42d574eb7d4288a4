// The direct (scatter–vote–gather) algorithm split into its three stages, so a driver can run
// several segments as a software pipeline: while one segment's shards or results are on the wire,
// the thread packs the next segment or unpacks the previous one. The planes may live in device memory
// (plane_ops.h); stage 3's writes are then complete only after the PlaneOps settles.
#pragma once

#include <vector>

#include "collectives/engine/sign/sign_algorithms.h"

namespace pride {

class PlaneOps;

// The direct algorithm's layout, shared by every transport that runs it (UCX below, NCCL in
// torch_plugin/nccl_sign_allreduce.cc). Rank j owns word chunk j (patterns::chunk) of the W words.
//
// This rank's votes (`counters` planes, `vote_stride` words apart) chunk-major: chunk j's `counters`
// planes at word counters * begin_j, so that each owner's shard is one contiguous message. A single
// plane already is, and is returned as it is.
const uint64_t* stage_direct_shards(PlaneOps& ops, const uint64_t* votes, size_t vote_stride, int counters, size_t W,
                                    int n, uint32_t instance);
// The owner's count of its chunk over the N ballots: its own shard (in `shards`, as staged above) and
// rank j's at inbox + j * counters * chunk size. Returns counters × planes_for(n) planes of chunk-size
// words, counter-major, as PlaneOps::finalize takes them.
uint64_t* count_direct_chunk(PlaneOps& ops, const uint64_t* shards, const uint64_t* inbox, int counters, size_t W,
                             int n, int rank, uint32_t instance);

class DirectSegment {
 public:
  // `instance` (0 or 1) picks the workspace buffers: two segments in flight together need different ones.
  DirectSegment(Collective& c, PlaneOps& ops, const SignPlan& plan, const SignSegment& seg, uint32_t instance);
  // Stage 1: every owner's shard of this rank's votes goes out; the shards of this rank's chunk are
  // posted to arrive. Returns at once.
  void post_shards();
  // Stage 2: waits for the shards, counts the N planes of this rank's chunk, decides, and sends the
  // result chunk to everyone (posted; returns at once).
  void vote_and_post_results();
  // Stage 3: waits for every owner's result chunk (received into the segment's result planes, or
  // decoded there from trits or packed counts).
  void finish();

 private:
  Collective& c_;
  PlaneOps& ops_;
  const SignPlan& plan_;
  SignSegment seg_;
  uint32_t instance_;
  const uint64_t* shards_ = nullptr;  // this rank's votes, chunk-major (chunk j: `counters` planes)
  uint64_t* inbox_ = nullptr;    // peers' votes on my chunk
  uint8_t* coded_ = nullptr;     // result chunks coded (plan.result_coding), chunk-major bytes
  std::vector<RequestPtr> requests_;
};

}  // namespace pride
