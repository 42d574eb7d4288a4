// CPU kernels of the level vote (collectives/engine/compressed/level_vote.h): small signed integers
// q ∈ [−s, s], one int8 per element, carried as bit planes so that an owner can sum N ranks' values
// with the bit-sliced counters of kernels.h instead of unpacking them to integers.
//
// A value travels offset-encoded, u = q + s ∈ [0, 2s], as level_planes(s) planes in the packed-vote
// layout (kernels.h: element j is bit j % 64 of word j / 64, bits past n zero), plane p holding bit p
// of every element's u, plane-major with a stride of words_for(n) words. Summing N such counters
// (counter_add) gives U = Σq + N·s, and sign(Σq) is a comparison of U with N·s (vote_from_count with
// N·2s "votes"): no rank's value is ever widened to an integer.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pride::bits {

// The planes of one offset-encoded value: planes_for(2s). s in [1, 127].
int level_planes(int max_level);
// Whether every q[k] lies in [−max_level, max_level].
bool levels_within(const int8_t* q, size_t n, int max_level);
// The planes of u = q + max_level: level_planes(max_level) planes of words_for(n) words each, plane p
// at out + p·words_for(n). q must be within [−max_level, max_level] (levels_within).
void pack_levels(const int8_t* q, size_t n, int max_level, uint64_t* out);

}  // namespace pride::bits
