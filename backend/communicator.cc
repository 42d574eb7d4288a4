#include "backend/communicator.h"

#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <filesystem>
#include <fstream>

#include <charconv>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <thread>

#include "backend/common/error.h"
#include "backend/common/log.h"
#include "backend/common/settings.h"
#include "backend/liveness/process_state.h"
#include "backend/topology/host_layout.h"
#include "backend/topology/host_topology.h"

namespace pride {
namespace {

// Tag layout (47 caller bits, see transport.h):
//   bit 46 set:   point-to-point, user tag in bits 0..45
//   bit 46 clear: collective; sequence (mod 2^24) in bits 22..45, slot in bits 0..21
constexpr Tag kP2pBit = Tag(1) << 46;
constexpr int kSlotBits = 22;
constexpr Tag kSequenceMask = (Tag(1) << 24) - 1;
// The fingerprint check's slots, above every algorithm's: round k of the check uses the first plus k,
// the exchange that names a mismatch the last.
constexpr uint32_t kFingerprintSlot = Collective::kMaxSlot + 1;
constexpr uint32_t kMismatchSlot = Collective::kMaxSlot + Collective::kControlSlots;
// An abort notice: the sender's last finished collective (8 bytes, host order: the ranks of a group
// run one build), then its reason, NUL-terminated.
constexpr size_t kAbortMessageBytes = 512;
constexpr size_t kAbortHeaderBytes = sizeof(uint64_t);
// How long a rank that finishes a collective after a peer's deferred notice waits for a message of that
// peer's: it was sent before the notice, on the same connection, so it is normally in already.
constexpr auto kDeferredNoticeGrace = std::chrono::milliseconds(1000);
// How often a wait that makes no progress asks whether its peer is still alive.
constexpr auto kLivenessInterval = Communicator::kLivenessInterval;

Tag collective_tag(uint64_t sequence, uint32_t slot) {
  return ((sequence & kSequenceMask) << kSlotBits) | Tag(slot);
}

// The kernel's boot id ("unknown" where /proc does not have it).
std::string boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  if (!(in >> id) || id.empty()) return "unknown";
  return id;
}

// `describe` prints a call, the describer of this rank's own call (the other rank's call may be a
// different collective, so the describer must know them all; the engine's does).
std::string fingerprint_text(const Fingerprint& f, std::string (*describe)(const Fingerprint&)) {
  if (describe != nullptr) return describe(f);
  return fmt::format("#{} op {} dtype {} numel {} detail {:#x}", f.sequence, f.op, f.dtype, f.numel, f.detail);
}

// What travels of a fingerprint: its four words (not the describer).
using FingerprintWords = std::array<uint64_t, 4>;

FingerprintWords fingerprint_words(const Fingerprint& f) {
  return {f.sequence, uint64_t(f.op) << 32 | f.dtype, f.numel, f.detail};
}

Fingerprint from_words(const FingerprintWords& w) {
  Fingerprint f;
  f.sequence = w[0];
  f.op = uint32_t(w[1] >> 32);
  f.dtype = uint32_t(w[1]);
  f.numel = w[2];
  f.detail = w[3];
  return f;
}

}  // namespace

// ---- Collective ------------------------------------------------------------------------------

Collective::Collective(Communicator& comm, std::string name, std::string algorithm, uint64_t sequence,
                       Clock::time_point deadline)
    : comm_(comm), name_(std::move(name)), algorithm_(std::move(algorithm)), sequence_(sequence),
      started_(Clock::now()), deadline_(deadline), exceptions_at_start_(std::uncaught_exceptions()) {
  comm_.traffic_[algorithm_].calls++;
}

Collective::Collective(Collective&& other) noexcept
    : comm_(other.comm_), name_(std::move(other.name_)), algorithm_(std::move(other.algorithm_)),
      sequence_(other.sequence_), started_(other.started_), deadline_(other.deadline_),
      posted_waiting_(other.posted_waiting_), owns_sequence_(other.owns_sequence_),
      exceptions_at_start_(other.exceptions_at_start_) {
  other.owns_sequence_ = false;
}

Collective::~Collective() {
  // An exception on its way out (a failed wait, a failed local step) means this rank did not finish
  // it; nor did it if the group broke inside (an error caught on the way).
  if (!owns_sequence_ || sequence_ == 0 || std::uncaught_exceptions() > exceptions_at_start_ || comm_.broken()) return;
  comm_.completed_ = std::max(comm_.completed_, sequence_);
}

void Collective::note_long_wait(Clock::time_point now) {
  if (posted_waiting_ || comm_.size_ == 1 || now - started_ < ProgressBoard::post_after(comm_.timeout_)) return;
  posted_waiting_ = true;
  comm_.progress_board_.post_waiting(sequence_, name_);
}

std::string Collective::absent_ranks() const {
  // Every rank still in this collective posts within post_after() of entering it (plus a liveness
  // interval); the first deadline may come just after the last rank entered.
  const auto patience = ProgressBoard::post_after(comm_.timeout_) + 2 * kLivenessInterval + std::chrono::milliseconds(300);
  return comm_.progress_board_.report(sequence_, name_, patience);
}

