// The transport interface the collectives are written against (as Gloo's transport::Pair): tagged,
// non-blocking sends and receives of byte ranges to one peer, explicit progress, and waits with a
// deadline. The UCX implementation is in ucx/; tests may add others.
//
// Tags: the caller owns 47 bits (kTagBits); the transport adds the sender's rank so a receive matches
// exactly one peer. Tags with kControlTag set are reserved for the communicator (abort notices).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pride {

using Tag = uint64_t;
constexpr int kTagBits = 47;
constexpr Tag kControlTag = Tag(1) << kTagBits;
using Clock = std::chrono::steady_clock;

// Where a message's buffer lives. A transport that cannot read or write a kind of memory says so
// (Transport::carries); its callers then stage such buffers through host memory themselves.
enum class MemoryType : uint8_t { kHost, kCuda };

// One non-blocking send or receive. Completion is observed through Transport::progress().
class Request {
 public:
  enum class State : uint8_t { kPending, kDone, kFailed };
  virtual ~Request() = default;
  State state() const { return state_; }
  bool pending() const { return state_ == State::kPending; }
  int peer() const { return peer_; }             // for a receive from any peer: the sender, once done
  size_t bytes() const { return bytes_; }        // received length once done
  size_t posted_bytes() const { return posted_bytes_; }  // the buffer's size as posted
  const std::string& error() const { return error_; }
  bool is_send() const { return is_send_; }

 protected:
  State state_ = State::kPending;
  int peer_ = -1;
  size_t bytes_ = 0;
  size_t posted_bytes_ = 0;
  bool is_send_ = false;
  std::string error_;
};
using RequestPtr = std::unique_ptr<Request>;

class Transport {
 public:
  static constexpr int kAnyPeer = -1;
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* name() const = 0;

  // The buffer must stay valid until the request completes or is destroyed (destroying a pending
  // request cancels it). `memory` says where it lives; only kinds the transport carries() are allowed.
  virtual RequestPtr isend(int peer, Tag tag, const void* buf, size_t bytes, MemoryType memory) = 0;
  // peer may be kAnyPeer (then only the tag is matched).
  virtual RequestPtr irecv(int peer, Tag tag, void* buf, size_t bytes, MemoryType memory) = 0;
  RequestPtr isend(int peer, Tag tag, const void* buf, size_t bytes) {
    return isend(peer, tag, buf, bytes, MemoryType::kHost);
  }
  RequestPtr irecv(int peer, Tag tag, void* buf, size_t bytes) { return irecv(peer, tag, buf, bytes, MemoryType::kHost); }

  // Whether buffers of this memory type can be sent and received as they are. Host memory always can.
  virtual bool carries(MemoryType memory) const { return memory == MemoryType::kHost; }

  // Advances outstanding operations; returns true when anything happened.
  virtual bool progress() = 0;

  // Gives the CPU away until the transport has something for progress() (a message arrived, a peer
  // answered) or max_wait passes, whichever is first. A caller that found nothing to progress calls
  // it instead of spinning, so that ranks sharing a core run instead of polling each other. May
  // return early (spurious wake-ups are allowed); the default just sleeps.
  virtual void wait_for_activity(std::chrono::microseconds max_wait);
  // Ends a wait_for_activity() in progress on another thread early (or the next one, if none is in
  // progress). The one call that may come from any thread.
  virtual void wake() {}

  // Non-empty when the transport has seen `peer` fail (connection reset, process gone).
  virtual std::string peer_failure(int peer) const = 0;

  // How messages to `peer` travel, for logs and perf tools (e.g. "posix+cma" or "tcp"), and whether
  // sends to it go eagerly at any size, with no rendezvous round trip (UCX over TCP). Both are fixed
  // once the transport is connected, so any thread may ask.
  virtual std::string route(int /*peer*/) const { return name(); }
  virtual bool sends_eagerly_to(int /*peer*/) const { return false; }

  // After a failure: closes every connection at once, without waiting for peers (which may be gone
  // or stuck), and fails the sends still pending, so that nothing reads the callers' buffers once the
  // failed collective has unwound. Sends fail from then on; receives still posted are cancelled by
  // destroying their requests.
  virtual void abort() = 0;

  // The normal end (Communicator::close). expect_close(): the group is ending, so a peer's connection
  // closing is expected from now on, not a failure to report. close(): flush-closes every connection.
  virtual void expect_close() {}
  virtual void close() {}
};

// Builds the UCX transport: creates a worker, publishes its address in the store and connects to
// every peer. `watched_locally[p]` says that the caller detects peer p's death itself (a process on
// this host whose pid it checks): UCX may then use shared memory to reach p, whose transports in UCX
// cannot report a peer's failure. Declared here so callers need no UCX header.
class Store;
std::unique_ptr<Transport> make_ucx_transport(int rank, int size, Store& store,
                                              const std::vector<bool>& watched_locally);

}  // namespace pride
