#include <vector>

#include "collectives/bits/kernels.h"
#include "collectives/engine/patterns/ring.h"
#include "collectives/engine/sign/plane_copy.h"
#include "collectives/engine/sign/sign_algorithms.h"
#include "collectives/engine/sign/sign_scratch.h"

namespace pride {

using patterns::chunk;
using patterns::Range;

void sign_ring(Collective& c, const SignPlan& plan, const SignSegment& seg) {
  const int n = c.size(), r = c.rank(), counters = plan.counters, R = plan.result_planes;
  const size_t W = seg.nwords;
  const int right = patterns::ring_right(r, n), left = patterns::ring_left(r, n);
  const size_t max_chunk = W / size_t(n) + 1;
  const int full_planes = bits::planes_for(n);

  // `partial` holds the running count this rank forwards next: counters × planes_for(votes) planes
  // over one chunk, counter-major. It starts as this rank's own votes (a count of one vote is the
  // vote plane itself) and grows by one vote and at most one plane per step.
  const size_t partial_words = size_t(counters * full_planes) * max_chunk;
  uint64_t* partial = sign_scratch(c.workspace(), SignScratch::kRingPartial, partial_words);
  uint64_t* incoming = sign_scratch(c.workspace(), SignScratch::kRingIncoming, partial_words);
  Range first = chunk(W, n, patterns::ring_rs_send_chunk(r, n, 0));
  gather_planes(seg.votes, seg.vote_stride, counters, first, partial);
  int partial_votes = 1;

  for (int step = 0; step < n - 1; ++step) {
    const Range out = chunk(W, n, patterns::ring_rs_send_chunk(r, n, step));
    const Range in = chunk(W, n, patterns::ring_rs_recv_chunk(r, n, step));
    const int in_votes = step + 1;  // the left neighbour's partial: its own vote and step before it
    const int in_planes = bits::planes_for(in_votes);
    c.sendrecv(right, partial, size_t(counters * bits::planes_for(partial_votes)) * out.size * 8, left, incoming,
               size_t(counters * in_planes) * in.size * 8, seg.slot_base + uint32_t(step));
    // Add this rank's vote to the received partial; it may need one more plane.
    const int grown_planes = bits::planes_for(in_votes + 1);
    for (int k = 0; k < counters; ++k) {
      uint64_t* dst = partial + size_t(k * grown_planes) * in.size;
      const uint64_t* src = incoming + size_t(k * in_planes) * in.size;
      std::copy(src, src + size_t(in_planes) * in.size, dst);
      std::fill(dst + size_t(in_planes) * in.size, dst + size_t(grown_planes) * in.size, 0);
      bits::counter_add_plane(dst, grown_planes, in.size, seg.votes + size_t(k) * seg.vote_stride + in.begin);
    }
    partial_votes = in_votes + 1;
  }

  // `partial` now counts all N votes of the chunk this rank owns. The result travels chunk-major
  // (chunk i: R planes of its words at word R * begin_i) so each all-gather message is contiguous.
  uint64_t* results = sign_scratch(c.workspace(), SignScratch::kRingResults, size_t(R) * W);
  const int owned = patterns::ring_owned_chunk(r, n);
  const Range mine = chunk(W, n, owned);
  plan.finalize(partial, full_planes, mine.size, results + size_t(R) * mine.begin, mine.size);

  for (int step = 0; step < n - 1; ++step) {
    const Range out = chunk(W, n, patterns::ring_ag_send_chunk(r, n, step));
    const Range in = chunk(W, n, patterns::ring_ag_recv_chunk(r, n, step));
    c.sendrecv(right, results + size_t(R) * out.begin, size_t(R) * out.size * 8, left,
               results + size_t(R) * in.begin, size_t(R) * in.size * 8,
               seg.slot_base + uint32_t(n + step));
  }
  for (int i = 0; i < n; ++i) {
    const Range ch = chunk(W, n, i);
    scatter_planes(results + size_t(R) * ch.begin, R, ch, seg.result, seg.result_stride);
  }
}

}  // namespace pride
