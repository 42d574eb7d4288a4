// Chooses the sign-allreduce algorithm per call with NCCL's cost form, time = latency·steps +
// messages·overhead + bytes/bandwidth, for the link class the group spans (one host: shared memory;
// several: the network). PRIDE_ALGO forces a choice. Every rank computes the same choice from the
// same inputs, and the choice is part of the collective's fingerprint.
#pragma once

#include <cstddef>

#include "collectives/engine/sign/sign_plan.h"

namespace pride {

struct LinkModel {
  double latency_us;      // per dependent step
  double overhead_us;     // per message a rank posts
  double bytes_per_us;    // per-rank bandwidth
  // Built-in defaults for the group's link class, PRIDE_LINK_* overrides. `ranks_per_core` > 1 means
  // this host's ranks share cores: every message then also costs a context switch, and copies share
  // a core's bandwidth.
  static LinkModel for_group(int num_nodes, double ranks_per_core = 1.0);
};

// Estimated microseconds of each algorithm for `numel` elements, and the cheapest one. With several
// nodes of several ranks each (num_nodes < N), a node's ranks share its link: the flat algorithms'
// bytes cross it once per rank, the hierarchical algorithm's once per node, and auto considers it.
double estimate_us(SignAlgorithm algorithm, const SignPlan& plan, size_t numel, const LinkModel& link,
                   int num_nodes = 1);
SignAlgorithm select_sign_algorithm(const SignPlan& plan, size_t numel, int num_nodes, double ranks_per_core = 1.0);

// How result chunks travel where an algorithm all-gathers them (sign_plan.h): the direct algorithm
// among all ranks, hier between nodes (inside a node they stay planes). Each result has one coding
// that can apply: trits for a vote with a tie plane, packed counts for a mean (none for a binary vote
// of odd N), taken only where it is smaller than the planes (packed counts are not for a base that is
// a power of two: N = 3, 7, 15 …). PRIDE_RESULT_CODING=planes never codes; trits / counts force that
// coding where it applies; packed forces whichever applies. auto weighs the wire the coding saves,
// (result_planes − its bits) per element of the all-gather ((N − 1)/N of the tensor for direct, once
// per rank of a node whose ranks share its link; (M − 1)/M per node for hier), against the CPU time of
// encoding this rank's chunk and decoding everyone's: per element of the tensor (M/N of it on hier's
// rails, where a node's ranks share the coding), times ranks_per_core where ranks share cores.
// The rates are bench_kernels' on the development host (docs/performance.md): trits encode at ~10 and
// decode at ~20 G elements/s, 0.06–0.08 ns per element of the tensor (1/N of it encoded, the rest
// decoded), rounded up to 0.1 for slower hosts; counts in base 5 encode at ~5.3 and decode at ~4.5 G
// elements/s, 0.22 ns per element of an N = 4 tensor (a quarter encoded, three quarters decoded), base
// 9 at ~3.1 and ~3.0, 0.33 ns. The model charges the coding in full, as if the pipeline hid none of it: a
// floor, since at 1 Gbit/s the direct pipeline hid it all (docs/performance.md, "Packed counts").
constexpr double kTritCodingNsPerElement = 0.1;
constexpr double kCountCodingNsPerElement = 0.3;  // between base 5's and base 9's, the bases of N = 4
// Whether a coding's saved wire time pays for its CPU time. A tie is exact in the model for some
// groups (direct over 2 nodes of 3 ranks at 10 Gbit/s: trits save 0.1 ns of wire per element and cost
// 0.1), where rounding alone would decide; the margin sends every tie to planes.
inline bool coding_pays(double saved_us, double coding_us) { return saved_us > coding_us * 1.001; }
// Encoding and decoding one element's count together, per bit of log2(B): 0.14 ns at B = 3, 0.18 at
// B = 5, 0.21 at B = 9 (encode and decode each in full: 0.22, 0.41 and 0.65 ns); the largest is taken.
constexpr double kCountCodingNsPerBit = 0.21;
ResultCoding select_result_coding(const SignPlan& plan, SignAlgorithm algorithm, size_t numel, int num_nodes,
                                  double ranks_per_core = 1.0);
// Whether hier's rails send their node counts packed in base L + 1 (sign_plan.h), L = N / num_nodes:
// only where that is smaller than planes_for(L) planes (L = 2: 1.6 bits for 2; L = 8: 3.2 for 4; not
// L = 3, 7 …). PRIDE_RESULT_CODING=counts or packed forces it there, planes and trits never; auto
// weighs the saved wire between nodes against the coding, as select_result_coding does.
bool select_packed_node_counts(const SignPlan& plan, SignAlgorithm algorithm, size_t numel, int num_nodes,
                               double ranks_per_core = 1.0);
// Bits per element of one counter of a node's count between nodes: planes_for(L), or 32/k packed.
double node_count_bits(const SignPlan& plan, int local_size);

// Bits each rank sends per element (SPEC §4's table, generalised to ternary votes and mean mode),
// averaged over ranks. The hierarchical algorithm's depend on the nodes: num_nodes nodes of N/num_nodes
// ranks each.
double wire_bits_per_element(SignAlgorithm algorithm, const SignPlan& plan, int num_nodes = 1);
// Bits per element that leave each node for the others in the hierarchical algorithm: its leader's
// count shards and result chunks, (C·planes_for(L) + R)(M − 1)/M for M nodes of L ranks, R the result's
// wire bits (plan.result_wire_bits(): fewer where the result chunks travel coded).
double hier_inter_node_bits(const SignPlan& plan, int num_nodes, int local_size);

}  // namespace pride
