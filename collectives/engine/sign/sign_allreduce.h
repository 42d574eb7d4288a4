// sign-allreduce (SPEC §2): every rank contributes the signs of a tensor, every rank receives the
// element-wise majority vote or mean of those signs, bit for bit the same for every algorithm.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/communicator.h"
#include "collectives/bits/kernels.h"
#include "collectives/engine/sign/sign_plan.h"
#include "collectives/engine/sign/sign_types.h"

namespace pride {

struct SignOptions {
  SignMode mode = SignMode::kVote;
  VoteKind votes = VoteKind::kBinary;
  SignAlgorithm algorithm = SignAlgorithm::kAuto;  // kAuto: PRIDE_ALGO, else the cost model
  // The caller compared this call's fingerprint on every rank already (sign_call_digest inside its own
  // agreement): the call skips the communicator's check (Communicator::begin_agreed).
  bool call_agreed = false;
  // Packed bytes per pipeline segment: 0 takes the algorithm's default (PRIDE_SEGMENT_BYTES, when set,
  // overrides both). Every rank must pass the same: it is part of the call's fingerprint.
  size_t segment_bytes = 0;
};

// The result as planes (SignPlan's encoding): what the optimizer applies without unpacking.
struct SignResult {
  SignPlan plan;
  SignAlgorithm algorithm = SignAlgorithm::kAuto;
  size_t numel = 0;
  size_t nwords = 0;
  std::vector<uint64_t> planes;  // plan.result_planes planes of nwords words, plane-major
  // Where the planes are when they are not in `planes`: the values API keeps them in the
  // communicator's workspace (valid until its next collective).
  const uint64_t* borrowed_planes = nullptr;
  const uint64_t* plane(int p) const {
    return (borrowed_planes != nullptr ? borrowed_planes : planes.data()) + size_t(p) * nwords;
  }
  const uint64_t* tie_plane() const { return plan.has_tie_plane() ? plane(1) : nullptr; }
  // Writes the values (−1/0/+1, or s/N) as float32/bf16/fp16 (or int8 for votes).
  void write(void* y, bits::DType dtype) const;
};

// Core: `votes` holds the rank's packed votes, plan.counters planes of words_for(numel) words,
// plane-major (binary: the +1 plane; ternary: +1 then −1), tail bits zero. `dtype_code` only enters
// the fingerprint (ranks must agree on it).
SignResult sign_allreduce_planes(Communicator& comm, const uint64_t* votes, size_t numel, const SignOptions& options,
                                 uint32_t dtype_code);
// The same, with the result planes written to `planes_out` (plan.result_planes × words_for(numel)
// words, plane-major), e.g. pinned host memory that a GPU copies from; the SignResult borrows them.
SignResult sign_allreduce_planes(Communicator& comm, const uint64_t* votes, size_t numel, const SignOptions& options,
                                 uint32_t dtype_code, uint64_t* planes_out);

// What a host call with these options would compare with the other ranks' (the fingerprint check), as
// a 64-bit digest, for both vote kinds (options.votes is ignored): a caller that agrees on the vote kind
// and on this digest in one exchange of its own may then set call_agreed. Covers every per-rank setting
// that enters the fingerprint (PRIDE_ALGO, PRIDE_SEGMENT_BYTES, PRIDE_RESULT_CODING, the node map).
uint64_t sign_call_digest(const Communicator& comm, size_t numel, const SignOptions& options, uint32_t dtype_code);

// The algorithm a call with these options runs: options.algorithm, else PRIDE_ALGO, else the cost
// model (selector.h). The same on every rank of a group.
SignAlgorithm choose_sign_algorithm(const Communicator& comm, const SignPlan& plan, size_t numel,
                                    const SignOptions& options);

// The same with the votes and the result planes in another memory (a GPU's), which `ops` keeps and
// works on (plane_ops.h). Runs the direct algorithm only (choose_sign_algorithm must pick it), with
// the same messages as the host call, so ranks whose planes live in different memories work together.
// The result is complete when it returns.
class PlaneOps;
SignResult sign_allreduce_planes(Communicator& comm, PlaneOps& ops, const uint64_t* votes, size_t numel,
                                 const SignOptions& options, uint32_t dtype_code, uint64_t* planes_out);

// In place on float32 / bf16 / fp16 values.
void sign_allreduce(Communicator& comm, void* x, bits::DType dtype, size_t numel, const SignOptions& options);

// Packed-bit input (binary votes, SPEC §2 byte layout, bytes_for(numel) bytes; trailing bits ignored).
// Writes numel results to `out`: int8 −1/0/+1 (vote) or float32 (mean).
void sign_allreduce_packed(Communicator& comm, const uint8_t* packed, size_t numel, const SignOptions& options,
                           void* out);

}  // namespace pride