int Collective::rank() const { return comm_.rank_; }
Workspace& Collective::workspace() { return comm_.workspace_; }
const std::vector<int>& Collective::node_of_rank() const { return comm_.node_of_rank_; }
int Collective::size() const { return comm_.size_; }

std::string Collective::describe() const {
  return fmt::format("rank {}/{}: {} #{} ({})", comm_.rank_, comm_.size_, name_, sequence_, algorithm_);
}

void Collective::fail(const std::string& what) {
  std::string message = fmt::format("pride {}: {}", describe(), what);
  comm_.notify_abort(message);
  throw Error(message);
}

RequestPtr Collective::send(int peer, uint32_t slot, const void* buf, size_t bytes, MemoryType memory) {
  PRIDE_ENFORCE(slot <= kMaxSlot, "{}: slot {} out of range", describe(), slot);
  TrafficCounters& counters = comm_.traffic_[algorithm_];
  counters.bytes_sent += bytes;
  if (memory != MemoryType::kHost) counters.device_bytes_sent += bytes;
  return comm_.transport_->isend(peer, collective_tag(sequence_, slot), buf, bytes, memory);
}

RequestPtr Collective::recv(int peer, uint32_t slot, void* buf, size_t bytes, MemoryType memory) {
  PRIDE_ENFORCE(slot <= kMaxSlot, "{}: slot {} out of range", describe(), slot);
  return comm_.transport_->irecv(peer, collective_tag(sequence_, slot), buf, bytes, memory);
}

void Collective::check_request(const Request& r) {
  if (r.state() == Request::State::kDone) {
    if (r.is_send()) return;
    comm_.traffic_[algorithm_].bytes_received += r.bytes();
    if (r.bytes() == r.posted_bytes()) return;
    // Every message of a collective has a size both ends compute from the call's arguments; a
    // shorter one means the ranks disagree (caught earlier by the fingerprint unless it is disabled).
    std::string message = fmt::format("pride {}: peer {} sent {} bytes where this rank expected {}; the ranks "
                                      "called the collective with different arguments", describe(), r.peer(),
                                      r.bytes(), r.posted_bytes());
    comm_.notify_abort(message);
    throw MismatchError(message);
  }
  std::string peer_failure = comm_.transport_->peer_failure(r.peer());
  if (!peer_failure.empty() && comm_.deferred_notice_from(r.peer()) == nullptr) {
    // The reset can be seen before the notice that it follows: read on for it. It throws with the root
    // cause if the peer gave up in this collective, and defers it if the peer had finished it.
    comm_.await_abort_notice(describe(), sequence_);
  }
  if (const Communicator::DeferredNotice* notice = comm_.deferred_notice_from(r.peer())) {
    // That peer finished this collective before it gave up, so it had received all this rank sent it;
    // its closing connection may still fail a send's last acknowledgement. A receive that failed lost
    // data, though.
    if (r.is_send()) return;
    const std::string message = fmt::format("pride {}: the receive from peer {} failed ({}) after that peer gave up: "
                                            "{}", describe(), r.peer(), r.error(), notice->reason);
    comm_.notify_abort(message);
    throw PeerError(message);
  }
  std::string message;
  if (!peer_failure.empty()) {
    message = fmt::format("pride {}: peer {} failed ({})", describe(), r.peer(), peer_failure);
  } else if (!r.is_send() && r.error() == "Message truncated") {
    message = fmt::format("pride {}: peer {} sent more data than this rank expected; the ranks called "
                          "the collective with different arguments", describe(), r.peer());
    comm_.notify_abort(message);
    throw MismatchError(message);
  } else {
    message = fmt::format("pride {}: {} peer {} failed: {}", describe(), r.is_send() ? "send to" : "receive from",
                          r.peer(), r.error());
  }
  comm_.notify_abort(message);
  throw PeerError(message);
}

