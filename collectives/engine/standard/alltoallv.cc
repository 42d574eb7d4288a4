// alltoallv: pairwise exchange. In step s (1..N-1) rank r sends to r+s and receives from r-s, so the
// destinations of each step form a permutation: every rank sends one block and receives one block
// per step, and no rank is the target of several senders at once (the hot spot of posting all N-1
// sends together). This rank's own block is a local copy.
//
// The ranks' size vectors legitimately differ (send_bytes[p] on rank r is recv_bytes[r] on rank p),
// so the fingerprint cannot hold them; each receive checks instead that the peer sent exactly the
// expected length (a longer message is a truncation error in the transport, a shorter one here).
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "collectives/engine/standard/common.h"
#include "collectives/engine/standard/ring.h"

namespace pride {

void alltoallv(Communicator& comm, const void* in, const std::vector<size_t>& send_bytes, void* out,
               const std::vector<size_t>& recv_bytes) {
  using namespace standard;
  constexpr const char* kName = "alltoallv";
  const int n = comm.size();
  const int r = comm.rank();
  check_buffer(comm, kName, in, check_sizes(comm, kName, send_bytes, "send_bytes"), "in");
  check_buffer(comm, kName, out, check_sizes(comm, kName, recv_bytes, "recv_bytes"), "out");
  PRIDE_CHECK_ARG(send_bytes[size_t(r)] == recv_bytes[size_t(r)],
                  "pride rank {}/{}: {}: this rank sends itself {} bytes but expects to receive {}", r, n, kName,
                  send_bytes[size_t(r)], recv_bytes[size_t(r)]);
  Collective c = comm.begin(kName, "alltoallv_pairwise", fingerprint(OpId::kAlltoallv, ScalarType::kUInt8, 0, 0));

  const Blocks sends = blocks_of(send_bytes);
  const Blocks receives = blocks_of(recv_bytes);
  const auto* source = static_cast<const char*>(in);
  auto* target = static_cast<char*>(out);
  // In place (torch's all_to_all_single(t, t)): step s receives into a block that a later step sends
  // from, so the sends read a copy. With 3 ranks every rank got a wrong block without it.
  const size_t send_total = std::accumulate(send_bytes.begin(), send_bytes.end(), size_t(0));
  const size_t recv_total = std::accumulate(recv_bytes.begin(), recv_bytes.end(), size_t(0));
  std::vector<char> source_copy;
  const auto at = [](const void* p) { return reinterpret_cast<uintptr_t>(p); };
  if (send_total > 0 && recv_total > 0 && at(source) < at(target) + recv_total &&
      at(target) < at(source) + send_total) {
    source_copy.assign(source, source + send_total);
    source = source_copy.data();
  }
  if (send_bytes[size_t(r)] > 0) {
    std::memmove(target + receives.offset[size_t(r)], source + sends.offset[size_t(r)], send_bytes[size_t(r)]);
  }
  for (int s = 1; s < n; ++s) {
    const auto to = static_cast<size_t>(ring_mod(r + s, n));
    const auto from = static_cast<size_t>(ring_mod(r - s, n));
    RequestPtr incoming = c.recv(int(from), slot(0, uint64_t(s)), target + receives.offset[from], recv_bytes[from]);
    RequestPtr outgoing = c.send(int(to), slot(0, uint64_t(s)), source + sends.offset[to], send_bytes[to]);
    c.wait(incoming);
    if (incoming->bytes() != recv_bytes[from]) {
      c.fail(fmt::format("peer {} sent {} bytes where this rank expected {}: the ranks' send_bytes and recv_bytes "
                         "disagree",
                         from, incoming->bytes(), recv_bytes[from]));
    }
    c.wait(outgoing);
  }
}

}  // namespace pride
