// Scratch memory that a communicator's collectives reuse from call to call.
//
// Every call of a large collective needs buffers the size of its segments (packed votes, counters,
// result chunks, reduction partials). Allocated fresh, each costs a page fault per 4 KiB and a
// zero-fill on every call: about a fifth of a 64 MiB sign-allreduce on one host. The workspace keeps
// them. Buffers are uninitialised (callers write before they read), grow to the largest request
// seen for their key, and are freed with the communicator. Like the communicator, one thread at a
// time uses it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>

namespace pride {

// Who owns a buffer: a collective's file picks its own ids (ScratchKey{kOwner, index}), so buffers
// that are alive at the same time never share a key.
struct ScratchKey {
  uint32_t owner;
  uint32_t index;
  bool operator<(const ScratchKey& o) const { return owner != o.owner ? owner < o.owner : index < o.index; }
};

class Workspace {
 public:
  // At least `count` elements of T (trivial types), valid until the next request with the same key.
  template <class T>
  T* get(ScratchKey key, size_t count) {
    return static_cast<T*>(bytes(key, count * sizeof(T)));
  }
  // Bytes held, for tests and logs.
  size_t held_bytes() const;

 private:
  void* bytes(ScratchKey key, size_t bytes);
  struct Free {
    void operator()(void* p) const;
  };
  struct Buffer {
    std::unique_ptr<std::byte, Free> data;
    size_t capacity = 0;
  };
  std::map<ScratchKey, Buffer> buffers_;
};

}  // namespace pride