void Collective::wait(RequestPtr& request) {
  if (!request) return;
  uint64_t idle_rounds = 0;
  Clock::time_point next_liveness_check = Clock::now() + kLivenessInterval;
  for (uint64_t round = 1; request->pending(); ++round) {
    // Checked on a counter that progress does not reset: other traffic must not postpone the deadline.
    if ((round & 63) == 0) {
      const Clock::time_point now = Clock::now();
      if (now > deadline_) {
        std::string message = fmt::format("pride {}: timed out waiting to {} peer {} (the group's timeout of {} ms "
                                          "passed){}", describe(), request->is_send() ? "send to" : "receive from",
                                          request->peer(), comm_.timeout_.count(), absent_ranks());
        comm_.notify_abort(message);
        throw TimeoutError(message);
      }
      if (const Communicator::DeferredNotice* notice = comm_.deferred_notice_from(request->peer())) {
        // That peer finished this collective and gave up: what it sent this rank has arrived by now, and
        // it has received all this rank sent it; a request to it still pending will not end.
        if (now - notice->arrived > kDeferredNoticeGrace) {
          std::string message = fmt::format("pride {}: peer {} gave up after finishing this collective, and this "
                                            "rank's {} it did not end: {}", describe(), request->peer(),
                                            request->is_send() ? "send to" : "receive from", notice->reason);
          comm_.notify_abort(message);
          throw PeerError(message);
        }
      } else if (now >= next_liveness_check) {  // a long wait: is the peer still there?
        next_liveness_check = now + kLivenessInterval;
        note_long_wait(now);
        // A tag receive is not bound to an endpoint, so UCX never fails it when its sender dies; the
        // endpoint's error (other hosts) or the process table (this host) tells.
        std::string gone = comm_.peer_gone(request->peer());
        if (!gone.empty()) {
          comm_.await_abort_notice(describe(), sequence_);
          if (comm_.deferred_notice_from(request->peer()) != nullptr) continue;  // it finished: the grace applies
          std::string message = fmt::format("pride {}: peer {} failed: {}", describe(), request->peer(), gone);
          comm_.notify_abort(message);
          throw PeerError(message);
        }
      }
    }
    if (comm_.progress_or_throw(describe(), sequence_)) {
      idle_rounds = 0;
      continue;
    }
    comm_.idle(++idle_rounds);
  }
  check_request(*request);
}

void Collective::poll() { comm_.progress_or_throw(describe(), sequence_); }

void Collective::wait_all(std::vector<RequestPtr>& requests) {
  for (auto& r : requests) wait(r);
}

void Collective::sendrecv(int to, const void* sbuf, size_t sbytes, int from, void* rbuf, size_t rbytes,
                          uint32_t slot) {
  RequestPtr r = recv(from, slot, rbuf, rbytes);
  RequestPtr s = send(to, slot, sbuf, sbytes);
  wait(r);
  wait(s);
}

void Collective::wait_external(const std::string& what, const std::function<bool()>& done,
                               const std::function<std::string()>& error, const std::function<void()>& give_up) {
  // Every failure path stops the work first: the peers' notices close this rank's connections, and the
  // caller frees the work's buffers as the exception unwinds.
  auto fail_with = [&](auto make_error, const std::string& message) {
    give_up();
    comm_.notify_abort(message);
    throw make_error(message);
  };
  uint64_t idle_rounds = 0;
  Clock::time_point next_liveness_check = Clock::now() + kLivenessInterval;
  for (;;) {
    if (done()) return;
    const std::string failure = error();
    if (!failure.empty()) {
      // The other engine often sees a peer's death first ("remote process exited"): name the root cause
      // where this rank can, an abort notice that is on its way or the peer that is gone.
      try {
        comm_.await_abort_notice(describe(), sequence_);
      } catch (...) {
        give_up();
        throw;
      }
      std::string blame;
      for (int peer = 0; peer < comm_.size_ && blame.empty(); ++peer) {
        if (const Communicator::DeferredNotice* notice = comm_.deferred_notice_from(peer)) {
          blame = fmt::format(" (peer {} gave up: {})", peer, notice->reason);
          continue;
        }
        const std::string gone = peer == comm_.rank_ ? std::string() : comm_.peer_gone(peer);
        if (!gone.empty()) blame = fmt::format(" (peer {} failed: {})", peer, gone);
      }
      fail_with([](const std::string& m) { return PeerError(m); },
                fmt::format("pride {}: {} failed: {}{}", describe(), what, failure, blame));
    }
    const Clock::time_point now = Clock::now();
    if (now > deadline_) {
      fail_with([](const std::string& m) { return TimeoutError(m); },
                fmt::format("pride {}: timed out waiting for {} (the group's timeout of {} ms passed){}", describe(),
                            what, comm_.timeout_.count(), absent_ranks()));
    }
    for (const Communicator::DeferredNotice& notice : comm_.deferred_notices_) {
      // A peer that finished this collective and gave up (its engine's work aborted with it) has sent
      // all it will; the other engine has had the grace to deliver it.
      if (now - notice.arrived > kDeferredNoticeGrace) {
        fail_with([](const std::string& m) { return PeerError(m); },
                  fmt::format("pride {}: {}: peer {} gave up after finishing this collective, and this rank's part "
                              "did not end: {}", describe(), what, notice.peer, notice.reason));
      }
    }
    if (now >= next_liveness_check) {  // the other engine may never notice a dead peer: this rank looks
      next_liveness_check = now + kLivenessInterval;
      note_long_wait(now);
      for (int peer = 0; peer < comm_.size_; ++peer) {
        // A peer that gave up after finishing this collective is expected to close its connections.
        if (peer == comm_.rank_ || comm_.deferred_notice_from(peer) != nullptr) continue;
        const std::string gone = comm_.peer_gone(peer);
        if (gone.empty()) continue;
        try {
          comm_.await_abort_notice(describe(), sequence_);
        } catch (...) {
          give_up();
          throw;
        }
        if (comm_.deferred_notice_from(peer) != nullptr) continue;  // it finished: the grace applies
        fail_with([](const std::string& m) { return PeerError(m); },
                  fmt::format("pride {}: {}: peer {} failed: {}", describe(), what, peer, gone));
      }
    }
    bool progressed = false;
    try {
      progressed = comm_.progress_or_throw(describe(), sequence_);  // another rank's abort notice, or torch's abort()
    } catch (...) {
      give_up();
      throw;
    }
    // The other engine's completion raises no event on this transport's fd: poll it every 50 µs at
    // worst, not every millisecond as idle() would.
    if (progressed) {
      idle_rounds = 0;
    } else if (++idle_rounds > 256) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    } else {
      std::this_thread::yield();
    }
  }
}

