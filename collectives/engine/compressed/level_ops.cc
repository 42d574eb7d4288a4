#include "collectives/engine/compressed/level_ops.h"

#include "collectives/bits/kernels.h"
#include "collectives/bits/levels.h"

namespace pride {

bool HostLevelOps::within(int max_level) { return bits::levels_within(q_, numel_, max_level); }

void HostLevelOps::pack(int max_level, patterns::Range elements, uint64_t* out) {
  bits::pack_levels(q_ + elements.begin, elements.size, max_level, out);
}

void HostLevelOps::unpack(const uint64_t* pos, const uint64_t* tie, patterns::Range elements) {
  bits::unpack_vote(pos, tie, elements.size, q_ + elements.begin, bits::DType::kInt8);
}

}  // namespace pride
