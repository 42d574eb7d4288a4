#include <vector>

#include "collectives/bits/kernels.h"
#include "collectives/engine/sign/plane_copy.h"
#include "collectives/engine/sign/sign_algorithms.h"
#include "collectives/engine/sign/sign_scratch.h"

namespace pride {

void sign_allgather(Collective& c, const SignPlan& plan, const SignSegment& seg) {
  const int n = c.size(), r = c.rank(), counters = plan.counters;
  const size_t W = seg.nwords, block = size_t(counters) * W;

  // Everyone's votes everywhere: block j of `all` holds rank j's planes (counter-major).
  uint64_t* all = sign_scratch(c.workspace(), SignScratch::kAllgatherAll, size_t(n) * block);
  gather_planes(seg.votes, seg.vote_stride, counters, {0, W}, all + size_t(r) * block);
  std::vector<RequestPtr> requests;
  for (int d = 1; d < n; ++d) {
    const int from = (r - d + n) % n;
    requests.push_back(c.recv(from, seg.slot_base, all + size_t(from) * block, block * 8));
  }
  for (int d = 1; d < n; ++d) {
    requests.push_back(c.send((r + d) % n, seg.slot_base, all + size_t(r) * block, block * 8));
  }
  c.wait_all(requests);

  const int planes = bits::planes_for(n);
  uint64_t* counts = sign_scratch(c.workspace(), SignScratch::kAllgatherCounts, size_t(counters * planes) * W);
  std::vector<const uint64_t*> ballots(static_cast<size_t>(n));
  for (int k = 0; k < counters; ++k) {
    for (int j = 0; j < n; ++j) ballots[size_t(j)] = all + size_t(j) * block + size_t(k) * W;
    bits::count_planes(ballots.data(), n, W, counts + size_t(k * planes) * W, planes);
  }
  plan.finalize(counts, planes, W, seg.result, seg.result_stride);
}

}  // namespace pride
