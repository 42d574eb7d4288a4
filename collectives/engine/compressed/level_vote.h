// The level vote: every rank holds small signed integers q ∈ [−s, s] (int8), and every rank ends with
// sign(Σ_ranks q) per element (−1, 0 or +1). Lion Cub's "p-bit allreduce" with its sign applied
// (Ishikawa et al., arXiv 2411.16462; bindings/python/pride/optim/lion_cub.py): the same Δ that an int8
// ring allreduce of q followed by sign() gives, at (planes + 2)/16 of its bytes (below).
//
// On the direct algorithm's shape (like onebit_allreduce.h):
//   1. each rank packs q + s as level_planes(s) bit planes (collectives/bits/levels.h), chunk by chunk;
//   2. all-to-all: rank j owns word chunk j (patterns::chunk) and receives every rank's planes of it;
//   3. the owner sums the N offset-encoded values with bit-sliced counters (counter_add) into
//      U = Σq + N·s and decides sign(Σq) by comparing U with N·s (vote_from_count): a +1 plane and a
//      tie plane (Σq = 0), never an integer per element;
//   4. all-gather of the owners' two planes; every rank unpacks them into q.
//
// Per rank it sends (N−1)/N · (level_planes(s) + 2) bits per element: at N = 4 (s = 31, six planes)
// 6 bits against the int8 ring's 2(N−1)/N · 8 = 12: 9/16 of the ring's bytes at N = 2 and 3 (s = 63, 42:
// seven planes), 8/16 at N = 4 to 7, less from N = 8 on, 4/16 for levels ±1. Every rank's result is the
// same bits.
//
// Either phase can travel coded (LevelCoding), as the sign-allreduce's results do (sign_plan.h): the
// owners' +1 and tie planes as trits, 1.6 bits for 2 (trit_coding.h), and the levels u as base-(2s + 1)
// digits (count_coding.h: u is a count of 2s + 1 values) where that packs better than their planes:
// s = 1: 1.6 bits for 2, s = 2: 2.46 for 3, s = 4: 3.2 for 4, s = 32: 6.4 for 7 (s = 1–5, 8–11, 16–19
// and 32–41 pack; no other s, so not the s = ⌊127/N⌋ of N = 2 … 5). Levels ±1 at N = 4: 2.4 bits per
// element instead of 3.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/communicator.h"
#include "collectives/engine/compressed/level_ops.h"

namespace pride {

// In place on `q` (numel int8 values within [−max_level, max_level], max_level in [1, 127]); the ranks
// must agree on numel and max_level (a MismatchError on every rank otherwise; an agreed max_level outside
// [1, 127] is an InvalidArgument on every rank). A value out of range on any rank is an InvalidArgument on
// every rank, naming that rank, before anything is sent. All of this rides on the fingerprint check: with
// PRIDE_CHECK_FINGERPRINT=0 only the rank that sees the problem raises, and the others time out waiting
// for its messages (a TimeoutError naming it). A check that fails on its rank (a GPU's error, in the
// overload below) is agreed the same way: that rank raises its own error, every other rank one naming
// it (with PRIDE_CHECK_FINGERPRINT=0: a timeout).
void level_vote(Communicator& comm, int8_t* q, size_t numel, int max_level);
// The same, on values wherever `ops` keeps them (level_ops.h; a GPU's: torch_plugin/cuda_level_ops.h).
// Returns once the results have been handed to `ops.unpack`, which may still be writing them (level_ops.h).
void level_vote(Communicator& comm, LevelOps& ops, size_t numel, int max_level);

// How the two phases travel. Chosen by select_level_coding, the same on every rank (and in the
// fingerprint: ranks that chose differently disagree before anything is sent).
struct LevelCoding {
  bool packed_levels = false;  // the levels as base-(2s + 1) digits; only where they pack better
  bool trit_results = false;   // the owners' +1 and tie planes as trits
};

// PRIDE_RESULT_CODING, as for the sign-allreduce: `planes` neither, `trits` the results, `counts` the
// levels (where they pack better), `packed` both, `auto` each where the cost model's link saves more
// wire time than the coding costs on the CPU (sign/selector.h's measured constants).
LevelCoding select_level_coding(int size, int max_level, size_t numel, int num_nodes, double ranks_per_core);

// Bits one rank sends per element: (N−1)/N · (level_planes(max_level) + 2) as planes, with each coded
// phase at its code's density, as a formula for tests and benchmarks (chunks round it up to whole
// trit bytes and limbs).
double level_vote_wire_bits(int size, int max_level, const LevelCoding& coding = {});

}  // namespace pride
