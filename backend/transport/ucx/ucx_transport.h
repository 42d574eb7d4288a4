// Transport over UCX's ucp tag API: one context and one worker per communicator, an endpoint to every
// peer created from worker addresses exchanged through the store, peer-failure handling on.
//
// A rank with peers both on its own host and on others sends to the remote ones through a second
// context and worker whose messages all go eagerly (see connect()). Every receive stays on the first
// worker: the eager protocol needs nothing from the receiver's side but a posted receive, so the
// second worker only sends, and tag matching (any-peer receives included) sees one worker.
//
// Progress is explicit: the thread that runs the collective calls progress() while it waits. pride
// runs every collective of a communicator on one thread (the torch plugin's worker), so the worker is
// single-threaded (UCS_THREAD_MODE_SINGLE, no locks), and no progress thread competes for the few
// cores that packing and counting need (see docs/design.md).
#pragma once

#include <ucp/api/ucp.h>

#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "backend/store/store.h"
#include "backend/transport/transport.h"

namespace pride {

struct UcxOp;  // ucx_transport.cc: what a UCX completion callback touches

class UcxTransport final : public Transport {
 public:
  UcxTransport(int rank, int size, Store& store, const std::vector<bool>& watched_locally);
  ~UcxTransport() override;
  UcxTransport(const UcxTransport&) = delete;
  UcxTransport& operator=(const UcxTransport&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* name() const override { return "ucx"; }
  using Transport::irecv;
  using Transport::isend;
  RequestPtr isend(int peer, Tag tag, const void* buf, size_t bytes, MemoryType memory) override;
  RequestPtr irecv(int peer, Tag tag, void* buf, size_t bytes, MemoryType memory) override;
  // CUDA memory when this UCX was built with its CUDA transports (cuda_copy, cuda_ipc) and they found
  // a GPU: ucp_context_query's memory types.
  bool carries(MemoryType memory) const override;
  bool progress() override;
  void wait_for_activity(std::chrono::microseconds max_wait) override;
  void wake() override;
  void expect_close() override { closing_ = true; }
  void close() override { close_endpoints(); }
  std::string peer_failure(int peer) const override;
  std::string route(int peer) const override;
  void abort() override;
  // True where RNDV_THRESH=inf governs the peer's endpoint (see connect()).
  bool sends_eagerly_to(int peer) const override;

 private:
  struct Peer {
    UcxTransport* self = nullptr;
    int rank = -1;
    ucp_ep_h ep = nullptr;
    ucp_worker_h worker = nullptr;  // the worker `ep` belongs to: worker_, or eager_worker_ for a remote peer
    std::string route;              // lanes_of(ep), read when connecting
    std::string failure;  // set by the endpoint's error handler
    bool watched_locally = false;  // no UCX error handling: the communicator checks the peer's pid
  };
  static void on_endpoint_error(void* arg, ucp_ep_h ep, ucs_status_t status);
  void connect(Store& store, const std::vector<bool>& watched_locally);  // the constructor's work
  // ucp_init with the features pride uses; `eager` sets RNDV_THRESH=inf (every message eager), and
  // `second` leaves out the shared-memory transports (the send-only context for remote peers).
  ucp_context_h create_context(bool eager, bool second) const;
  static std::string lanes_of(ucp_ep_h ep);  // "posix+cma", "tcp": the transports of an endpoint's lanes
  // A single-threaded worker on `context`, and its wake-up fd (-1 when UCX has none).
  ucp_worker_h create_worker(ucp_context_h context, int* event_fd) const;
  void release();  // closes endpoints, destroys the workers and the contexts (each if it exists)
  void close_endpoints();
  // Closes the endpoints with `flags` (0: flush; UCP_EP_CLOSE_FLAG_FORCE) and progresses until the
  // closes finish or `patience` passes.
  void close_all(uint32_t flags_for_live_peers, std::chrono::milliseconds patience);

  int rank_;
  int size_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  uint64_t memory_types_ = UCS_BIT(UCS_MEMORY_TYPE_HOST);  // ucp_context_query's, a bit per ucs_memory_type
  int event_fd_ = -1;  // the worker's wakeup fd (UCP_FEATURE_WAKEUP); -1 when UCX has none
  bool context_is_eager_ = false;  // the main context was made with RNDV_THRESH=inf
  // The send-only eager context and worker of a rank with both same-host and remote peers; null otherwise.
  ucp_context_h eager_context_ = nullptr;
  ucp_worker_h eager_worker_ = nullptr;
  int eager_event_fd_ = -1;
  std::vector<std::unique_ptr<Peer>> peers_;
  bool closing_ = false;
  // Ops of requests destroyed while UCX still held them (a send to a peer that failed): UCX may never
  // call back for them, so the transport frees what is left once the worker is gone (release()).
  std::unordered_set<UcxOp*> orphaned_ops_;
};

}  // namespace pride
