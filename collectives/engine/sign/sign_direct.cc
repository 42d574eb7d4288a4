#include <vector>

#include "collectives/bits/kernels.h"
#include "collectives/engine/patterns/chunks.h"
#include "collectives/engine/sign/plane_copy.h"
#include "collectives/engine/sign/sign_algorithms.h"

namespace pride {

using patterns::chunk;
using patterns::Range;

void sign_direct(Collective& c, const SignPlan& plan, const SignSegment& seg) {
  const int n = c.size(), r = c.rank(), counters = plan.counters, R = plan.result_planes;
  const size_t W = seg.nwords;
  const Range mine = chunk(W, n, r);

  // Phase 1, scatter: rank j owns chunk j; everyone sends it their votes on that chunk. Votes are
  // staged chunk-major (chunk j: `counters` planes at word counters * begin_j) so each shard is one
  // contiguous message even for ternary votes.
  std::vector<uint64_t> shards(size_t(counters) * W);
  for (int j = 0; j < n; ++j) {
    const Range ch = chunk(W, n, j);
    gather_planes(seg.votes, seg.vote_stride, counters, ch, shards.data() + size_t(counters) * ch.begin);
  }
  // inbox[j]: rank j's votes on my chunk (my own are in `shards`).
  const size_t shard_words = size_t(counters) * mine.size;
  std::vector<uint64_t> inbox(size_t(n) * shard_words);
  std::vector<RequestPtr> requests;
  requests.reserve(size_t(2 * n));
  for (int d = 1; d < n; ++d) {
    const int from = (r - d + n) % n;
    requests.push_back(c.recv(from, seg.slot_base, inbox.data() + size_t(from) * shard_words, shard_words * 8));
  }
  for (int d = 1; d < n; ++d) {  // start with the right neighbour so no owner is hit by all at once
    const int to = (r + d) % n;
    const Range ch = chunk(W, n, to);
    requests.push_back(c.send(to, seg.slot_base, shards.data() + size_t(counters) * ch.begin,
                              size_t(counters) * ch.size * 8));
  }
  c.wait_all(requests);
  requests.clear();

  // Vote: count the N planes of my chunk at once (positional popcount), per counter.
  const int planes = bits::planes_for(n);
  std::vector<uint64_t> counts(size_t(counters * planes) * mine.size);
  std::vector<const uint64_t*> ballots(static_cast<size_t>(n));
  for (int k = 0; k < counters; ++k) {
    for (int j = 0; j < n; ++j) {
      ballots[size_t(j)] = j == r ? shards.data() + size_t(counters) * mine.begin + size_t(k) * mine.size
                                  : inbox.data() + size_t(j) * shard_words + size_t(k) * mine.size;
    }
    bits::count_planes(ballots.data(), n, mine.size, counts.data() + size_t(k * planes) * mine.size, planes);
  }

  // Phase 2, gather: every owner sends its result chunk to everyone (chunk-major again).
  std::vector<uint64_t> results(size_t(R) * W);
  plan.finalize(counts.data(), planes, mine.size, results.data() + size_t(R) * mine.begin, mine.size);
  for (int d = 1; d < n; ++d) {
    const int from = (r - d + n) % n;
    const Range ch = chunk(W, n, from);
    requests.push_back(c.recv(from, seg.slot_base + 1, results.data() + size_t(R) * ch.begin, size_t(R) * ch.size * 8));
  }
  for (int d = 1; d < n; ++d) {
    requests.push_back(c.send((r + d) % n, seg.slot_base + 1, results.data() + size_t(R) * mine.begin,
                              size_t(R) * mine.size * 8));
  }
  c.wait_all(requests);
  for (int j = 0; j < n; ++j) {
    const Range ch = chunk(W, n, j);
    scatter_planes(results.data() + size_t(R) * ch.begin, R, ch, seg.result, seg.result_stride);
  }
}

}  // namespace pride
