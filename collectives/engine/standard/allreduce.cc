// allreduce: recursive doubling for small buffers (latency: log2 N rounds), ring reduce-scatter +
// ring all-gather for large ones (bandwidth: 2(N-1)/N of the buffer per rank). Both give the same
// bits on every rank; they may differ from each other in the last place of a float sum (another
// reduction order), which is why the choice depends only on what the fingerprint makes ranks agree on.
#include <vector>

#include "collectives/engine/standard/common.h"
#include "collectives/engine/standard/reduce_ops.h"
#include "collectives/engine/standard/ring.h"

namespace pride {
namespace {

using namespace standard;

// Up to here log2(N) exchanges of the whole buffer beat the ring's 2(N-1) steps of B/N: per-message
// latency dominates below a few tens of KiB on every transport we run on.
constexpr size_t kSmallAllreduceBytes = size_t(64) << 10;

// Recursive doubling, with a fold for a group size that is not a power of two: ranks p2..N-1 (p2 the
// largest power of two <= N) first hand their input to rank r - p2 and get the result back at the
// end. Among the first p2 ranks, round k pairs r with r ^ 2^k; both partners hold the value of
// their half, and both compute reduce(lower half's value, upper half's value) with that operand
// order, so both get the same bits. By induction every rank ends with the same bits, in the order
// of a balanced tree over ranks 0..p2-1, each leaf i being (x[i] op x[i + p2]) where that rank exists.
void allreduce_small(Collective& c, char* buf, size_t count, ScalarType type, ReduceOp op) {
  const int n = c.size();
  const int r = c.rank();
  const size_t bytes = count * scalar_size(type);
  int p2 = 1;
  while (p2 * 2 <= n) p2 *= 2;
  // Slots: 0 the fold, 1 the result going back to a folded rank, 2 + k round k.
  if (r >= p2) {
    RequestPtr out = c.send(r - p2, slot(0, 0), buf, bytes);
    c.wait(out);  // before the result overwrites buf
    RequestPtr result = c.recv(r - p2, slot(0, 1), buf, bytes);
    c.wait(result);
    return;
  }
  std::vector<char> incoming(bytes);
  const bool has_folded_partner = r + p2 < n;
  if (has_folded_partner) {
    RequestPtr in = c.recv(r + p2, slot(0, 0), incoming.data(), bytes);
    c.wait(in);
    reduce_elements(op, type, buf, buf, incoming.data(), count);
  }
  for (int mask = 1, k = 0; mask < p2; mask <<= 1, ++k) {
    const int partner = r ^ mask;
    c.sendrecv(partner, buf, bytes, partner, incoming.data(), bytes, slot(0, 2 + uint64_t(k)));
    if (r < partner) {
      reduce_elements(op, type, buf, buf, incoming.data(), count);
    } else {
      reduce_elements(op, type, buf, incoming.data(), buf, count);
    }
  }
  if (op == ReduceOp::kAvg) divide_elements(type, buf, count, n);
  if (has_folded_partner) {
    RequestPtr result = c.send(r + p2, slot(0, 1), buf, bytes);
    c.wait(result);
  }
}

// Ring: rank r ends the reduce-scatter owning the reduced block r (see ring_reduce_scatter for the
// order), divides it for AVG, and the all-gather copies the owners' bytes to everyone.
void allreduce_ring(Collective& c, char* buf, size_t count, ScalarType type, ReduceOp op) {
  const size_t element = scalar_size(type);
  const Blocks blocks = even_blocks(count, c.size());
  const auto r = static_cast<size_t>(c.rank());
  char* mine = buf + blocks.offset[r] * element;
  ring_reduce_scatter(c, buf, mine, blocks, type, op, /*phase=*/0);
  if (op == ReduceOp::kAvg) divide_elements(type, mine, blocks.count[r], c.size());
  ring_allgather(c, buf, blocks, element, /*phase=*/1);
}

}  // namespace

void allreduce(Communicator& comm, void* buf, size_t count, ScalarType type, ReduceOp op) {
  constexpr const char* kName = "allreduce";
  check_op(comm, kName, op, type);
  const size_t bytes = checked_bytes(comm, kName, count, type);
  check_buffer(comm, kName, buf, bytes, "buf");
  const bool small = bytes <= kSmallAllreduceBytes;
  // A buffer that fits in the fingerprint check's messages is reduced by the check itself, in the
  // same recursive-doubling order as allreduce_small (so with the same bits): no rounds of its own.
  CheckPayload in_check;
  in_check.data = buf;
  in_check.bytes = bytes;
  in_check.combine = [op, type, count](void* dst, const void* lower, const void* upper) {
    reduce_elements(op, type, dst, lower, upper, count);
  };
  const bool fits_check = bytes <= CheckPayload::kMaxBytes;
  Collective c = comm.begin(kName, small ? "allreduce_small" : "allreduce_ring",
                            fingerprint(OpId::kAllreduce, type, count, static_cast<uint64_t>(op)),
                            fits_check ? &in_check : nullptr);
  if (comm.size() == 1 || count == 0) return;  // AVG over one rank: x / 1 == x exactly
  if (in_check.reduced) {
    if (op == ReduceOp::kAvg) divide_elements(type, buf, count, comm.size());
    return;
  }
  if (small) {
    allreduce_small(c, static_cast<char*>(buf), count, type, op);
  } else {
    allreduce_ring(c, static_cast<char*>(buf), count, type, op);
  }
}

}  // namespace pride
