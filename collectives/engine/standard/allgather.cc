// allgather and allgatherv: this rank's block is copied into place, then the ring all-gather
// (ring.h) moves every block to every rank: (N-1)/N of the output per rank, N-1 steps.
#include <cstdint>
#include <cstring>
#include <vector>

#include "collectives/engine/standard/common.h"
#include "collectives/engine/standard/ring.h"

namespace pride {
namespace {

using namespace standard;

void gather_into_place(Collective& c, const void* in, void* out, const Blocks& blocks) {
  const auto r = static_cast<size_t>(c.rank());
  char* mine = static_cast<char*>(out) + blocks.offset[r];
  if (blocks.count[r] > 0 && mine != in) std::memmove(mine, in, blocks.count[r]);  // in may alias out
  ring_allgather(c, out, blocks, 1, /*phase=*/0);
}

}  // namespace

void allgather(Communicator& comm, const void* in, size_t bytes, void* out) {
  constexpr const char* kName = "allgather";
  const auto n = static_cast<size_t>(comm.size());
  PRIDE_CHECK_ARG(bytes <= SIZE_MAX / n, "pride rank {}/{}: {}: {} bytes from each of {} ranks overflow size_t",
                  comm.rank(), comm.size(), kName, bytes, n);
  check_buffer(comm, kName, in, bytes, "in");
  check_buffer(comm, kName, out, bytes * n, "out");
  Collective c = comm.begin(kName, "allgather_ring", fingerprint(OpId::kAllgather, ScalarType::kUInt8, bytes, 0));
  gather_into_place(c, in, out, even_blocks(bytes * n, comm.size()));
}

void allgatherv(Communicator& comm, const void* in, const std::vector<size_t>& bytes, void* out) {
  constexpr const char* kName = "allgatherv";
  const size_t total = check_sizes(comm, kName, bytes, "bytes");
  check_buffer(comm, kName, in, bytes[size_t(comm.rank())], "in");
  check_buffer(comm, kName, out, total, "out");
  Collective c = comm.begin(kName, "allgatherv_ring",
                            fingerprint(OpId::kAllgatherv, ScalarType::kUInt8, total, sizes_detail(bytes)));
  gather_into_place(c, in, out, blocks_of(bytes));
}

}  // namespace pride
