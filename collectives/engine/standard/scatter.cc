// scatter: the root sends block r of its input straight to rank r, all sends posted at once. As for
// gather, the root's link carries N-1 blocks whatever the algorithm.
#include <cstring>
#include <vector>

#include "collectives/engine/standard/common.h"

namespace pride {

void scatter(Communicator& comm, const void* in, void* out, size_t bytes, int root) {
  using namespace standard;
  constexpr const char* kName = "scatter";
  check_root(comm, kName, root);
  const auto n = static_cast<size_t>(comm.size());
  PRIDE_CHECK_ARG(bytes <= SIZE_MAX / n, "pride rank {}/{}: {}: {} bytes to each of {} ranks overflow size_t",
                  comm.rank(), comm.size(), kName, bytes, n);
  if (comm.rank() == root) check_buffer(comm, kName, in, bytes * n, "in");
  check_buffer(comm, kName, out, bytes, "out");
  Collective c = comm.begin(kName, "scatter_direct",
                            fingerprint(OpId::kScatter, ScalarType::kUInt8, bytes, static_cast<uint64_t>(root)));
  if (bytes == 0) return;
  if (comm.rank() != root) {
    RequestPtr request = c.recv(root, slot(0, 0), out, bytes);
    c.wait(request);
    return;
  }
  const auto* base = static_cast<const char*>(in);
  std::vector<RequestPtr> requests;
  for (size_t b = 0; b < n; ++b) {
    if (b != size_t(root)) requests.push_back(c.send(int(b), slot(0, 0), base + b * bytes, bytes));
  }
  const char* mine = base + size_t(root) * bytes;
  if (mine != out) std::memmove(out, mine, bytes);  // out may be the root's block of in
  c.wait_all(requests);
}

}  // namespace pride