void Collective::count_external(size_t bytes_sent, size_t bytes_received, MemoryType memory) {
  TrafficCounters& counters = comm_.traffic_[algorithm_];
  counters.bytes_sent += bytes_sent;
  counters.bytes_received += bytes_received;
  if (memory != MemoryType::kHost) counters.device_bytes_sent += bytes_sent;
}

// ---- Communicator ----------------------------------------------------------------------------

Communicator::Communicator(std::shared_ptr<Store> store, int rank, int size, Options options)
    : store_(std::move(store)), rank_(rank), size_(size),
      timeout_(options.timeout.count() > 0 ? options.timeout : Settings::get().timeout),
      progress_board_(store_, rank, size) {
  PRIDE_CHECK_ARG(size >= 1 && rank >= 0 && rank < size, "rank {} is not in [0, {})", rank, size);
  learn_hosts(options.hostname);
  std::vector<bool> watched_locally(size_t(size), false);
  if (Settings::get().shared_memory) {
    for (int p = 0; p < size; ++p) watched_locally[size_t(p)] = local_pid_of_rank_[size_t(p)] != 0;
  }
  transport_ = make_ucx_transport(rank, size, *store_, watched_locally);
  abort_buffer_.resize(kAbortMessageBytes);
  post_abort_receive();
}

Communicator::~Communicator() {
  settle_deferred_notices();
  abort_receive_.reset();
  if (broken()) {
    transport_->abort();  // usually done already; the transport makes a second call cheap
  } else {
    // Let in-flight eager sends (the last result chunks) leave before endpoints close.
    for (int i = 0; i < 64 && transport_->progress(); ++i) {
    }
  }
}

void Communicator::learn_hosts(const std::string& hostname) {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  std::string host(name);
  if (!Settings::get().hostname.empty()) host = Settings::get().hostname;
  if (!hostname.empty()) host = hostname;
  // "<cores> <pid> <pid namespace> <boot id> <hostname>": the core count lets every rank compute the
  // same ranks-per-core figure for the cost model; pid and namespace let same-host peers check
  // liveness; the boot id tells which ranks share a machine's cores even when they are simulated hosts
  // (network namespaces, scripts/netns_run.sh) with hostnames of their own.
  std::error_code ec;
  std::string pid_ns = std::filesystem::read_symlink("/proc/self/ns/pid", ec).string();
  if (ec || pid_ns.empty()) pid_ns = "unknown";
  const HostEntry mine{host_topology().cores, long(getpid()), pid_ns, boot_id(), host};
  const std::string entry = format_host_entry(mine);
  store_->set("host/" + std::to_string(rank_), std::vector<uint8_t>(entry.begin(), entry.end()));
  // One gather (a wait and a multi-get, a round trip each on torch's TCPStore), not one read per rank.
  std::vector<std::string> keys;
  keys.reserve(size_t(size_));
  for (int r = 0; r < size_; ++r) keys.push_back("host/" + std::to_string(r));
  const std::vector<std::vector<uint8_t>> published = store_->multi_get(keys);
  std::vector<HostEntry> entries;
  entries.reserve(published.size());
  for (const auto& v : published) {
    entries.push_back(parse_host_entry(std::string_view(reinterpret_cast<const char*>(v.data()), v.size())));
  }
  HostLayout layout = lay_out_hosts(entries, rank_);
  node_of_rank_ = std::move(layout.node_of_rank);
  local_pid_of_rank_ = std::move(layout.local_pid_of_rank);
  local_rank_ = layout.local_rank;
  local_size_ = layout.local_size;
  num_nodes_ = layout.num_nodes;
  const int ranks_on_machine = layout.ranks_on_machine;
  local_process_of_rank_.resize(size_t(size_));
  for (int r = 0; r < size_; ++r) {
    if (local_pid_of_rank_[size_t(r)] != 0) local_process_of_rank_[size_t(r)] = ProcessWatch(pid_t(local_pid_of_rank_[size_t(r)]));
  }
  ranks_per_core_ = std::max(ranks_per_core_, layout.ranks_per_core);
  // A subgroup (say, of this rank alone) sees only its own members on the machine, but the job's other
  // ranks still use its cores: count the most that any of this process's groups has found.
  const int on_machine = most_ranks_on_this_machine(std::max({1, ranks_on_machine, local_size_}));
  cores_shared_ = ranks_per_core_ > 1.0 || on_machine > host_topology().cores;
  kernel_threads_ = choose_kernel_threads(Settings::get().threads, host_topology().cores, on_machine);
}

