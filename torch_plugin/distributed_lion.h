// The fused step of Distributed Lion (SPEC §1, Algorithm 1 of Liu et al. 2024) over a list of
// tensors of one dtype, treated as one flat buffer:
//
//   1. pack   (caller's thread) bucket by bucket, one pass each: the local Lion update's vote and
//             the new momentum (bits::lion_vote);
//   2. vote   (the group's worker thread) a sign-allreduce of each bucket's packed votes, queued as
//             soon as the bucket is packed, so communicating bucket k overlaps packing bucket k+1;
//   3. apply  (caller's thread) x ← x·(1 − lr·λ) − lr·Δ straight from each bucket's result planes
//             (bits::apply_vote / apply_mean), while later buckets are still on the wire.
//
// Each tensor starts at a 64-element boundary of the flat index space, so every piece of a tensor
// in a bucket starts on a whole word of the planes; the few padding bits between tensors vote like
// any element and are never applied.
//
// The layout comes from the parameter list, never from which gradients exist: a tensor whose gradient
// this rank lacks (an undefined grad) keeps its place, abstains in the vote and keeps its momentum;
// one that lacks a gradient on every rank takes no step. Before each bucket travels the ranks agree
// on the layout digest, the vote kind and the missing gradients (bucket_agreement.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "collectives/engine/sign/sign_allreduce.h"
#include "torch_plugin/bucket_agreement.h"
#include "torch_plugin/tensor_types.h"

namespace pride::torch_plugin {

class PrideBackend;

struct LionHyper {
  double lr = 1e-4;
  double beta1 = 0.9;
  double beta2 = 0.99;
  double weight_decay = 0.0;
};

// backend == nullptr: a world of one (no communication), e.g. no process group, or the G-Lion
// baseline's local step on already-averaged gradients. Blocks until every bucket is applied.
// votes: kExact decides per bucket (bucket_agreement.h); kBinary / kTernary use that kind unless a
// missing gradient somewhere makes a bucket ternary. grads[i] and momenta[i] may be undefined
// tensors (no gradient on this rank); momenta[i] must be defined where grads[i] is.
// Returns false, having applied nothing, when the ranks' layout digests differ: the caller names the
// difference (every rank returns false together).
// site: "DistributedLion" and this rank, named by every error (with no backend, G-Lion's local step
// included, the caller's rank in its own group).
// memory (may be null): what the exact votes' agreements remember between this optimizer's steps
// (bucket_agreement.h, RememberedUnion); one per optimizer param group, device and dtype.
bool distributed_lion_step(PrideBackend* backend, const std::vector<at::Tensor>& params,
                           const std::vector<at::Tensor>& grads, const std::vector<at::Tensor>& momenta,
                           const LionHyper& hyper, SignOptions options, LionVotes votes, size_t bucket_elements,
                           uint64_t layout_digest, const CallSite& site, AbstentionMemory* memory = nullptr);

// The argument checks of both steps (CPU and CUDA): as many gradients and momenta as parameters, a
// momentum wherever there is a gradient, and every defined tensor dense, contiguous, on params[0]'s
// device and dtype, and of its parameter's size. Errors say "pride <site>: ..." (the rank with it).
void check_step_tensors(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                        const std::vector<at::Tensor>& momenta, CallSite site);

}  // namespace pride::torch_plugin
