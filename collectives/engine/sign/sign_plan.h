// What travels in a sign-allreduce of N ranks, independent of the algorithm, and how full counts
// become the result.
//
// Reduce phase: each rank contributes `counters` vote planes (binary: the +1 plane; ternary: the +1
// and the −1 planes). A partial sum of k ranks' votes is that many bit-sliced counters of
// planes_for(k) planes each.
// Result: `result_planes` planes per element:
//   vote, binary, odd N      1  (+1 plane; a tie is impossible)
//   vote, otherwise          2  (+1 plane, tie plane)
//   mean, binary             planes_for(N)   count c of +1 votes: s = 2c − N
//   mean, ternary            planes_for(2N)  u = pos − neg + N:   s = u − N
// Where an algorithm all-gathers result chunks (direct among all ranks, hier between nodes), they may
// travel packed (`result_coding`): a vote
// result with a tie plane as trits, five elements to a byte (1.6 bits, not 2: bits/trit_coding.h); a
// mean result's counts in base B = N + 1 (binary) or 2N + 1 (ternary), k to a 32-bit limb (32/k
// bits, not planes_for(B − 1): bits/count_coding.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "collectives/bits/count_coding.h"
#include "collectives/engine/sign/sign_types.h"

namespace pride {

// How all-gathered result chunks travel: as the result planes, as trits (a vote that can tie), or as
// packed counts (mean mode).
enum class ResultCoding : uint8_t { kPlanes = 0, kTrits = 1, kCounts = 2 };

struct SignPlan {
  int nranks = 1;
  SignMode mode = SignMode::kVote;
  VoteKind kind = VoteKind::kBinary;
  int counters = 1;       // vote planes per rank (1 binary, 2 ternary)
  int result_planes = 1;
  int mean_scale = 2;     // mean: s = mean_scale * u − mean_offset
  int64_t mean_offset = 0;
  ResultCoding result_coding = ResultCoding::kPlanes;  // trits: has_tie_plane() only; counts: mean only
  bits::counts::CountCode counts;  // mean mode's count code (make() sets it): base N + 1 or 2N + 1
  // hier's rails send their node counts (a count of L votes per counter) in base L + 1, not as
  // planes_for(L) planes (bits/count_coding.h); nodes of unequal size, on the leader scheme, never do.
  bool packed_node_counts = false;

  static SignPlan make(int nranks, SignMode mode, VoteKind kind);
  bool has_tie_plane() const { return mode == SignMode::kVote && result_planes == 2; }
  // Mean mode's count code: base N + 1 (binary) or 2N + 1 (ternary), result_planes planes.
  const bits::counts::CountCode& count_code() const { return counts; }
  // Bits per element the result costs where it is all-gathered: result_planes, 1.6 as trits, 32/k as
  // packed counts.
  double result_wire_bits() const;
  // Bytes of a coded result range of nwords plane words (trits or packed counts; planes: R·8·nwords).
  size_t result_bytes(size_t nwords) const;

  // counts: `counters` counters of `planes` planes over `nwords` words, counter-major, holding all
  // N ranks' votes. result: result_planes planes, plane p at result + p * result_stride.
  void finalize(const uint64_t* counts, int planes, size_t nwords, uint64_t* result, size_t result_stride) const;
};

}  // namespace pride
