// reduce: a binomial tree for small buffers (log2 N steps, the root combines log2 N messages), ring
// reduce-scatter + gather to the root for large ones (Rabenseifner: (N-1)/N of the buffer out of each
// rank for the reduce-scatter, then each rank's reduced block to the root once).
#include <bit>
#include <vector>

#include "collectives/engine/standard/common.h"
#include "collectives/engine/standard/reduce_ops.h"
#include "collectives/engine/standard/ring.h"

namespace pride {
namespace {

using namespace standard;

constexpr size_t kTreeReduceBytes = size_t(256) << 10;

// Ranks are numbered relative to the root (v = r - root mod N). In round k (m = 2^k) a rank with bit k
// set sends its partial to v - m and is done; one with v + m < N receives that partial and combines
// (own partial, child's partial) in that order. The root thus computes a fixed tree over the
// relative ranks; the message of round k uses slot k.
void reduce_tree(Collective& c, char* buf, size_t count, ScalarType type, ReduceOp op, int root) {
  const int n = c.size();
  const int v = ring_mod(c.rank() - root, n);
  const size_t bytes = count * scalar_size(type);
  std::vector<char> incoming;
  for (int m = 1, k = 0; m < n; m <<= 1, ++k) {
    if (v & m) {
      RequestPtr out = c.send(ring_mod(v - m + root, n), slot(0, uint64_t(k)), buf, bytes);
      c.wait(out);
      return;
    }
    if (v + m < n) {
      incoming.resize(bytes);
      RequestPtr in = c.recv(ring_mod(v + m + root, n), slot(0, uint64_t(k)), incoming.data(), bytes);
      c.wait(in);
      reduce_elements(op, type, buf, buf, incoming.data(), count);
    }
  }
  if (op == ReduceOp::kAvg) divide_elements(type, buf, count, n);  // only the root gets here
}

// Each rank reduces its block in place (ring.h gives the order), divides it for AVG, and sends it to
// the root, which receives the blocks straight into place.
void reduce_ring(Collective& c, char* buf, size_t count, ScalarType type, ReduceOp op, int root) {
  const size_t element = scalar_size(type);
  const int n = c.size();
  const int r = c.rank();
  const Blocks blocks = even_blocks(count, n);
  auto block = [&](int b) { return buf + blocks.offset[size_t(b)] * element; };
  auto block_bytes = [&](int b) { return blocks.count[size_t(b)] * element; };
  ring_reduce_scatter(c, buf, block(r), blocks, type, op, /*phase=*/0);
  if (op == ReduceOp::kAvg) divide_elements(type, block(r), blocks.count[size_t(r)], n);
  std::vector<RequestPtr> requests;
  if (r == root) {
    for (int b = 0; b < n; ++b) {
      if (b != root) requests.push_back(c.recv(b, slot(1, 0), block(b), block_bytes(b)));
    }
  } else {
    requests.push_back(c.send(root, slot(1, 0), block(r), block_bytes(r)));
  }
  c.wait_all(requests);
}

}  // namespace

void reduce(Communicator& comm, void* buf, size_t count, ScalarType type, ReduceOp op, int root) {
  constexpr const char* kName = "reduce";
  check_root(comm, kName, root);
  check_op(comm, kName, op, type);
  const size_t bytes = checked_bytes(comm, kName, count, type);
  check_buffer(comm, kName, buf, bytes, "buf");
  const bool tree = bytes <= kTreeReduceBytes;
  // detail: the op in the low byte, the root above it.
  const uint64_t detail = static_cast<uint64_t>(op) | (static_cast<uint64_t>(root) << 8);
  Collective c =
      comm.begin(kName, tree ? "reduce_tree" : "reduce_ring", fingerprint(OpId::kReduce, type, count, detail));
  if (comm.size() == 1 || count == 0) return;
  if (tree) {
    reduce_tree(c, static_cast<char*>(buf), count, type, op, root);
  } else {
    reduce_ring(c, static_cast<char*>(buf), count, type, op, root);
  }
}

}  // namespace pride
