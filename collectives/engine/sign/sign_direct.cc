#include <vector>

#include "collectives/bits/kernels.h"
#include "collectives/engine/patterns/chunks.h"
#include "collectives/engine/sign/coded_results.h"
#include "collectives/engine/sign/direct_segment.h"
#include "collectives/engine/sign/plane_ops.h"

namespace pride {

using patterns::chunk;
using patterns::Range;

const uint64_t* stage_direct_shards(PlaneOps& ops, const uint64_t* votes, size_t vote_stride, int counters, size_t W,
                                    int n, uint32_t instance) {
  if (counters == 1) return votes;
  uint64_t* staged = ops.scratch(SignScratch::kDirectShards, size_t(counters) * W, instance);
  for (int j = 0; j < n; ++j) {
    const Range ch = chunk(W, n, j);
    ops.gather(votes, vote_stride, counters, ch, staged + size_t(counters) * ch.begin);
  }
  return staged;
}

uint64_t* count_direct_chunk(PlaneOps& ops, const uint64_t* shards, const uint64_t* inbox, int counters, size_t W,
                             int n, int rank, uint32_t instance) {
  const Range mine = chunk(W, n, rank);
  const size_t shard_words = size_t(counters) * mine.size;
  const int planes = bits::planes_for(n);
  uint64_t* counts = ops.scratch(SignScratch::kDirectCounts, size_t(counters * planes) * mine.size, instance);
  std::vector<const uint64_t*> ballots(static_cast<size_t>(n));
  for (int k = 0; k < counters; ++k) {
    for (int j = 0; j < n; ++j) {
      ballots[size_t(j)] = j == rank ? shards + size_t(counters) * mine.begin + size_t(k) * mine.size
                                     : inbox + size_t(j) * shard_words + size_t(k) * mine.size;
    }
    ops.count(ballots.data(), n, mine.size, counts + size_t(k * planes) * mine.size, planes);
  }
  return counts;
}

DirectSegment::DirectSegment(Collective& c, PlaneOps& ops, const SignPlan& plan, const SignSegment& seg,
                             uint32_t instance)
    : c_(c), ops_(ops), plan_(plan), seg_(seg), instance_(instance) {}

void DirectSegment::post_shards() {
  const int n = c_.size(), r = c_.rank(), counters = plan_.counters;
  const size_t W = seg_.nwords;
  const Range mine = chunk(W, n, r);
  const MemoryType memory = ops_.memory();
  // Rank j owns chunk j; everyone sends it their votes on that chunk.
  shards_ = stage_direct_shards(ops_, seg_.votes, seg_.vote_stride, counters, W, n, instance_);
  const size_t shard_words = size_t(counters) * mine.size;
  inbox_ = ops_.scratch(SignScratch::kDirectInbox, size_t(n) * shard_words, instance_);
  ops_.settle();  // the shards are written, and the last reader of this instance's inbox is done
  requests_.clear();
  for (int d = 1; d < n; ++d) {
    const int from = (r - d + n) % n;
    requests_.push_back(
        c_.recv(from, seg_.slot_base, inbox_ + size_t(from) * shard_words, shard_words * 8, memory));
  }
  for (int d = 1; d < n; ++d) {  // start with the right neighbour so no owner is hit by all at once
    const int to = (r + d) % n;
    const Range ch = chunk(W, n, to);
    requests_.push_back(c_.send(to, seg_.slot_base, shards_ + size_t(counters) * ch.begin,
                                size_t(counters) * ch.size * 8, memory));
  }
}

// The results go straight into the caller's result planes: the owner decides its chunk there, each
// plane of a chunk travels as its own message (slot_base + 1 + p, R ≤ planes_for(2N): within
// sign_slots_per_segment(N)) and lands where it belongs, so no chunk-major copy is
// scattered into planes afterwards (4 MiB of copying per call at 2^24 elements and N = 4). A coded
// result (trits, packed counts) is one message per chunk, decoded into the planes.
void DirectSegment::vote_and_post_results() {
  const int n = c_.size(), r = c_.rank(), counters = plan_.counters, R = plan_.result_planes;
  const size_t W = seg_.nwords, stride = seg_.result_stride;
  const Range mine = chunk(W, n, r);
  c_.wait_all(requests_);
  requests_.clear();

  // Count the N planes of my chunk at once (positional popcount), per counter.
  const int planes = bits::planes_for(n);
  const uint64_t* counts = count_direct_chunk(ops_, shards_, inbox_, counters, W, n, r, instance_);
  ops_.finalize(plan_, counts, planes, mine.size, seg_.result + mine.begin, stride);
  if (plan_.result_coding != ResultCoding::kPlanes) {
    const size_t total = coded_offset(plan_, W, n, n);
    coded_ = reinterpret_cast<uint8_t*>(ops_.scratch(SignScratch::kDirectCoded, (total + 7) / 8, instance_));
    encode_result(ops_, plan_, seg_.result + mine.begin, stride, mine.size, coded_ + coded_offset(plan_, W, n, r));
  }
  ops_.settle();  // my result chunk is decided (and encoded): it may go on the wire
  const MemoryType memory = ops_.memory();
  // Owner j's result chunk on the wire: its coded bytes as one message, or each of its R planes as
  // one, from and into their place in the result planes.
  auto for_each_message = [&](int j, auto&& post) {
    const Range ch = chunk(W, n, j);
    const uint32_t slot = seg_.slot_base + 1;
    if (coded_ != nullptr) {
      post(slot, coded_ + coded_offset(plan_, W, n, j), plan_.result_bytes(ch.size));
      return;
    }
    for (int p = 0; p < R; ++p) post(slot + uint32_t(p), seg_.result + size_t(p) * stride + ch.begin, ch.size * 8);
  };
  for (int d = 1; d < n; ++d) {
    const int from = (r - d + n) % n;
    for_each_message(from, [&](uint32_t slot, void* buf, size_t bytes) {
      requests_.push_back(c_.recv(from, slot, buf, bytes, memory));
    });
  }
  for (int d = 1; d < n; ++d) {
    const int to = (r + d) % n;
    for_each_message(r, [&](uint32_t slot, void* buf, size_t bytes) {
      requests_.push_back(c_.send(to, slot, buf, bytes, memory));
    });
  }
}

void DirectSegment::finish() {
  const int n = c_.size();
  c_.wait_all(requests_);
  requests_.clear();
  for (int j = 0; j < n && coded_ != nullptr; ++j) {  // the other owners' chunks back into planes
    const Range ch = chunk(seg_.nwords, n, j);
    if (j == c_.rank()) continue;
    decode_result(ops_, plan_, coded_ + coded_offset(plan_, seg_.nwords, n, j), ch.size, seg_.result + ch.begin,
                  seg_.result_stride);
  }
}

void sign_direct(Collective& c, const SignPlan& plan, const SignSegment& seg) {
  HostPlaneOps host(c.workspace());
  sign_direct(c, host, plan, seg);
}

void sign_direct(Collective& c, PlaneOps& ops, const SignPlan& plan, const SignSegment& seg) {
  DirectSegment d(c, ops, plan, seg, 0);
  d.post_shards();
  d.vote_and_post_results();
  d.finish();
  ops.finish_results();
}

}  // namespace pride
