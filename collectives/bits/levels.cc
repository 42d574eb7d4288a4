// The public level kernels: packing through the active ISA's table (levels_scalar.h, levels_avx2.h), which
// give identical words.
#include "collectives/bits/levels.h"

#include "collectives/bits/kernel_table.h"
#include "collectives/bits/kernels.h"

namespace pride::bits {

int level_planes(int max_level) { return planes_for(2 * int64_t(max_level)); }

bool levels_within(const int8_t* q, size_t n, int max_level) {
  int8_t lo = 0, hi = 0;
  for (size_t k = 0; k < n; ++k) {  // a min/max reduction the compiler vectorizes
    lo = q[k] < lo ? q[k] : lo;
    hi = q[k] > hi ? q[k] : hi;
  }
  return -int(lo) <= max_level && int(hi) <= max_level;
}

void pack_levels(const int8_t* q, size_t n, int max_level, uint64_t* out) {
  detail::active_table().pack_levels(q, n, max_level, level_planes(max_level), out);
}

}  // namespace pride::bits
