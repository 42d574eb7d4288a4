// broadcast: a binomial tree for small buffers (log2 N steps of the whole buffer), scatter from the
// root + ring all-gather for large ones (van de Geijn: 2(N-1)/N of the buffer through each link
// instead of log2 N whole copies out of the root).
#include <bit>
#include <vector>

#include "collectives/engine/standard/common.h"
#include "collectives/engine/standard/ring.h"

namespace pride {
namespace {

using namespace standard;

constexpr size_t kTreeBroadcastBytes = size_t(256) << 10;

// Ranks are numbered relative to the root (v = r - root mod N). Rank v != 0 receives from v minus its
// lowest set bit, then sends to v + m for each power of two m below that bit, largest subtree first.
// The message over an edge with distance m uses slot log2(m), known to both ends.
void broadcast_tree(Collective& c, void* buf, size_t bytes, int root) {
  const int n = c.size();
  const int v = ring_mod(c.rank() - root, n);
  int low_bit = static_cast<int>(std::bit_ceil(static_cast<unsigned>(n)));  // the root: above every child
  if (v != 0) {
    low_bit = v & -v;
    const int parent = ring_mod(v - low_bit + root, n);
    RequestPtr in = c.recv(parent, slot(0, std::countr_zero(unsigned(low_bit))), buf, bytes);
    c.wait(in);
  }
  std::vector<RequestPtr> sends;
  for (int m = low_bit >> 1; m >= 1; m >>= 1) {
    if (v + m < n) {
      sends.push_back(c.send(ring_mod(v + m + root, n), slot(0, std::countr_zero(unsigned(m))), buf, bytes));
    }
  }
  c.wait_all(sends);
}

void broadcast_scatter_allgather(Collective& c, void* buf, size_t bytes, int root) {
  const int n = c.size();
  const int r = c.rank();
  auto* base = static_cast<char*>(buf);
  const Blocks blocks = even_blocks(bytes, n);
  std::vector<RequestPtr> requests;
  if (r == root) {
    for (int b = 0; b < n; ++b) {
      if (b == root) continue;
      requests.push_back(c.send(b, slot(0, 0), base + blocks.offset[size_t(b)], blocks.count[size_t(b)]));
    }
  } else {
    requests.push_back(c.recv(root, slot(0, 0), base + blocks.offset[size_t(r)], blocks.count[size_t(r)]));
  }
  c.wait_all(requests);
  ring_allgather(c, buf, blocks, 1, /*phase=*/1);
}

}  // namespace

void broadcast(Communicator& comm, void* buf, size_t bytes, int root) {
  constexpr const char* kName = "broadcast";
  check_root(comm, kName, root);
  check_buffer(comm, kName, buf, bytes, "buf");
  const bool tree = bytes <= kTreeBroadcastBytes || comm.size() <= 2;
  Collective c = comm.begin(kName, tree ? "broadcast_tree" : "broadcast_scatter_allgather",
                            fingerprint(OpId::kBroadcast, ScalarType::kUInt8, bytes, static_cast<uint64_t>(root)));
  if (comm.size() == 1 || bytes == 0) return;
  if (tree) {
    broadcast_tree(c, buf, bytes, root);
  } else {
    broadcast_scatter_allgather(c, buf, bytes, root);
  }
}

}  // namespace pride
