#include "backend/transport/ucx/ucx_transport.h"

#include <poll.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "backend/common/log.h"
#include "backend/transport/ucx/ucx_check.h"

namespace pride {
namespace {

// The wire tag: the caller's 48 bits (control bit included) above the sender's rank, so a receive
// names its peer by tag matching alone (UCX tag receives are not bound to an endpoint).
constexpr int kRankBits = 16;
constexpr ucp_tag_t kRankMask = (ucp_tag_t(1) << kRankBits) - 1;
constexpr int kMaxRanks = 1 << kRankBits;

ucp_tag_t wire_tag(Tag tag, int sender) { return (ucp_tag_t(tag) << kRankBits) | ucp_tag_t(sender); }

class UcxRequest;

}  // namespace

// What UCX's completion callback touches. Ownership rule: the op belongs to UCX from the moment the
// nbx call returns a request until the callback runs, and the callback frees it. A UcxRequest
// destroyed while pending only detaches (owner = null), files the op with the transport's orphans and
// cancels, so a late completion never writes into freed memory, and an op whose callback never comes
// (UCX does not cancel sends) is freed with the worker.
struct UcxOp {
  UcxRequest* owner = nullptr;
  std::unordered_set<UcxOp*>* orphans = nullptr;  // set once detached
};

namespace {

class UcxRequest final : public Request {
 public:
  UcxRequest(ucp_worker_h worker, std::unordered_set<UcxOp*>* orphans, int peer, bool is_send, size_t bytes)
      : worker_(worker), orphans_(orphans), op_(new UcxOp) {
    op_->owner = this;
    peer_ = peer;
    is_send_ = is_send;
    posted_bytes_ = bytes;
  }
  ~UcxRequest() override {
    if (op_ == nullptr) return;
    if (ucx_request_ == nullptr) {  // never handed to UCX
      delete op_;
      return;
    }
    op_->owner = nullptr;
    op_->orphans = orphans_;
    orphans_->insert(op_);
    ucp_request_cancel(worker_, ucx_request_);
  }

  UcxOp* op() { return op_; }

  // Takes the return value of the ucp_*_nbx call. Receives are posted with NO_IMM_CMPL (UCX 1.13
  // does not fill recv_info on immediate completion), so their callback may already have run.
  void start(ucs_status_ptr_t ptr) {
    if (!pending()) return;  // the callback ran inside the nbx call and freed everything
    if (ptr == nullptr) {    // a send completed in place: UCX will not call back
      UcxOp* op = op_;
      finish(UCS_OK, 0, -1);
      delete op;
    } else if (UCS_PTR_IS_ERR(ptr)) {
      UcxOp* op = op_;
      finish(UCS_PTR_STATUS(ptr), 0, -1);
      delete op;
    } else {
      ucx_request_ = ptr;
    }
  }

  void finish(ucs_status_t status, size_t bytes, int sender) {
    op_ = nullptr;
    ucx_request_ = nullptr;
    if (status == UCS_OK) {
      state_ = State::kDone;
      bytes_ = bytes;
      if (!is_send_) peer_ = sender;
    } else {
      state_ = State::kFailed;
      error_ = ucs_status_string(status);
    }
  }