int most_ranks_on_this_machine(int found) {
  static std::atomic<int> most{1};
  int seen = most.load();
  while (seen < found && !most.compare_exchange_weak(seen, found)) {
  }
  return std::max(seen, found);
}

int choose_kernel_threads(int setting, int cores, int ranks_on_machine) {
  if (setting > 0) return setting;
  return std::max(1, cores / std::max(1, ranks_on_machine));
}

std::string Communicator::peer_gone(int peer) const {
  if (peer < 0 || peer >= size_) return {};
  std::string gone = transport_->peer_failure(peer);
  return gone.empty() ? local_peer_gone(peer) : gone;
}

std::string Communicator::local_peer_gone(int peer) const {
  if (peer < 0 || peer >= size_ || local_pid_of_rank_[size_t(peer)] == 0) return {};
  const long pid = local_pid_of_rank_[size_t(peer)];
  if (!Settings::get().shared_memory) {
    // Over TCP loopback UCX reports a dead peer itself, to every rank alike. Noticing a zombie here
    // first would make this rank abort and reset its own connections before the others have heard of
    // the dead peer, and they would blame this rank instead; so only a reaped process counts.
    if (kill(pid_t(pid), 0) == -1 && errno == ESRCH) return fmt::format("its process (pid {}) has exited", pid);
    return {};
  }
  // Shared memory reports nothing: pride watches these peers itself (a pidfd), zombies included.
  switch (local_process_of_rank_[size_t(peer)].state()) {
    case ProcessState::kGone: return fmt::format("its process (pid {}) has exited", pid);
    case ProcessState::kZombie: return fmt::format("its process (pid {}) has exited (a zombie, not yet reaped)", pid);
    case ProcessState::kRunning: break;
  }
  return {};
}

void Communicator::post_abort_receive() {
  abort_receive_ = transport_->irecv(Transport::kAnyPeer, kControlTag, abort_buffer_.data(), abort_buffer_.size());
}

bool Communicator::progress_or_throw(const std::string& context, uint64_t sequence) {
  if (abort_requested_.load()) {
    // The notices out and every connection closed before the operation unwinds: its Work fails, and the
    // caller may free buffers that a send still queued or a peer's read of a large one would touch.
    std::string message = fmt::format("pride {}: the process group was aborted", context);
    notify_abort(message);
    throw PeerError(message);
  }
  bool progressed = transport_->progress();
  while (abort_receive_ && !abort_receive_->pending()) {
    const size_t bytes = abort_receive_->bytes();
    uint64_t completed = 0;
    std::string reason;
    if (abort_receive_->state() == Request::State::kDone && bytes >= kAbortHeaderBytes) {
      std::memcpy(&completed, abort_buffer_.data(), kAbortHeaderBytes);
      reason.assign(abort_buffer_.data() + kAbortHeaderBytes,
                    strnlen(abort_buffer_.data() + kAbortHeaderBytes, bytes - kAbortHeaderBytes));
    }
    const int peer = abort_receive_->peer();
    post_abort_receive();
    // A rank that gave up after finishing this collective (its notice says so) leaves nothing of it
    // undone: what it sent has left before the notice, and it received everything it was sent. This
    // rank finishes the collective too, as that rank did, and the group breaks after it; failing it
    // here made the ranks disagree on the outcome of the last call before an abort.
    if (sequence != 0 && completed >= sequence) {
      deferred_notices_.push_back({peer, completed, reason, Clock::now()});
      continue;
    }
    fail_on_notice(context, peer, reason);
  }
  for (const DeferredNotice& notice : deferred_notices_) {
    // Outside a collective (point-to-point), or in one past what that peer finished: it is not coming.
    if (sequence == 0 || sequence > notice.completed) fail_on_notice(context, notice.peer, notice.reason);
  }
  return progressed;
}

void Communicator::fail_on_notice(const std::string& context, int peer, const std::string& reason) {
  std::string message = fmt::format("pride {}: peer {} gave up: {}", context, peer, reason);
  broken_reason_ = message;
  transport_->abort();  // before the failed collective unwinds and frees the buffers of its sends
  throw PeerError(message);
}

const Communicator::DeferredNotice* Communicator::deferred_notice_from(int peer) const {
  for (const DeferredNotice& notice : deferred_notices_) {
    if (notice.peer == peer) return &notice;
  }
  return nullptr;
}

