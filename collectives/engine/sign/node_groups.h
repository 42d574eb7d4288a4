// The ranks of a group by node (host), as the communicator learned them from the host names: what the
// hierarchical sign-allreduce is built on. Node k's ranks in rank order; its leader is the first.
#pragma once

#include <cstddef>
#include <vector>

namespace pride {

struct NodeGroups {
  std::vector<std::vector<int>> ranks;  // per node, ascending
  int my_node = 0;

  // node_of_rank: the communicator's node index of every rank (dense, 0 … num_nodes − 1).
  static NodeGroups make(const std::vector<int>& node_of_rank, int rank) {
    NodeGroups g;
    for (int r = 0; r < int(node_of_rank.size()); ++r) {
      const size_t k = size_t(node_of_rank[size_t(r)]);
      if (g.ranks.size() <= k) g.ranks.resize(k + 1);
      g.ranks[k].push_back(r);
    }
    g.my_node = node_of_rank.empty() ? 0 : node_of_rank[size_t(rank)];
    return g;
  }
  int num_nodes() const { return int(ranks.size()); }
  int leader(int node) const { return ranks[size_t(node)].front(); }
  int local_size(int node) const { return int(ranks[size_t(node)].size()); }
};

}  // namespace pride
