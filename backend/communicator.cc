#include "backend/communicator.h"

#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>

#include <charconv>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <thread>

#include "backend/common/error.h"
#include "backend/common/log.h"
#include "backend/common/settings.h"
#include "backend/liveness/process_state.h"
#include "backend/topology/host_topology.h"

namespace pride {
namespace {

// Tag layout (47 caller bits, see transport.h):
//   bit 46 set:   point-to-point, user tag in bits 0..45
//   bit 46 clear: collective; sequence (mod 2^24) in bits 22..45, slot in bits 0..21
constexpr Tag kP2pBit = Tag(1) << 46;
constexpr int kSlotBits = 22;
constexpr Tag kSequenceMask = (Tag(1) << 24) - 1;
constexpr uint32_t kFingerprintSlot = Collective::kMaxSlot;
constexpr size_t kAbortMessageBytes = 512;
// How often a wait that makes no progress asks whether its peer is still alive.
constexpr auto kLivenessInterval = Communicator::kLivenessInterval;

Tag collective_tag(uint64_t sequence, uint32_t slot) {
  return ((sequence & kSequenceMask) << kSlotBits) | Tag(slot);
}

// One rank's "<cores> <pid> <pid namespace> <hostname>" entry (learn_hosts). Parsed with from_chars,
// not iostreams: the start-up path of the Python extension must not depend on locale facets (see
// bindings/exports.map). A malformed entry reads as one core, no pid, an unknown namespace.
struct HostEntry {
  int cores = 1;
  long pid = 0;
  std::string pid_ns;
  std::string host;
};

HostEntry parse_host_entry(std::string_view text) {
  HostEntry e;
  auto next_field = [&text]() {
    const size_t start = text.find_first_not_of(' ');
    if (start == std::string_view::npos) return std::string_view{};
    text.remove_prefix(start);
    const size_t end = std::min(text.find(' '), text.size());
    std::string_view field = text.substr(0, end);
    text.remove_prefix(end);
    return field;
  };
  const std::string_view cores = next_field(), pid = next_field();
  std::from_chars(cores.data(), cores.data() + cores.size(), e.cores);
  std::from_chars(pid.data(), pid.data() + pid.size(), e.pid);
  e.pid_ns = std::string(next_field());
  const size_t start = text.find_first_not_of(' ');
  e.host = start == std::string_view::npos ? std::string() : std::string(text.substr(start));
  return e;
}

std::string fingerprint_text(const Fingerprint& f) {
  return fmt::format("#{} op {} dtype {} numel {} detail {:#x}", f.sequence, f.op, f.dtype, f.numel, f.detail);
}

}  // namespace

// ---- Collective ------------------------------------------------------------------------------

Collective::Collective(Communicator& comm, std::string name, std::string algorithm, uint64_t sequence,
                       Clock::time_point deadline)
    : comm_(comm), name_(std::move(name)), algorithm_(std::move(algorithm)), sequence_(sequence),
      deadline_(deadline) {
  comm_.traffic_[algorithm_].calls++;
}

int Collective::rank() const { return comm_.rank_; }
Workspace& Collective::workspace() { return comm_.workspace_; }
int Collective::size() const { return comm_.size_; }

std::string Collective::describe() const {
  return fmt::format("rank {}/{}: {} #{} ({})", comm_.rank_, comm_.size_, name_, sequence_, algorithm_);
}

void Collective::fail(const std::string& what) {
  std::string message = fmt::format("pride {}: {}", describe(), what);
  comm_.notify_abort(message);
  throw Error(message);
}

RequestPtr Collective::send(int peer, uint32_t slot, const void* buf, size_t bytes) {
  PRIDE_ENFORCE(slot <= kMaxSlot, "{}: slot {} out of range", describe(), slot);
  comm_.traffic_[algorithm_].bytes_sent += bytes;
  return comm_.transport_->isend(peer, collective_tag(sequence_, slot), buf, bytes);
}

RequestPtr Collective::recv(int peer, uint32_t slot, void* buf, size_t bytes) {
  PRIDE_ENFORCE(slot <= kMaxSlot, "{}: slot {} out of range", describe(), slot);
  return comm_.transport_->irecv(peer, collective_tag(sequence_, slot), buf, bytes);
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
  std::string message;
  if (!peer_failure.empty()) {
    comm_.await_abort_notice(describe());  // throws with the root cause if the peer gave up itself
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
                                          "passed)", describe(), request->is_send() ? "send to" : "receive from",
                                          request->peer(), comm_.timeout_.count());
        comm_.notify_abort(message);
        throw TimeoutError(message);
      }
      if (now >= next_liveness_check) {  // a long wait: is the peer still there?
        next_liveness_check = now + kLivenessInterval;
        // A tag receive is not bound to an endpoint, so UCX never fails it when its sender dies; the
        // endpoint's error (other hosts) or the process table (this host) tells.
        std::string gone = comm_.peer_gone(request->peer());
        if (!gone.empty()) {
          comm_.await_abort_notice(describe());
          std::string message = fmt::format("pride {}: peer {} failed: {}", describe(), request->peer(), gone);
          comm_.notify_abort(message);
          throw PeerError(message);
        }
      }
    }
    if (comm_.progress_or_throw(describe())) {
      idle_rounds = 0;
      continue;
    }
    comm_.idle(++idle_rounds);
  }
  check_request(*request);
}

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