void Communicator::settle_deferred_notices(uint64_t next_sequence) {
  if (broken()) return;
  for (const DeferredNotice& notice : deferred_notices_) {
    // A peer that finished this collective too (it got ahead: the fingerprint check is off) sent its
    // part before its notice, as for the one in progress when the notice came.
    if (next_sequence != 0 && next_sequence <= notice.completed) continue;
    // Only marked broken: nothing of this rank's is in flight, and the connections stay open until the
    // group ends (close(), the destructor), so that this rank's last messages, complete here but
    // perhaps still in the transport's buffers, reach the peers still reading them.
    broken_reason_ = fmt::format("rank {}/{}: peer {} gave up after collective #{}: {}", rank_, size_, notice.peer,
                                 notice.completed, notice.reason);
    return;
  }
}

void Communicator::await_abort_notice(const std::string& context, uint64_t sequence) {
  // A rank that gives up sends its notice and then resets its connections at once; the reset can be
  // seen before the notice is read. Reading on for a moment lets the notice, which names the root
  // cause (the rank that really died), win over the reset it caused.
  const auto until = Clock::now() + std::chrono::milliseconds(200);
  while (Clock::now() < until) progress_or_throw(context, sequence);
}

void Communicator::notify_abort(const std::string& reason) {
  // Once: the first reason is the root cause, and the peers and the log have it. torch's abort() in the
  // middle of a collective reaches here from the collective and again from the destroy that follows.
  if (notified_) return;
  broken_reason_ = reason;
  if (aborting_) return;
  aborting_ = true;
  log().error("{}", reason);
  // Fire-and-forget: eager messages leave on progress; peers that are gone simply fail these sends.
  // The text lives in a member: a notice still queued to a stuck peer may be read after we return.
  std::memcpy(abort_notice_.data(), &completed_, kAbortHeaderBytes);
  char* text = abort_notice_.data() + kAbortHeaderBytes;
  std::snprintf(text, abort_notice_.size() - kAbortHeaderBytes, "%s", reason.c_str());
  const size_t length = kAbortHeaderBytes + std::strlen(text) + 1;
  std::vector<RequestPtr> notices;
  for (int p = 0; p < size_; ++p) {
    if (p != rank_) notices.push_back(transport_->isend(p, kControlTag, abort_notice_.data(), length));
  }
  auto until = Clock::now() + std::chrono::milliseconds(200);
  for (auto& n : notices) {
    while (n->pending() && Clock::now() < until) transport_->progress();
  }
  notices.clear();
  // The group is broken from here on. Close every connection now, while the failed collective's
  // buffers still exist: a send still queued to a stuck peer must not read them after the caller
  // has unwound and freed them.
  transport_->abort();
  aborting_ = false;
  notified_ = true;
}

void Communicator::notify_requested_abort() {
  notify_abort(fmt::format("pride rank {}/{}: the process group was aborted", rank_, size_));
}

void Communicator::idle(uint64_t idle_rounds) {
  // Spin first: on a core of its own a waiting rank gets its answer in microseconds. Then block on the
  // transport's event fd until a message arrives. When this host's ranks outnumber its cores, a
  // spinning (or merely yielding) rank takes CPU from the rank it waits for, so it blocks almost at
  // once and the scheduler runs the ranks that have work. That counts the machine's ranks, not only
  // the host's: simulated hosts on one machine (scripts/netns_run.sh) share its cores too, and with 2
  // ranks per simulated host and 4 on 2 cores, spinning waits took half of the ranks' CPU time in a
  // hierarchical sign-allreduce. The timeout bounds how late a deadline or a dead peer is noticed if
  // no event ever comes.
  if (idle_rounds < (cores_shared_ ? 16u : 2048u)) return;
  transport_->wait_for_activity(std::chrono::milliseconds(1));
}

Collective Communicator::begin(const std::string& name, const std::string& algorithm, Fingerprint fingerprint,
                               CheckPayload* payload) {
  settle_deferred_notices(sequence_ + 1);
  PRIDE_ENFORCE_T(PeerError, !broken(), "pride rank {}/{}: {} refused: the group failed earlier ({})", rank_,
                  size_, name, broken_reason_);
  fingerprint.sequence = ++sequence_;
  Collective c(*this, name, algorithm, fingerprint.sequence, Clock::now() + timeout_);
  if (size_ == 1 || !Settings::get().check_fingerprint) return c;

  fingerprint_checks_.fetch_add(1, std::memory_order_relaxed);
  check_fingerprints(c, fingerprint, payload);
  return c;
}

Collective Communicator::begin_agreed(const std::string& name, const std::string& algorithm) {
  settle_deferred_notices(sequence_ + 1);
  PRIDE_ENFORCE_T(PeerError, !broken(), "pride rank {}/{}: {} refused: the group failed earlier ({})", rank_,
                  size_, name, broken_reason_);
  return Collective(*this, name, algorithm, ++sequence_, Clock::now() + timeout_);
}

