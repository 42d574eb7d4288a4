// Moving word ranges of strided planes to and from contiguous message buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "collectives/engine/patterns/chunks.h"

namespace pride {

// out[p * words.size + i] = base[p * stride + words.begin + i]
// (An empty range copies nothing, whatever the pointers: a zero-length memcpy may not take null.)
inline void gather_planes(const uint64_t* base, size_t stride, int planes, patterns::Range words, uint64_t* out) {
  if (words.size == 0) return;
  for (int p = 0; p < planes; ++p) {
    std::memcpy(out + size_t(p) * words.size, base + size_t(p) * stride + words.begin, words.size * 8);
  }
}

// base[p * stride + words.begin + i] = in[p * words.size + i]
inline void scatter_planes(const uint64_t* in, int planes, patterns::Range words, uint64_t* base, size_t stride) {
  if (words.size == 0) return;
  for (int p = 0; p < planes; ++p) {
    std::memcpy(base + size_t(p) * stride + words.begin, in + size_t(p) * words.size, words.size * 8);
  }
}

}  // namespace pride