 private:
  ucp_worker_h worker_;
  std::unordered_set<UcxOp*>* orphans_;
  UcxOp* op_;
  void* ucx_request_ = nullptr;
};

void complete_op(void* ucx_request, void* user_data, ucs_status_t status, size_t bytes, int sender) {
  auto* op = static_cast<UcxOp*>(user_data);
  if (op->owner != nullptr) op->owner->finish(status, bytes, sender);
  if (op->orphans != nullptr) op->orphans->erase(op);
  ucp_request_free(ucx_request);
  delete op;
}

void on_send_done(void* request, ucs_status_t status, void* user_data) {
  complete_op(request, user_data, status, 0, -1);
}

void on_recv_done(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user_data) {
  complete_op(request, user_data, status, info->length, int(info->sender_tag & kRankMask));
}

}  // namespace

UcxTransport::UcxTransport(int rank, int size, Store& store, const std::vector<bool>& watched_locally)
    : rank_(rank), size_(size) {
  // A constructor that throws runs no destructor: release what was created so far.
  try {
    connect(store, watched_locally);
  } catch (...) {
    release();
    throw;
  }
}

ucp_context_h UcxTransport::create_context(bool eager, bool second) const {
  ucp_config_t* config = nullptr;
  PRIDE_UCX_CHECK(ucp_config_read(nullptr, nullptr, &config), "rank {}", rank_);
  if (eager && ucp_config_modify(config, "RNDV_THRESH", "inf") != UCS_OK) {
    log().debug("rank {}: could not set UCX's RNDV_THRESH; keeping UCX's default", rank_);
  }
  // A second, send-only context for remote peers (see connect()) needs no shared-memory transports,
  // whose FIFOs and segments each worker would otherwise set up again. The user's UCX_TLS wins.
  if (eager && second && std::getenv("UCX_TLS") == nullptr && ucp_config_modify(config, "TLS", "^sm") != UCS_OK) {
    log().debug("rank {}: could not leave shared memory out of the second UCX context", rank_);
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  // WAKEUP: the worker gets an event fd, so a rank with nothing to do can block on it (see
  // wait_for_activity) instead of polling shared memory while the ranks it waits for need the core.
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  params.estimated_num_eps = size_t(size_);
  params.mt_workers_shared = 0;
  ucp_context_h context = nullptr;
  const ucs_status_t st = ucp_init(&params, config, &context);
  ucp_config_release(config);
  PRIDE_UCX_CHECK(st, "rank {}", rank_);
  return context;
}

ucp_worker_h UcxTransport::create_worker(ucp_context_h context, int* event_fd) const {
  ucp_worker_params_t wparams{};
  wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucp_worker_h worker = nullptr;
  PRIDE_UCX_CHECK(ucp_worker_create(context, &wparams, &worker), "rank {}", rank_);
  if (ucp_worker_get_efd(worker, event_fd) != UCS_OK) {
    *event_fd = -1;  // wait_for_activity falls back to sleeping
    log().debug("rank {}: a UCX worker has no event fd; waits will sleep instead", rank_);
  }
  return worker;
}

void UcxTransport::connect(Store& store, const std::vector<bool>& watched_locally) {
  const int rank = rank_, size = size_;
  PRIDE_CHECK_ARG(size >= 1 && size <= kMaxRanks, "group size {} is outside [1, {}]", size, kMaxRanks);
  // Over TCP, UCX's rendezvous costs a request-to-send / ready-to-receive round trip per message,
  // and on a busy link the small control messages queue behind bulk data: a 64 MiB fp32 ring
  // allreduce between 4 hosts at 1 Gbit/s ran at 87% of Gloo's speed, 98% with eager sends (see
  // docs/performance.md). Shared memory wants the opposite (rendezvous is CMA's single copy, eager
  // twice as slow), and UCX's threshold is one per context. So a rank whose peers are all on other
  // hosts sends eagerly at any size, and a rank with peers of both kinds keeps rendezvous in its main
  // context and sends to its remote peers through a second, eager one: with one context, two crossing
  // rendezvous transfers over TCP ran at half rate in about half of the rounds (2 hosts x 2 ranks,
  // docs/performance.md). The eager choice is the sender's alone, so receives need no second worker.
  // The user's UCX_RNDV_THRESH wins, for every peer.
  auto is_local = [&](int p) { return p != rank && size_t(p) < watched_locally.size() && watched_locally[size_t(p)]; };
  bool any_local = false, any_remote = false;
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    (is_local(p) ? any_local : any_remote) = true;
  }
  const bool rendezvous_chosen_by_user = std::getenv("UCX_RNDV_THRESH") != nullptr;
  context_is_eager_ = any_remote && !any_local && !rendezvous_chosen_by_user;
  context_ = create_context(context_is_eager_, /*second=*/false);
  ucp_context_attr_t attr{};
  attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  if (ucp_context_query(context_, &attr) == UCS_OK) memory_types_ = attr.memory_types;
  worker_ = create_worker(context_, &event_fd_);
  if (any_remote && any_local && !rendezvous_chosen_by_user) {
    eager_context_ = create_context(/*eager=*/true, /*second=*/true);
    ucp_context_attr_t eager_attr{};
    eager_attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
    // A memory type counts only if both contexts carry it (they load the same transports).
    if (ucp_context_query(eager_context_, &eager_attr) == UCS_OK) memory_types_ &= eager_attr.memory_types;
    eager_worker_ = create_worker(eager_context_, &eager_event_fd_);
    log().debug("rank {}: sending to other hosts through a second, eager UCX context", rank);
  }

  // Publish our worker address, then connect to everyone's.
  ucp_address_t* address = nullptr;
  size_t address_len = 0;
  PRIDE_UCX_CHECK(ucp_worker_get_address(worker_, &address, &address_len), "rank {}", rank);
  const auto* a = reinterpret_cast<const uint8_t*>(address);
  store.set("ucx/" + std::to_string(rank), std::vector<uint8_t>(a, a + address_len));
  ucp_worker_release_address(worker_, address);

  std::vector<std::string> keys;
  keys.reserve(size_t(size));
  for (int p = 0; p < size; ++p) keys.push_back("ucx/" + std::to_string(p));
  const std::vector<std::vector<uint8_t>> addresses = store.multi_get(keys);  // one gather, see Store
  peers_.resize(size_t(size));
  for (int p = 0; p < size; ++p) {
    auto peer = std::make_unique<Peer>();
    peer->self = this;
    peer->rank = p;
    const std::vector<uint8_t>& remote = addresses[size_t(p)];
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = reinterpret_cast<const ucp_address_t*>(remote.data());
    // Peer-failure handling makes UCX report a dead peer, but UCX (1.13) then refuses its shared-memory
    // transports, which cannot, and sends even same-host traffic through TCP loopback: two kernel
    // copies per message. A same-host peer the communicator watches by pid needs no report from UCX,
    // so it gets shared memory (posix/sysv FIFOs, and CMA single-copy for large messages).
    peer->watched_locally = is_local(p);
    ep.err_mode = peer->watched_locally ? UCP_ERR_HANDLING_MODE_NONE : UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = &UcxTransport::on_endpoint_error;
    ep.err_handler.arg = peer.get();
    // Every send to a peer goes through this one endpoint, so UCX keeps their order (tag matching
    // relies on it), whatever the memory type.
    peer->worker = eager_worker_ != nullptr && p != rank && !peer->watched_locally ? eager_worker_ : worker_;
    PRIDE_UCX_CHECK(ucp_ep_create(peer->worker, &ep, &peer->ep), "rank {}: connecting to peer {}", rank, p);
    peer->route = lanes_of(peer->ep);
    peers_[size_t(p)] = std::move(peer);
  }
  log().debug("rank {}: UCX transport up, {} peers", rank, size);
}

UcxTransport::~UcxTransport() { release(); }

void UcxTransport::release() {
  close_endpoints();
  if (eager_worker_ != nullptr) ucp_worker_destroy(eager_worker_);
  eager_worker_ = nullptr;
  eager_event_fd_ = -1;
  if (worker_ != nullptr) ucp_worker_destroy(worker_);
  worker_ = nullptr;
  event_fd_ = -1;  // a late wake() finds no worker to signal
  for (UcxOp* op : orphaned_ops_) delete op;  // their callbacks can no longer come
  orphaned_ops_.clear();
  if (eager_context_ != nullptr) ucp_cleanup(eager_context_);
  eager_context_ = nullptr;
  if (context_ != nullptr) ucp_cleanup(context_);
  context_ = nullptr;
}

void UcxTransport::close_endpoints() {
  // Flush-close every endpoint so the last messages leave; endpoints of failed peers close by force.
  // A close that has not finished within 2 s is released anyway: UCX completes and frees it inside
  // ucp_worker_destroy, so destruction never hangs on a silent peer.
  close_all(0, std::chrono::seconds(2));
}

void UcxTransport::abort() {
  log().debug("rank {}: closing every endpoint by force after a failure", rank_);
  close_all(UCP_EP_CLOSE_FLAG_FORCE, std::chrono::milliseconds(500));
}

void UcxTransport::close_all(uint32_t flags_for_live_peers, std::chrono::milliseconds patience) {
  closing_ = true;
  std::vector<void*> closing;
  for (auto& peer : peers_) {
    if (!peer || peer->ep == nullptr) continue;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = peer->failure.empty() ? flags_for_live_peers : uint32_t(UCP_EP_CLOSE_FLAG_FORCE);
    ucs_status_ptr_t req = ucp_ep_close_nbx(peer->ep, &param);
    if (req != nullptr && !UCS_PTR_IS_ERR(req)) closing.push_back(req);
    peer->ep = nullptr;
    if (peer->failure.empty()) peer->failure = "connection closed";  // later sends fail at once
  }
  // A forced close completes the endpoint's pending sends (cancelled) within a few progress calls.
  // progress() drives both workers, whichever one a closing endpoint belongs to.
  const auto deadline = Clock::now() + patience;
  for (void* req : closing) {
    while (ucp_request_check_status(req) == UCS_INPROGRESS && Clock::now() < deadline) {
      progress();
    }
    ucp_request_free(req);
  }
}

void UcxTransport::on_endpoint_error(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* peer = static_cast<Peer*>(arg);
  peer->failure = ucs_status_string(status);
  if (peer->self->closing_) return;  // peers closing first is the normal end of a group
  log().warn("rank {}: UCX reports peer {} failed: {}", peer->self->rank_, peer->rank, peer->failure);
}

std::string UcxTransport::peer_failure(int peer) const {
  if (peer < 0 || peer >= size_) return {};
  return peers_[size_t(peer)]->failure;
}

bool UcxTransport::sends_eagerly_to(int peer) const {
  if (peer < 0 || peer >= size_ || peers_[size_t(peer)] == nullptr) return false;
  return context_is_eager_ || (eager_worker_ != nullptr && peers_[size_t(peer)]->worker == eager_worker_);
}

std::string UcxTransport::route(int peer) const {
  if (peer < 0 || peer >= size_) return {};
  return peers_[size_t(peer)]->route;
}

std::string UcxTransport::lanes_of(ucp_ep_h ep) {
  // UCX has no query for an endpoint's transports before 1.14: read them off its printed lane table
  // ("lane[0]:  3:posix/memory.0 md[2] ..."). The lanes are chosen when the endpoint is created from
  // the peer's address, so this is read once, in connect(): printing walks UCX's endpoint, which only
  // the thread that progresses the worker may touch.
  char* text = nullptr;
  size_t length = 0;
  FILE* stream = open_memstream(&text, &length);
  if (stream == nullptr) return {};
  ucp_ep_print_info(ep, stream);
  std::fclose(stream);
  std::string printed(text, length);
  std::free(text);
  std::vector<std::string> transports;
  for (size_t at = printed.find("lane["); at != std::string::npos; at = printed.find("lane[", at + 1)) {
    const size_t colon = printed.find(':', printed.find("]:", at) + 2);
    const size_t slash = printed.find('/', colon);
    if (colon == std::string::npos || slash == std::string::npos) break;
    std::string tl = printed.substr(colon + 1, slash - colon - 1);
    if (std::find(transports.begin(), transports.end(), tl) == transports.end()) transports.push_back(tl);
  }
  std::string joined;
  for (const auto& tl : transports) joined += (joined.empty() ? "" : "+") + tl;
  return joined;
}

namespace {

ucs_memory_type_t ucs_memory_type(MemoryType memory) {
  return memory == MemoryType::kCuda ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
}

// Every buffer says where it lives. A host tag is taken as given (UCX skips its detection). A CUDA tag
// is only a hint: UCX still looks the pointer up, in its memory-type cache when that is on, and a
// pointer the cache never saw allocated (the caching allocator's blocks from before UCX started) is
// taken for host memory, which its shared-memory copies would then read as such. pride's Python
// package therefore turns the cache off (UCX_MEMTYPE_CACHE=n unless the user set it), so that UCX asks
// the CUDA driver about each device buffer.
void tag_memory(ucp_request_param_t& param, MemoryType memory) {
  param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
  param.memory_type = ucs_memory_type(memory);
}

}  // namespace

bool UcxTransport::carries(MemoryType memory) const {
  return (memory_types_ & UCS_BIT(ucs_memory_type(memory))) != 0;
}

RequestPtr UcxTransport::isend(int peer, Tag tag, const void* buf, size_t bytes, MemoryType memory) {
  PRIDE_ENFORCE(peer >= 0 && peer < size_, "rank {}: send to invalid peer {}", rank_, peer);
  PRIDE_ENFORCE(carries(memory), "rank {}: this UCX cannot send from {} memory (to peer {})", rank_,
                memory == MemoryType::kCuda ? "CUDA" : "host", peer);
  auto req = std::make_unique<UcxRequest>(peers_[size_t(peer)]->worker, &orphaned_ops_, peer, true, bytes);
  if (!peers_[size_t(peer)]->failure.empty()) {
    req->start(UCS_STATUS_PTR(UCS_ERR_CONNECTION_RESET));
    return req;
  }
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
  param.cb.send = &on_send_done;
  param.user_data = req->op();
  param.datatype = ucp_dt_make_contig(1);
  tag_memory(param, memory);
  req->start(ucp_tag_send_nbx(peers_[size_t(peer)]->ep, buf, bytes, wire_tag(tag, rank_), &param));
  return req;
}

RequestPtr UcxTransport::irecv(int peer, Tag tag, void* buf, size_t bytes, MemoryType memory) {
  PRIDE_ENFORCE(peer == kAnyPeer || (peer >= 0 && peer < size_), "rank {}: receive from invalid peer {}",
                rank_, peer);
  PRIDE_ENFORCE(carries(memory), "rank {}: this UCX cannot receive into {} memory (from peer {})", rank_,
                memory == MemoryType::kCuda ? "CUDA" : "host", peer);
  auto req = std::make_unique<UcxRequest>(worker_, &orphaned_ops_, peer, false, bytes);
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                       UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  param.cb.recv = &on_recv_done;
  param.user_data = req->op();
  param.datatype = ucp_dt_make_contig(1);
  tag_memory(param, memory);
  ucp_tag_t mask = peer == kAnyPeer ? ~kRankMask : ~ucp_tag_t(0);
  req->start(ucp_tag_recv_nbx(worker_, buf, bytes, wire_tag(tag, peer == kAnyPeer ? 0 : peer), mask, &param));
  return req;
}

bool UcxTransport::progress() {
  if (worker_ == nullptr) return false;
  bool any = ucp_worker_progress(worker_) != 0;
  if (eager_worker_ != nullptr) any = ucp_worker_progress(eager_worker_) != 0 || any;
  return any;
}

void UcxTransport::wait_for_activity(std::chrono::microseconds max_wait) {
  const bool two = eager_worker_ != nullptr;
  if (event_fd_ < 0 || (two && eager_event_fd_ < 0)) {
    Transport::wait_for_activity(max_wait);
    return;
  }
  // Arming fails with BUSY when events are already queued: the caller's next progress() has work.
  for (ucp_worker_h worker : {worker_, eager_worker_}) {
    if (worker == nullptr) continue;
    const ucs_status_t armed = ucp_worker_arm(worker);
    if (armed == UCS_ERR_BUSY) return;
    if (armed != UCS_OK) {
      Transport::wait_for_activity(max_wait);
      return;
    }
  }
  pollfd fds[2] = {{event_fd_, POLLIN, 0}, {eager_event_fd_, POLLIN, 0}};
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(max_wait);
  const timespec timeout{static_cast<time_t>(seconds.count()),
                         static_cast<long>(std::chrono::nanoseconds(max_wait - seconds).count())};
  ppoll(fds, two ? 2 : 1, &timeout, nullptr);  // EINTR or a timeout: the caller progresses and checks again
}

void UcxTransport::wake() {
  // ucp_worker_signal writes the worker's wake-up fd: safe from any thread, even on a single-threaded worker.
  if (event_fd_ >= 0) ucp_worker_signal(worker_);
}

std::unique_ptr<Transport> make_ucx_transport(int rank, int size, Store& store,
                                              const std::vector<bool>& watched_locally) {
  return std::make_unique<UcxTransport>(rank, size, store, watched_locally);
}

}  // namespace pride
