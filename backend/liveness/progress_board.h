// Which collective each rank of a group has been waiting in, posted through the store, so that a rank
// whose collective times out can name the ranks that never joined it.
//
// A silent rank (alive, but hung in other code or skipping the call) trips none of the liveness checks,
// and each survivor's own timeout names only the peer it waited for, often another survivor. With this
// board, the survivors' errors add which ranks were not waiting in the collective, as torch's NCCL
// desync report does.
//
// The store is touched rarely and never on the collective's own thread: a rank posts once per
// collective, and only when the collective has waited a while (post_after()); a post runs on a thread
// of its own, so a slow or hung store (its host stopped) never delays a collective. At the deadline the
// rank reads the others' posts for a bounded time; a store that does not answer in time only costs the
// report, never the error.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "backend/store/store.h"

namespace pride {

class ProgressBoard {
 public:
  // `store` is the group's own namespace (a prefix store): the keys are "waiting/<rank>".
  ProgressBoard(std::shared_ptr<Store> store, int rank, int size);

  // How long a collective waits before it posts: a second, or a quarter of a short group timeout, so
  // that every rank still waiting in a collective has posted well before the first deadline passes.
  static std::chrono::milliseconds post_after(std::chrono::milliseconds timeout);

  // "This rank waits in collective `sequence` (`call`)". Returns at once; the post runs on its own thread.
  void post_waiting(uint64_t sequence, const std::string& call);

  // At a deadline: posts this rank's wait in `sequence`, then reads the other ranks' posts until every
  // one is in `sequence` or `patience` passes. Returns a clause for the timeout's message: the ranks not
  // seen waiting in `sequence` and where each last posted a wait, or that every rank was waiting in it.
  // Empty when the store did not answer in time.
  std::string report(uint64_t sequence, const std::string& call, std::chrono::milliseconds patience);

 private:
  std::shared_ptr<Store> store_;
  int rank_;
  int size_;
};

}  // namespace pride
