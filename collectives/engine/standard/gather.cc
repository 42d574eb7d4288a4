// gather: every rank sends its block straight to the root, which has all receives posted at once and
// lands each block in place. The root's link carries (N-1) blocks whatever the algorithm, so a tree
// would only add hops.
#include <cstring>
#include <vector>

#include "collectives/engine/standard/common.h"

namespace pride {

void gather(Communicator& comm, const void* in, size_t bytes, void* out, int root) {
  using namespace standard;
  constexpr const char* kName = "gather";
  check_root(comm, kName, root);
  const auto n = static_cast<size_t>(comm.size());
  PRIDE_CHECK_ARG(bytes <= SIZE_MAX / n, "pride rank {}/{}: {}: {} bytes from each of {} ranks overflow size_t",
                  comm.rank(), comm.size(), kName, bytes, n);
  check_buffer(comm, kName, in, bytes, "in");
  if (comm.rank() == root) check_buffer(comm, kName, out, bytes * n, "out");
  Collective c = comm.begin(kName, "gather_direct",
                            fingerprint(OpId::kGather, ScalarType::kUInt8, bytes, static_cast<uint64_t>(root)));
  if (bytes == 0) return;
  if (comm.rank() != root) {
    RequestPtr request = c.send(root, slot(0, 0), in, bytes);
    c.wait(request);
    return;
  }
  auto* base = static_cast<char*>(out);
  std::vector<RequestPtr> requests;
  for (size_t b = 0; b < n; ++b) {
    if (b != size_t(root)) requests.push_back(c.recv(int(b), slot(0, 0), base + b * bytes, bytes));
  }
  char* mine = base + size_t(root) * bytes;
  if (mine != in) std::memmove(mine, in, bytes);  // in may be the root's block of out
  c.wait_all(requests);
}

}  // namespace pride