// ---- Communicator ----------------------------------------------------------------------------

Communicator::Communicator(std::shared_ptr<Store> store, int rank, int size, Options options)
    : store_(std::move(store)), rank_(rank), size_(size),
      timeout_(options.timeout.count() > 0 ? options.timeout : Settings::get().timeout) {
  PRIDE_CHECK_ARG(size >= 1 && rank >= 0 && rank < size, "rank {} is not in [0, {})", rank, size);
  learn_hosts();
  std::vector<bool> watched_locally(size_t(size), false);
  if (Settings::get().shared_memory) {
    for (int p = 0; p < size; ++p) watched_locally[size_t(p)] = local_pid_of_rank_[size_t(p)] != 0;
  }
  transport_ = make_ucx_transport(rank, size, *store_, watched_locally);
  abort_buffer_.resize(kAbortMessageBytes);
  post_abort_receive();
}

Communicator::~Communicator() {
  abort_receive_.reset();
  if (broken()) {
    transport_->abort();  // usually done already; the transport makes a second call cheap
  } else {
    // Let in-flight eager sends (the last result chunks) leave before endpoints close.
    for (int i = 0; i < 64 && transport_->progress(); ++i) {
    }
  }
}

void Communicator::learn_hosts() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  std::string host(name);
  if (!Settings::get().hostname.empty()) host = Settings::get().hostname;
  // "<cores> <pid> <pid namespace> <hostname>": the core count lets every rank compute the same
  // ranks-per-core figure for the cost model; pid and namespace let same-host peers check liveness.
  std::error_code ec;
  std::string pid_ns = std::filesystem::read_symlink("/proc/self/ns/pid", ec).string();
  if (ec || pid_ns.empty()) pid_ns = "unknown";
  const std::string entry = fmt::format("{} {} {} {}", host_topology().cores, long(getpid()), pid_ns, host);
  store_->set("host/" + std::to_string(rank_), std::vector<uint8_t>(entry.begin(), entry.end()));
  std::map<std::string, int> node_ids;
  std::map<int, std::pair<int, int>> ranks_and_cores;  // per node
  node_of_rank_.assign(size_t(size_), 0);
  local_pid_of_rank_.assign(size_t(size_), 0);
  local_rank_ = 0;
  local_size_ = 0;
  for (int r = 0; r < size_; ++r) {
    auto v = store_->get("host/" + std::to_string(r));
    const HostEntry entry_r = parse_host_entry(std::string_view(reinterpret_cast<const char*>(v.data()), v.size()));
    const int cores = std::max(1, entry_r.cores);
    const long pid = entry_r.pid;
    const std::string& their_ns = entry_r.pid_ns;
    const std::string& h = entry_r.host;
    if (h == host && their_ns == pid_ns && pid_ns != "unknown" && r != rank_) local_pid_of_rank_[size_t(r)] = pid;
    auto it = node_ids.emplace(h, int(node_ids.size())).first;
    node_of_rank_[size_t(r)] = it->second;
    auto& [ranks, node_cores] = ranks_and_cores[it->second];
    ++ranks;
    node_cores = cores;
    if (h == host) {
      if (r < rank_) ++local_rank_;
      ++local_size_;
    }
  }
  num_nodes_ = int(node_ids.size());
  for (const auto& [node, rc] : ranks_and_cores) {
    ranks_per_core_ = std::max(ranks_per_core_, double(rc.first) / rc.second);
  }
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
  // Shared memory reports nothing: pride watches these peers itself, zombies included.
  switch (process_state(pid_t(pid))) {
    case ProcessState::kGone: return fmt::format("its process (pid {}) has exited", pid);
    case ProcessState::kZombie: return fmt::format("its process (pid {}) has exited (a zombie, not yet reaped)", pid);
    case ProcessState::kRunning: break;
  }
  return {};
}

void Communicator::post_abort_receive() {
  abort_receive_ = transport_->irecv(Transport::kAnyPeer, kControlTag, abort_buffer_.data(), abort_buffer_.size());
}

