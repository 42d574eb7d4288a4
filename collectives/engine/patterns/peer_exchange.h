// One round of messages with every other rank, in the order the direct-shaped collectives use
// (compressed/onebit_allreduce.cc, compressed/level_vote.cc): all receives posted first, then the sends
// from the right neighbour on (rank r sends to r+1, r+2, ...), so that no rank is hit by everyone at once.
// Scattering chunks to their owners and gathering the owners' results are both this, with different buffers.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "backend/communicator.h"

namespace pride::patterns {

// incoming(from) and outgoing(to) return {buffer, bytes} for that peer; returns when every message is done.
template <class Incoming, class Outgoing>
void exchange_with_peers(Collective& c, uint32_t slot, Incoming incoming, Outgoing outgoing) {
  const int n = c.size(), r = c.rank();
  std::vector<RequestPtr> requests;
  requests.reserve(size_t(2 * (n - 1)));
  for (int d = 1; d < n; ++d) {
    const int from = (r - d + n) % n;
    const std::pair<void*, size_t> in = incoming(from);
    requests.push_back(c.recv(from, slot, in.first, in.second));
  }
  for (int d = 1; d < n; ++d) {
    const int to = (r + d) % n;
    const std::pair<const void*, size_t> out = outgoing(to);
    requests.push_back(c.send(to, slot, out.first, out.second));
  }
  c.wait_all(requests);
}

// The scatter to chunk owners: every peer's message for this rank, all `message_bytes` long, lands in
// `inbox` at its sender's index; outgoing(to) gives this rank's message for `to`'s chunk.
template <class Outgoing>
void send_to_owners(Collective& c, uint32_t slot, void* inbox, size_t message_bytes, Outgoing outgoing) {
  exchange_with_peers(
      c, slot,
      [&](int from) {
        return std::pair<void*, size_t>(static_cast<char*>(inbox) + size_t(from) * message_bytes, message_bytes);
      },
      outgoing);
}

}  // namespace pride::patterns
