// Where the level vote's values live, and how they are packed and unpacked there (level_vote.h has the
// algorithm).
//
// The algorithm is written once against this interface and exchanges host messages (bit planes, or
// their codes). HostLevelOps packs and unpacks int8 values in host memory with the CPU kernels; a GPU
// implementation (torch_plugin/cuda_level_ops.h) keeps them in device memory and moves only the planes
// between the GPU and the messages: level_planes(s) bits per element out, two back, where staging the
// int8 values themselves would move eight each way. Every rank ends with the same bits either way:
// each chunk's result is decided once, by its owner, from the same planes.
//
// Calls may queue work that runs asynchronously; each one that returns a value or fills a host buffer
// has finished what that needs by the time it returns. The rest (a GPU's unpacking) is the caller's to
// wait for or order after: the plugin records an event after it on the GPU's stream (cuda_ordering.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "collectives/engine/patterns/chunks.h"

namespace pride {

class LevelOps {
 public:
  virtual ~LevelOps() = default;
  // Whether every value lies within [−max_level, max_level] (max_level in [1, 127]). Called once, before
  // pack, with pack's max_level: a GPU checks and packs the whole tensor in one pass here.
  virtual bool within(int max_level) = 0;
  // The values of `elements` (a range of whole words but the tensor's last) as the level_planes(max_level)
  // planes of u = q + max_level (bits/levels.h), words_for(elements.size) words each, plane-major, into
  // host memory `out`.
  virtual void pack(int max_level, patterns::Range elements, uint64_t* out) = 0;
  // The values of `elements` ← +1 where `pos`, else 0 where `tie`, else −1 (host planes of
  // words_for(elements.size) words).
  virtual void unpack(const uint64_t* pos, const uint64_t* tie, patterns::Range elements) = 0;
};

// Host values and the CPU kernels; every call is done when it returns.
class HostLevelOps final : public LevelOps {
 public:
  HostLevelOps(int8_t* q, size_t numel) : q_(q), numel_(numel) {}
  bool within(int max_level) override;
  void pack(int max_level, patterns::Range elements, uint64_t* out) override;
  void unpack(const uint64_t* pos, const uint64_t* tie, patterns::Range elements) override;

 private:
  int8_t* q_;
  size_t numel_;
};

}  // namespace pride