namespace {

// A fingerprint as the check reduces it: every field and its complement. The element-wise MAX over the
// ranks gives back (v, ~v) for a field exactly when every rank holds the same v (otherwise it gives the
// largest v and the complement of the smallest), so one MAX-allreduce tells every rank, identically,
// whether all agree.
using CheckBlock = std::array<uint64_t, 8>;

CheckBlock check_block(const Fingerprint& f) {
  const FingerprintWords words = fingerprint_words(f);
  CheckBlock b{};
  for (size_t i = 0; i < 4; ++i) {
    b[2 * i] = words[i];
    b[2 * i + 1] = ~words[i];
  }
  return b;
}

}  // namespace

namespace {

// One message of the check: the block and the payload area, the same size for every collective, so
// that ranks calling different collectives (or the same one with different sizes) still exchange
// messages that match, and all learn that they disagree.
struct CheckMessage {
  CheckBlock block;
  std::array<uint8_t, CheckPayload::kMaxBytes> payload;
};
static_assert(sizeof(CheckMessage) == 512);

}  // namespace

void Communicator::check_fingerprints(Collective& c, const Fingerprint& mine, CheckPayload* payload) {
  // The check is an allreduce of the CheckMessage: MAX over the block, payload->combine over the
  // payload. Recursive doubling, as allreduce_small in collectives/engine/standard/allreduce.cc: with
  // p2 the largest power of two <= N, ranks p2..N-1 first hand their message to rank r - p2 and get
  // the result back at the end; among the first p2 ranks, round k pairs r with r ^ 2^k, and both
  // combine (lower rank's value, upper rank's value) in that order, so every rank gets the same bits.
  // O(log N) messages of 512 bytes per rank, where an all-to-all of fingerprints takes 2(N - 1).
  //
  // The check finishes before the collective sends anything of its own: ranks that disagree may also
  // disagree on the sizes and partners of those messages, and this way nothing of a mismatched call is
  // sent and the group stays usable. A small enough allreduce needs nothing more (its data travel in
  // the payload), so it costs no rounds beyond the check's.
  const bool with_payload = payload != nullptr;
  if (with_payload) {
    PRIDE_ENFORCE(payload->bytes <= CheckPayload::kMaxBytes && payload->combine,
                  "{}: a check payload of {} bytes (at most {}) needs a combine function", c.describe(),
                  payload->bytes, CheckPayload::kMaxBytes);
  }
  const CheckBlock expected = check_block(mine);
  CheckMessage have{}, theirs{};
  have.block = expected;
  if (with_payload && payload->bytes > 0) std::memcpy(have.payload.data(), payload->data, payload->bytes);
  auto fold = [&](const CheckMessage& lower, const CheckMessage& upper) {
    for (size_t i = 0; i < have.block.size(); ++i) have.block[i] = std::max(lower.block[i], upper.block[i]);
    if (with_payload) payload->combine(have.payload.data(), lower.payload.data(), upper.payload.data());
  };
  uint64_t messages_received = 0, messages_sent = 0;
  auto exchange = [&](int to, int from, uint32_t round) {
    const Tag tag = collective_tag(mine.sequence, kFingerprintSlot + round);
    RequestPtr in = from >= 0 ? transport_->irecv(from, tag, &theirs, sizeof theirs) : nullptr;
    RequestPtr out = to >= 0 ? transport_->isend(to, tag, &have, sizeof have) : nullptr;
    c.wait(in);
    c.wait(out);
    messages_received += from >= 0;
    messages_sent += to >= 0;
  };
  // Rounds: 0 the fold, 1 the result going back to a folded rank, 2 + k round k.
  int p2 = 1;
  while (p2 * 2 <= size_) p2 *= 2;
  if (rank_ >= p2) {
    exchange(rank_ - p2, -1, 0);
    exchange(-1, rank_ - p2, 1);
    have = theirs;
  } else {
    const bool has_folded_partner = rank_ + p2 < size_;
    if (has_folded_partner) {
      exchange(-1, rank_ + p2, 0);
      fold(CheckMessage(have), theirs);
    }
    for (int mask = 1, k = 0; mask < p2; mask <<= 1, ++k) {
      const int partner = rank_ ^ mask;
      exchange(partner, partner, uint32_t(2 + k));
      const CheckMessage mine_now = have;
      if (rank_ < partner) {
        fold(mine_now, theirs);
      } else {
        fold(theirs, mine_now);
      }
    }
    if (has_folded_partner) exchange(rank_ + p2, -1, 1);
  }
  auto& counters = traffic_[c.algorithm()];
  counters.bytes_received -= messages_received * sizeof(CheckMessage);  // wait() counted them; not payload
  if (have.block != expected) name_mismatch(c, mine);
  if (with_payload) {
    // Only the payload is the algorithm's traffic; it reaches the caller only once the ranks agree.
    counters.bytes_sent += messages_sent * payload->bytes;
    counters.bytes_received += messages_received * payload->bytes;
    if (payload->bytes > 0) std::memcpy(payload->data, have.payload.data(), payload->bytes);
    payload->reduced = true;
  }
}

