#include <vector>

#include "collectives/bits/kernels.h"
#include "collectives/engine/patterns/tree.h"
#include "collectives/engine/sign/plane_copy.h"
#include "collectives/engine/sign/sign_algorithms.h"

namespace pride {

void sign_tree(Collective& c, const SignPlan& plan, const SignSegment& seg) {
  const int n = c.size(), r = c.rank(), counters = plan.counters, R = plan.result_planes;
  const size_t W = seg.nwords;
  const int parent = patterns::tree_parent(r);
  const int planes = bits::planes_for(patterns::tree_subtree_size(r, n));

  // acc: the count of this subtree's votes, counters × planes over the whole segment.
  std::vector<uint64_t> acc(size_t(counters * planes) * W, 0);
  for (int k = 0; k < counters; ++k) {
    std::copy(seg.votes + size_t(k) * seg.vote_stride, seg.votes + size_t(k) * seg.vote_stride + W,
              acc.data() + size_t(k * planes) * W);
  }
  // Reduce: children's partial counts come up (received concurrently, added in child order).
  std::vector<std::vector<uint64_t>> from_child(2);
  std::vector<RequestPtr> requests;
  int child_planes[2] = {0, 0};
  for (int which = 0; which < 2; ++which) {
    const int child = patterns::tree_child(r, n, which);
    if (child < 0) continue;
    child_planes[which] = bits::planes_for(patterns::tree_subtree_size(child, n));
    from_child[size_t(which)].resize(size_t(counters * child_planes[which]) * W);
    requests.push_back(c.recv(child, seg.slot_base, from_child[size_t(which)].data(),
                              from_child[size_t(which)].size() * 8));
  }
  c.wait_all(requests);
  requests.clear();
  for (int which = 0; which < 2; ++which) {
    if (child_planes[which] == 0) continue;
    for (int k = 0; k < counters; ++k) {
      bits::counter_add(acc.data() + size_t(k * planes) * W, planes,
                        from_child[size_t(which)].data() + size_t(k * child_planes[which]) * W,
                        child_planes[which], W);
    }
  }

  // The root decides; the result (R planes, contiguous) comes down the same tree.
  std::vector<uint64_t> result(size_t(R) * W);
  if (parent < 0) {
    plan.finalize(acc.data(), planes, W, result.data(), W);
  } else {
    RequestPtr down = c.recv(parent, seg.slot_base + 1, result.data(), result.size() * 8);
    RequestPtr up = c.send(parent, seg.slot_base, acc.data(), acc.size() * 8);
    c.wait(up);
    c.wait(down);
  }
  for (int which = 0; which < 2; ++which) {
    const int child = patterns::tree_child(r, n, which);
    if (child >= 0) requests.push_back(c.send(child, seg.slot_base + 1, result.data(), result.size() * 8));
  }
  c.wait_all(requests);
  scatter_planes(result.data(), R, {0, W}, seg.result, seg.result_stride);
}

}  // namespace pride
