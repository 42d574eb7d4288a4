#include "backend/workspace.h"

#include <cstdlib>
#include <new>

namespace pride {

void* Workspace::bytes(ScratchKey key, size_t bytes) {
  Buffer& b = buffers_[key];
  if (bytes > b.capacity) {
    b.data.reset();  // free first: the old and new buffer need not both exist
    // Cache-line aligned (malloc guarantees only 16 bytes): vector loads and the kernels' streaming
    // stores want whole lines.
    constexpr size_t kAlign = 64;
    const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
    void* p = std::aligned_alloc(kAlign, rounded);
    if (p == nullptr) throw std::bad_alloc();
    b.data.reset(static_cast<std::byte*>(p));
    b.capacity = rounded;
  }
  return b.data.get();
}

void Workspace::Free::operator()(void* p) const { std::free(p); }

size_t Workspace::held_bytes() const {
  size_t total = 0;
  for (const auto& [key, b] : buffers_) total += b.capacity;
  return total;
}

}  // namespace pride
