// The communicator: one group of ranks over one transport. It hands every collective a sequence
// number and tag space, checks that all ranks called the same collective (fingerprint), turns dead or
// silent peers into errors naming the collective and the peer, tells the other ranks when it fails
// (abort notices, so nobody waits for a rank that gave up) and counts the bytes each algorithm moves.
//
// Not thread-safe: one thread issues a communicator's operations (the torch plugin's worker does).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/liveness/process_state.h"
#include "backend/liveness/progress_board.h"
#include "backend/store/store.h"
#include "backend/transport/transport.h"
#include "backend/workspace.h"

namespace pride {

// What every rank must agree on for one collective. `op` names the collective, `detail` packs
// whatever else must match (mode, reduce op, root, vote kind), `numel` and `dtype` the buffer.
struct Fingerprint {
  uint64_t sequence = 0;
  uint32_t op = 0;
  uint32_t dtype = 0;
  uint64_t numel = 0;
  uint64_t detail = 0;
  // How error messages print a call (collectives/engine/call_description.h); not part of what ranks
  // agree on. Without one, messages show the numbers.
  std::string (*describe)(const Fingerprint&) = nullptr;
  bool operator==(const Fingerprint& o) const {
    return sequence == o.sequence && op == o.op && dtype == o.dtype && numel == o.numel && detail == o.detail;
  }
};

struct TrafficCounters {
  uint64_t calls = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t device_bytes_sent = 0;  // the part of bytes_sent sent straight from device (GPU) memory
};

class Communicator;

// `setting` (PRIDE_THREADS) when > 0; else the cores this process may use (hwloc, its CPU binding)
// divided among the ranks of the group on this machine, at least 1: a rank whose host is
// oversubscribed runs its kernels on its own thread.
int choose_kernel_threads(int setting, int cores, int ranks_on_machine);
// The most ranks on this machine that any group of this process has counted, `found` included (a
// process-wide running maximum): what a group's kernel threads and waits assume shares the cores.
int most_ranks_on_this_machine(int found);

// Data that travels inside the fingerprint check's messages and is reduced along with it (see
// Communicator::begin): a small allreduce, or a barrier (no bytes), then needs no rounds of its own.
struct CheckPayload {
  static constexpr size_t kMaxBytes = 448;
  void* data = nullptr;  // in: this rank's value; out: the reduced value, written only if the ranks agree
  size_t bytes = 0;      // <= kMaxBytes
  // dst = lower (+) upper, `lower` the partial value of the ranks that come first, so that every rank
  // computes the same bits; dst may alias neither. Buffers hold kMaxBytes; only `bytes` count.
  std::function<void(void* dst, const void* lower, const void* upper)> combine;
  bool reduced = false;  // set by begin() when the check ran (N > 1 and PRIDE_CHECK_FINGERPRINT on)
};

// One collective in flight: its tags, its deadline, and the waits that know whom they wait for.
class Collective {
 public:
  Collective(Communicator& comm, std::string name, std::string algorithm, uint64_t sequence,
             Clock::time_point deadline);
  // Left without an exception, a collective has finished every exchange of its own on this rank: an
  // abort notice this rank sends later says so, and the peers still in it finish it (Communicator).
  ~Collective();
  Collective(Collective&& other) noexcept;
  Collective(const Collective&) = delete;
  Collective& operator=(const Collective&) = delete;
  const std::string& name() const { return name_; }
  const std::string& algorithm() const { return algorithm_; }
  int rank() const;
  int size() const;

  // slot distinguishes the messages of one collective (step, segment); <= kMaxSlot. The slots
  // above it, up to 2^22 - 1, carry the communicator's fingerprint check.
  static constexpr uint32_t kControlSlots = 64;
  static constexpr uint32_t kMaxSlot = (1u << 22) - 1 - kControlSlots;
  // `memory`: where the buffer lives (the transport must carry() it).
  RequestPtr send(int peer, uint32_t slot, const void* buf, size_t bytes, MemoryType memory = MemoryType::kHost);
  RequestPtr recv(int peer, uint32_t slot, void* buf, size_t bytes, MemoryType memory = MemoryType::kHost);
  // Waits for every request (null entries are skipped); throws on failure, abort or deadline.
  void wait(RequestPtr& request);
  void wait_all(std::vector<RequestPtr>& requests);
  // Blocking exchange with two peers (the ring step): send to `to`, receive from `from`.
  void sendrecv(int to, const void* sbuf, size_t sbytes, int from, void* rbuf, size_t rbytes, uint32_t slot);
  // One round of the transport's progress, without waiting: for long CPU work between waits, so that
  // messages already posted keep moving (TCP sockets drained, rendezvous answered). Throws, as wait()
  // does, on an abort notice.
  void poll();

