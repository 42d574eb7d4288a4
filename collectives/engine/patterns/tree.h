// A binary tree over ranks 0..N-1 rooted at 0 (heap order: children of r are 2r+1 and 2r+2), for the
// latency-optimal reduce-then-broadcast. Depth is floor(log2 N), so a round trip is 2*depth steps.
#pragma once

namespace pride::patterns {

inline int tree_parent(int rank) { return rank == 0 ? -1 : (rank - 1) / 2; }
inline int tree_child(int rank, int n, int which) {  // which: 0 or 1; -1 when absent
  int c = 2 * rank + 1 + which;
  return c < n ? c : -1;
}
// Number of ranks in the subtree rooted at `rank` (the votes its partial count holds).
inline int tree_subtree_size(int rank, int n) {
  if (rank >= n) return 0;
  return 1 + tree_subtree_size(2 * rank + 1, n) + tree_subtree_size(2 * rank + 2, n);
}
inline int tree_depth(int n) {
  int d = 0;
  while ((2 << d) - 1 < n) ++d;  // a full tree of depth d holds 2^(d+1) - 1 ranks
  return d;
}

}  // namespace pride::patterns