void Communicator::name_mismatch(Collective& c, const Fingerprint& mine) {
  // Every rank knows the ranks disagree (the check's result is the same everywhere). Only now, on the
  // error path, does every rank learn every call, so that all raise the same message naming the first
  // rank whose call differs from theirs.
  const FingerprintWords my_words = fingerprint_words(mine);
  std::vector<FingerprintWords> theirs(static_cast<size_t>(size_));
  std::vector<RequestPtr> requests;
  const Tag tag = collective_tag(mine.sequence, kMismatchSlot);
  for (int p = 0; p < size_; ++p) {
    if (p != rank_) requests.push_back(transport_->irecv(p, tag, theirs[size_t(p)].data(), sizeof(FingerprintWords)));
  }
  for (int p = 0; p < size_; ++p) {
    if (p != rank_) requests.push_back(transport_->isend(p, tag, my_words.data(), sizeof(FingerprintWords)));
  }
  c.wait_all(requests);
  for (int p = 0; p < size_; ++p) {
    if (p != rank_ && theirs[size_t(p)] != my_words) {
      throw MismatchError(fmt::format("pride {}: ranks disagree on the collective: this rank called {}, rank {} "
                                      "called {}", c.describe(), fingerprint_text(mine, mine.describe), p,
                                      fingerprint_text(from_words(theirs[size_t(p)]), mine.describe)));
    }
  }
  // The check saw a difference that the fingerprints do not show: cannot happen, but never pass silently.
  throw MismatchError(fmt::format("pride {}: ranks disagree on the collective (this rank called {})", c.describe(),
                                  fingerprint_text(mine, mine.describe)));
}

RequestPtr Communicator::p2p_send(int peer, uint64_t user_tag, const void* buf, size_t bytes) {
  PRIDE_CHECK_ARG(user_tag < kP2pBit, "tag {} is too large", user_tag);
  traffic_["p2p"].bytes_sent += bytes;
  return transport_->isend(peer, kP2pBit | user_tag, buf, bytes);
}

RequestPtr Communicator::p2p_recv(int peer, uint64_t user_tag, void* buf, size_t bytes) {
  PRIDE_CHECK_ARG(user_tag < kP2pBit, "tag {} is too large", user_tag);
  return transport_->irecv(peer, kP2pBit | user_tag, buf, bytes);
}

void Communicator::close(std::chrono::milliseconds patience) {
  settle_deferred_notices();  // a peer that gave up says no goodbye
  if (abort_requested_.load()) {
    // torch's abort() came before or during the destroy: the peers are told, as after an abort, even
    // if a peer's notice has already marked the group broken (without notices from this rank).
    notify_requested_abort();
    return;
  }
  if (broken()) return;  // a failed group closed its connections already
  constexpr Tag kGoodbyeTag = kControlTag | 1;
  transport_->expect_close();  // a peer that got every goodbye first closes while this rank still waits
  std::vector<uint8_t> goodbyes(size_t(size_), 0);
  uint8_t mine = 1;
  std::vector<RequestPtr> requests;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    requests.push_back(transport_->irecv(p, kGoodbyeTag, &goodbyes[size_t(p)], 1));
    requests.push_back(transport_->isend(p, kGoodbyeTag, &mine, 1));
  }
  // A peer that has died or aborted says no goodbye: waiting for it would hold destroy_process_group()
  // for the whole patience, in every group with that peer (Gloo's destroy returns at once).
  const auto deadline = Clock::now() + patience;
  auto next_liveness_check = Clock::now() + kLivenessInterval;
  std::vector<bool> gone(size_t(size_), false);
  bool a_peer_aborted = false;
  for (auto& r : requests) {
    while (r->pending() && !gone[size_t(r->peer())] && !a_peer_aborted && Clock::now() < deadline &&
           !abort_requested_.load()) {
      if (!transport_->progress()) transport_->wait_for_activity(std::chrono::milliseconds(1));
      a_peer_aborted = abort_receive_ && !abort_receive_->pending();
      if (Clock::now() >= next_liveness_check) {
        next_liveness_check = Clock::now() + kLivenessInterval;
        for (int p = 0; p < size_; ++p) gone[size_t(p)] = p != rank_ && (gone[size_t(p)] || !peer_gone(p).empty());
      }
    }
  }
  const auto late = std::count_if(requests.begin(), requests.end(), [](const RequestPtr& r) { return r->pending(); });
  if (late > 0) log().debug("rank {}: closing with {} goodbye messages unanswered", rank_, late);
  if (abort_requested_.load()) {
    notify_requested_abort();
    requests.clear();  // the connections are closed: nothing reads their buffers any more
    return;
  }
  requests.clear();  // cancels what is still pending
  abort_receive_.reset();
  broken_reason_ = fmt::format("rank {}/{}: the process group was destroyed", rank_, size_);
  transport_->close();
}

void Communicator::p2p_wait(RequestPtr& request, const std::string& what) {
  Collective c(*this, what, "p2p", 0, Clock::now() + timeout_);
  c.wait(request);
}

}  // namespace pride
