#include <vector>

#include "collectives/bits/kernels.h"
#include "collectives/engine/patterns/tree.h"
#include "collectives/engine/sign/plane_copy.h"
#include "collectives/engine/sign/sign_algorithms.h"
#include "collectives/engine/sign/sign_scratch.h"

namespace pride {

void sign_tree(Collective& c, const SignPlan& plan, const SignSegment& seg) {
  const int n = c.size(), r = c.rank(), counters = plan.counters, R = plan.result_planes;
  const size_t W = seg.nwords;
  const int parent = patterns::tree_parent(r);
  const int planes = bits::planes_for(patterns::tree_subtree_size(r, n));

  // acc: the count of this subtree's votes, counters × planes over the whole segment.
  const size_t acc_words = size_t(counters * planes) * W;
  uint64_t* acc = sign_scratch(c.workspace(), SignScratch::kTreeAcc, acc_words);
  for (int k = 0; k < counters; ++k) {  // a count of one vote: the vote plane, higher planes zero
    uint64_t* count = acc + size_t(k * planes) * W;
    std::copy(seg.votes + size_t(k) * seg.vote_stride, seg.votes + size_t(k) * seg.vote_stride + W, count);
    std::fill(count + W, count + size_t(planes) * W, 0);
  }
  // Reduce: children's partial counts come up (received concurrently, added in child order).
  uint64_t* from_child[2] = {nullptr, nullptr};
  std::vector<RequestPtr> requests;
  int child_planes[2] = {0, 0};
  for (int which = 0; which < 2; ++which) {
    const int child = patterns::tree_child(r, n, which);
    if (child < 0) continue;
    child_planes[which] = bits::planes_for(patterns::tree_subtree_size(child, n));
    const size_t words = size_t(counters * child_planes[which]) * W;
    const SignScratch key = which == 0 ? SignScratch::kTreeFromChild0 : SignScratch::kTreeFromChild1;
    from_child[which] = sign_scratch(c.workspace(), key, words);
    requests.push_back(c.recv(child, seg.slot_base, from_child[which], words * 8));
  }
  c.wait_all(requests);
  requests.clear();
  for (int which = 0; which < 2; ++which) {
    if (child_planes[which] == 0) continue;
    for (int k = 0; k < counters; ++k) {
      bits::counter_add(acc + size_t(k * planes) * W, planes, from_child[which] + size_t(k * child_planes[which]) * W,
                        child_planes[which], W);
    }
  }

  // The root decides; the result (R planes, contiguous) comes down the same tree.
  const size_t result_words = size_t(R) * W;
  uint64_t* result = sign_scratch(c.workspace(), SignScratch::kTreeResult, result_words);
  if (parent < 0) {
    plan.finalize(acc, planes, W, result, W);
  } else {
    RequestPtr down = c.recv(parent, seg.slot_base + 1, result, result_words * 8);
    RequestPtr up = c.send(parent, seg.slot_base, acc, acc_words * 8);
    c.wait(up);
    c.wait(down);
  }
  for (int which = 0; which < 2; ++which) {
    const int child = patterns::tree_child(r, n, which);
    if (child >= 0) requests.push_back(c.send(child, seg.slot_base + 1, result, result_words * 8));
  }
  c.wait_all(requests);
  scatter_planes(result, R, {0, W}, seg.result, seg.result_stride);
}

}  // namespace pride