  // Work that another engine does for this collective (NCCL on a GPU stream): waits until `done()`,
  // watching what wait() watches (abort notices, every peer's liveness, the deadline) and `error()`,
  // which names that engine's own failure (empty while there is none). On any failure `give_up()` runs
  // first (it must stop the work and release its buffers: ncclCommAbort), then the peers are told and
  // the error is thrown, naming the peer where one is to blame. `what` names the work in messages.
  void wait_external(const std::string& what, const std::function<bool()>& done,
                     const std::function<std::string()>& error, const std::function<void()>& give_up);
  // Bytes that engine moved for this collective, counted like the transport's (pride.stats()).
  void count_external(size_t bytes_sent, size_t bytes_received, MemoryType memory);

  // The communicator's reusable scratch memory (see workspace.h).
  Workspace& workspace();
  // The node (host) index of every rank, as Communicator::node_of_rank().
  const std::vector<int>& node_of_rank() const;

  [[noreturn]] void fail(const std::string& what);  // throws Error naming the collective; notifies peers
  std::string describe() const;                     // "rank 1/4: sign_allreduce #12 (ring)"

 private:
  void check_request(const Request& r);
  // Called every liveness interval of a wait: once the collective has waited post_after(), this rank
  // posts that it waits in it (progress_board.h).
  void note_long_wait(Clock::time_point now);
  // For a timeout's message: which ranks were not waiting in this collective (progress_board.h).
  std::string absent_ranks() const;
  Communicator& comm_;
  std::string name_;
  std::string algorithm_;
  uint64_t sequence_;
  Clock::time_point started_;
  Clock::time_point deadline_;
  bool posted_waiting_ = false;
  bool owns_sequence_ = true;                      // false once moved from
  int exceptions_at_start_ = 0;                    // std::uncaught_exceptions() when it began
};

class Communicator {
 public:
  struct Options {
    std::chrono::milliseconds timeout{0};  // 0: Settings (PRIDE_TIMEOUT)
    std::string hostname;                  // empty: PRIDE_HOSTNAME, else gethostname() (tests simulate nodes)
  };
  // Connects `size` ranks through `store` (keys are used as given; pass a prefix store per group).
  Communicator(std::shared_ptr<Store> store, int rank, int size, Options options);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  Transport& transport() { return *transport_; }
  const Transport& transport() const { return *transport_; }
  // Host layout, learnt from hostnames exchanged through the store at construction.
  int num_nodes() const { return num_nodes_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  const std::vector<int>& node_of_rank() const { return node_of_rank_; }
  // How many of this group's ranks share each core of the busiest host (hwloc), ≥ 1 when they
  // outnumber the cores. The same on every rank.
  double ranks_per_core() const { return ranks_per_core_; }
  // Threads a rank's pack and unpack kernels may use (choose_kernel_threads): the cores this process
  // may run on, shared among the group's ranks on this machine; PRIDE_THREADS overrides.
  int kernel_threads() const { return kernel_threads_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds t) { timeout_ = t; }

  // Starts a collective: takes the next sequence number, checks that every rank passed the same
  // fingerprint (unless disabled) and raises MismatchError on every rank when they differ, before
  // anything of the collective is sent. The check is a recursive-doubling allreduce of 512-byte
  // messages (about log2 N rounds); `payload`, if given, is reduced in the same messages.
  Collective begin(const std::string& name, const std::string& algorithm, Fingerprint fingerprint,
                   CheckPayload* payload = nullptr);
  // The same without the check, for a call whose fingerprint the caller's own agreement has just
  // compared on every rank (DistributedLion's bucket header carries a digest of its sign-allreduce calls):
  // one round of small messages fewer, which on a busy link waits behind the data already queued.
  Collective begin_agreed(const std::string& name, const std::string& algorithm);
  // Fingerprint checks this communicator has run (tests: which calls skipped theirs). Any thread.
  uint64_t fingerprint_checks() const { return fingerprint_checks_.load(std::memory_order_relaxed); }

  // Point-to-point (torch's send/recv): a tag space of its own, not ordered with collectives.
  RequestPtr p2p_send(int peer, uint64_t user_tag, const void* buf, size_t bytes);
  RequestPtr p2p_recv(int peer, uint64_t user_tag, void* buf, size_t bytes);  // peer may be kAnyPeer
  void p2p_wait(RequestPtr& request, const std::string& what);
  // A point-to-point receive completed with `bytes` (counted under "p2p", like the sends).
  void count_p2p_received(size_t bytes) { traffic_["p2p"].bytes_received += bytes; }

  // Bytes and calls per algorithm ("ring", "direct", "allreduce_ring", ...).
  const std::map<std::string, TrafficCounters>& traffic() const { return traffic_; }
  // For the engine's own tests and tools. The torch plugin never clears these: its stats subtract a
  // baseline (PrideBackend::reset_traffic), which a clear here would underflow.
  void reset_traffic() { traffic_.clear(); }

  // After a failure that may have left peers mid-collective, the communicator refuses further work.
  bool broken() const { return !broken_reason_.empty(); }
  // How many collectives this rank has begun (begin() and begin_agreed() count them): a caller that
  // sees it change across a failed task knows the peers were in that collective too.
  uint64_t collectives_begun() const { return sequence_; }

  // For point-to-point requests that a caller watches itself (torch's send/recv, which the plugin's
  // worker polls between tasks) with the same failure handling as a collective's wait:
  // Progresses the transport; throws PeerError, and the group is broken, when a peer sent an abort notice.
  bool progress_p2p() { return progress_or_throw("point-to-point"); }
  // Why `peer` is gone (its endpoint failed, or its process on this host exited), empty while it is
  // there. Cheap enough for every liveness interval, not for every poll.
  std::string peer_gone(int peer) const;
  // Gives up on the group after a point-to-point failure or timeout: abort notices to every peer, and
  // every connection closed before the caller frees the buffers of its pending requests.
  void abandon(const std::string& reason) { notify_abort(reason); }
  // The normal end of the group (torch's destroy_process_group): tells every peer this rank is done and
  // waits up to `patience` for theirs, so that no rank closes its connections while another still reads
  // them, then closes them. A peer's connection closing is expected from then on, not reported; a peer
  // that never says goodbye (gone, or not ending the group) only costs the wait. Refuses work afterwards.
  void close(std::chrono::milliseconds patience);
  // torch's abort path, from any thread: the wait in progress (and every later one) throws PeerError;
  // the thread that runs the collectives then calls abandon() to notify the peers and close everything.
  void request_abort() { abort_requested_.store(true); }
  bool abort_requested() const { return abort_requested_.load(); }
  // How often a long wait checks that its peer is alive.
  static constexpr std::chrono::milliseconds kLivenessInterval{100};

  Workspace& workspace() { return workspace_; }

 private:
  friend class Collective;
  // Progresses the transport once; throws PeerError when another rank sent an abort notice, unless
  // that rank had finished collective `sequence` (this rank's, 0 outside a collective) before giving
  // up: everything it sent for it has left, and it has everything this rank sent it, so this rank
  // finishes the collective as that rank did (the notice is deferred, see DeferredNotice).
  bool progress_or_throw(const std::string& context, uint64_t sequence = 0);
  // Tells every peer this rank gives up on the group (once), then closes every connection.
  void notify_abort(const std::string& reason);
  // The notice for torch's abort() outside a collective (before or during the destroy).
  void notify_requested_abort();
  // Before blaming a peer whose connection failed: throws PeerError with its reason if that peer's
  // abort notice arrives within a short grace period; returns otherwise.
  void await_abort_notice(const std::string& context, uint64_t sequence = 0);
  void post_abort_receive();
  // An abort notice from a peer that had finished the collective this rank was still in. The group
  // is broken from the end of that collective on (settle_deferred_notices).
  struct DeferredNotice {
    int peer = -1;
    uint64_t completed = 0;  // the sender's last finished collective
    std::string reason;
    Clock::time_point arrived;
  };
  const DeferredNotice* deferred_notice_from(int peer) const;
  // A deferred notice fails this rank: the group is broken, every connection closed, PeerError thrown.
  [[noreturn]] void fail_on_notice(const std::string& context, int peer, const std::string& reason);
  // Before collective `next_sequence` (0: the group ends): a deferred notice from a peer that had not
  // finished it breaks the group (the call is refused, naming the notice).
  void settle_deferred_notices(uint64_t next_sequence = 0);
  // Spin, then block on the transport: briefly where ranks outnumber this machine's cores.
  void idle(uint64_t idle_rounds);
  void learn_hosts(const std::string& hostname);
  void check_fingerprints(Collective& c, const Fingerprint& mine, CheckPayload* payload);
  [[noreturn]] void name_mismatch(Collective& c, const Fingerprint& mine);
  // Non-empty when `peer` runs on this host (same PID namespace) and its process is gone. UCX's shared
  // memory transports do not report a dead peer; this turns it into an error long before the deadline.
  std::string local_peer_gone(int peer) const;

  std::shared_ptr<Store> store_;
  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  ProgressBoard progress_board_;
  std::unique_ptr<Transport> transport_;
  uint64_t sequence_ = 0;
  std::atomic<uint64_t> fingerprint_checks_{0};
  std::map<std::string, TrafficCounters> traffic_;
  int num_nodes_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
  double ranks_per_core_ = 1.0;
  // A wait should block early: some host of the group has more ranks than cores (ranks_per_core_), or
  // this machine does, simulated hosts (network namespaces) included, which ranks_per_core_ counts apart.
  bool cores_shared_ = false;
  int kernel_threads_ = 1;
  std::vector<int> node_of_rank_;
  std::vector<long> local_pid_of_rank_;  // pid of each same-host, same-PID-namespace rank; 0 otherwise
  std::vector<ProcessWatch> local_process_of_rank_;  // a pidfd (or /proc) watch of each of those
  std::string broken_reason_;
  std::vector<char> abort_buffer_;
  std::array<char, 512> abort_notice_{};  // the notice this rank sends: its completed_, then the reason
  uint64_t completed_ = 0;                 // the last collective whose exchanges all finished on this rank
  std::vector<DeferredNotice> deferred_notices_;
  RequestPtr abort_receive_;
  bool aborting_ = false;  // notify_abort() is on the stack
  bool notified_ = false;  // this rank's notices have gone out
  std::atomic<bool> abort_requested_{false};
  Workspace workspace_;
};

}  // namespace pride
