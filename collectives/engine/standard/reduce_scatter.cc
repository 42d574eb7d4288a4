// reduce_scatter: the ring reduce-scatter of ring.h over blocks of the given per-rank counts:
// (N-1)/N of the input out of each rank in N-1 steps, two segments of scratch memory, and the same
// fixed reduction order as the ring allreduce.
#include <vector>

#include "collectives/engine/standard/common.h"
#include "collectives/engine/standard/reduce_ops.h"
#include "collectives/engine/standard/ring.h"

namespace pride {

void reduce_scatter(Communicator& comm, const void* in, void* out, const std::vector<size_t>& counts,
                    ScalarType type, ReduceOp op) {
  using namespace standard;
  constexpr const char* kName = "reduce_scatter";
  check_op(comm, kName, op, type);
  const size_t total = check_sizes(comm, kName, counts, "counts");
  check_buffer(comm, kName, in, checked_bytes(comm, kName, total, type), "in");
  const size_t mine = counts[size_t(comm.rank())];
  check_buffer(comm, kName, out, mine * scalar_size(type), "out");
  // detail: the op mixed into the hash of the counts (both must match on every rank).
  const uint64_t detail = sizes_detail(counts) ^ static_cast<uint64_t>(op);
  Collective c = comm.begin(kName, "reduce_scatter_ring", fingerprint(OpId::kReduceScatter, type, total, detail));
  ring_reduce_scatter(c, in, out, blocks_of(counts), type, op, /*phase=*/0);
  if (op == ReduceOp::kAvg && comm.size() > 1) divide_elements(type, out, mine, comm.size());
}

}  // namespace pride