bool Communicator::progress_or_throw(const std::string& context) {
  if (abort_requested_.load()) {
    std::string message = fmt::format("pride {}: the process group was aborted", context);
    broken_reason_ = message;
    throw PeerError(message);
  }
  bool progressed = transport_->progress();
  if (abort_receive_ && !abort_receive_->pending()) {
    std::string reason(abort_buffer_.data(), strnlen(abort_buffer_.data(), abort_receive_->bytes()));
    int peer = abort_receive_->peer();
    post_abort_receive();
    std::string message = fmt::format("pride {}: peer {} gave up: {}", context, peer, reason);
    broken_reason_ = message;
    transport_->abort();  // before the failed collective unwinds and frees the buffers of its sends
    throw PeerError(message);
  }
  return progressed;
}

void Communicator::await_abort_notice(const std::string& context) {
  // A rank that gives up sends its notice and then resets its connections at once; the reset can be
  // seen before the notice is read. Reading on for a moment lets the notice, which names the root
  // cause (the rank that really died), win over the reset it caused.
  const auto until = Clock::now() + std::chrono::milliseconds(200);
  while (Clock::now() < until) progress_or_throw(context);
}

void Communicator::notify_abort(const std::string& reason) {
  broken_reason_ = reason;
  if (aborting_) return;
  aborting_ = true;
  log().error("{}", reason);
  // Fire-and-forget: eager messages leave on progress; peers that are gone simply fail these sends.
  // The text lives in a member: a notice still queued to a stuck peer may be read after we return.
  std::snprintf(abort_notice_.data(), abort_notice_.size(), "%s", reason.c_str());
  const size_t length = std::strlen(abort_notice_.data()) + 1;
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
}

void Communicator::idle(uint64_t idle_rounds) {
  // Spin first: on a core of its own a waiting rank gets its answer in microseconds. Then block on the
  // transport's event fd until a message arrives. When this host's ranks outnumber its cores, a
  // spinning (or merely yielding) rank takes CPU from the rank it waits for, so it blocks almost at
  // once and the scheduler runs the ranks that have work. The timeout bounds how late a deadline or
  // a dead peer is noticed if no event ever comes.
  const bool oversubscribed = ranks_per_core_ > 1.0;
  if (idle_rounds < (oversubscribed ? 16u : 2048u)) return;
  transport_->wait_for_activity(std::chrono::milliseconds(1));
}

Collective Communicator::begin(const std::string& name, const std::string& algorithm, Fingerprint fingerprint) {
  PRIDE_ENFORCE_T(PeerError, !broken(), "pride rank {}/{}: {} refused: the group failed earlier ({})", rank_,
                  size_, name, broken_reason_);
  fingerprint.sequence = ++sequence_;
  Collective c(*this, name, algorithm, fingerprint.sequence, Clock::now() + timeout_);
  if (size_ == 1 || !Settings::get().check_fingerprint) return c;

  // All-to-all of fingerprints: every rank sees every other rank's call, so every rank detects a
  // mismatch and raises the same error; no rank is left waiting for data that will not come.
  std::vector<Fingerprint> theirs(static_cast<size_t>(size_));
  std::vector<RequestPtr> requests;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    requests.push_back(c.recv(p, kFingerprintSlot, &theirs[size_t(p)], sizeof(Fingerprint)));
  }
  for (int p = 0; p < size_; ++p) {
    if (p != rank_) requests.push_back(c.send(p, kFingerprintSlot, &fingerprint, sizeof(Fingerprint)));
  }
  c.wait_all(requests);
  auto& counters = traffic_[algorithm];  // fingerprints are not payload
  counters.bytes_sent -= uint64_t(size_ - 1) * sizeof(Fingerprint);
  counters.bytes_received -= uint64_t(size_ - 1) * sizeof(Fingerprint);
  theirs[size_t(rank_)] = fingerprint;
  for (int p = 0; p < size_; ++p) {
    if (!(theirs[size_t(p)] == fingerprint)) {
      std::string message = fmt::format(
          "pride {}: ranks disagree on the collective: this rank called {}, rank {} called {}", c.describe(),
          fingerprint_text(fingerprint), p, fingerprint_text(theirs[size_t(p)]));
      throw MismatchError(message);  // every rank sees the same table; nothing was sent yet
    }
  }
  return c;
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
  const auto deadline = Clock::now() + patience;
  for (auto& r : requests) {
    while (r->pending() && Clock::now() < deadline && !abort_requested_.load()) {
      if (!transport_->progress()) transport_->wait_for_activity(std::chrono::milliseconds(1));
    }
  }
  const auto late = std::count_if(requests.begin(), requests.end(), [](const RequestPtr& r) { return r->pending(); });
  if (late > 0) log().debug("rank {}: closing with {} goodbye messages unanswered", rank_, late);
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
