#include "torch_plugin/distributed_lion.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>

#include "backend/common/settings.h"
#include "collectives/bits/parallel_words.h"
#include "collectives/engine/call_description.h"
#include "collectives/engine/sign/sparse_abstentions.h"
#include "torch_plugin/pride_backend.h"
#include "torch_plugin/tensor_types.h"

namespace pride::torch_plugin {
namespace {

constexpr size_t kWord = 64;

size_t round_up(size_t x, size_t to) { return (x + to - 1) / to * to; }

// One bucket: a word-aligned range of the flat index space, its packed votes and, once the
// sign-allreduce is done, its result planes.
struct Bucket {
  size_t begin = 0;  // flat element index, a multiple of 64
  size_t size = 0;   // elements (the last bucket may end mid-word)
  std::vector<uint64_t> votes;  // the +1 plane, then room for the −1 plane
  BucketInput input;            // this rank's side of the agreement (bucket_agreement.h)
  BucketAgreement agreed;
  SignResult result;
  c10::intrusive_ptr<c10d::Work> work;
};

// The part of tensor i that falls in [begin, end) of the flat index space.
struct Piece {
  size_t tensor;
  size_t offset;  // first element inside the tensor
  size_t size;
  size_t flat;    // its flat index
};

std::vector<Piece> pieces_in(const std::vector<size_t>& starts, const std::vector<int64_t>& sizes, size_t begin,
                             size_t end) {
  std::vector<Piece> out;
  for (size_t i = 0; i < starts.size(); ++i) {
    const size_t lo = std::max(begin, starts[i]), hi = std::min(end, starts[i] + size_t(sizes[i]));
    if (lo < hi) out.push_back({i, lo - starts[i], hi - lo, lo});
  }
  return out;
}

// Runs fn(first_element, elements, first_word) over word ranges of a piece of n elements that starts
// on a word, on up to `threads` threads: the kernels are element-wise and write whole words, so the
// parts are independent and the result is the same bits as one call.
template <class Fn>
void over_piece(size_t n, int threads, const Fn& fn) {
  bits::parallel_words(bits::words_for(n), threads, [&](size_t word, size_t words) {
    const size_t first = word * kWord;
    fn(first, std::min(n - first, words * kWord), word);
  });
}

// What a world of one computes: the result planes of one rank's own votes.
SignResult local_result(const std::vector<uint64_t>& votes, size_t numel, const SignOptions& options) {
  SignResult r;
  r.plan = SignPlan::make(1, options.mode, options.votes);
  r.numel = numel;
  r.nwords = bits::words_for(numel);
  r.planes.assign(size_t(r.plan.result_planes) * r.nwords, 0);
  r.plan.finalize(votes.data(), 1, r.nwords, r.planes.data(), r.nwords);
  return r;
}

}  // namespace

void check_step_tensors(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                        const std::vector<at::Tensor>& momenta, CallSite site) {
  TORCH_CHECK_VALUE(params.size() == grads.size() && params.size() == momenta.size(), "pride ", site, ": ",
                    params.size(), " parameters, ", grads.size(), " gradients and ", momenta.size(),
                    " momentum buffers");
  for (size_t i = 0; i < params.size(); ++i) {
    TORCH_CHECK_VALUE(params[i].defined(), "pride ", site, ": parameter ", i, " is undefined");
    TORCH_CHECK_VALUE(!grads[i].defined() || momenta[i].defined(), "pride ", site, ": parameter ", i,
                      " has a gradient but no momentum buffer");
    for (const at::Tensor* t : {&params[i], &grads[i], &momenta[i]}) {
      if (!t->defined()) continue;  // no gradient on this rank
      TORCH_CHECK_VALUE(t->layout() == at::kStrided, "pride ", site, ": expected dense tensors, got layout ",
                        t->layout());
      TORCH_CHECK_VALUE(t->device() == params[0].device(), "pride ", site, ": every tensor of a step must be on ",
                        params[0].device(), ", got ", t->device());
      TORCH_CHECK_VALUE(t->is_contiguous(), "pride ", site, ": tensors must be contiguous");
      TORCH_CHECK_TYPE(t->scalar_type() == params[0].scalar_type(), "pride ", site, ": one dtype per call, got ",
                       params[0].scalar_type(), " and ", t->scalar_type());
      TORCH_CHECK_VALUE(t->numel() == params[i].numel(), "pride ", site, ": parameter ", i, " has ",
                        params[i].numel(), " elements, its gradient or momentum ", t->numel());
    }
  }
}

bool distributed_lion_step(PrideBackend* backend, const std::vector<at::Tensor>& params,
                           const std::vector<at::Tensor>& grads, const std::vector<at::Tensor>& momenta,
                           const LionHyper& hyper, SignOptions options, LionVotes votes, size_t bucket_elements,
                           uint64_t layout_digest, const CallSite& site, AbstentionMemory* memory) {
  check_step_tensors(params, grads, momenta, site);
  if (params.empty()) return true;
  check_cpu_tensor(params[0], site);  // and so every tensor (check_step_tensors: one device)
  const bits::DType dtype = to_sign_dtype(params[0].scalar_type(), site);
  const size_t elem = bits::dtype_size(dtype);
  // Ternary packing (both planes, c == 0 abstains) for exact and ternary votes; binary votes pack the
  // +1 plane and become ternary planes only if a missing gradient somewhere calls for it.
  const bool pack_ternary = votes != LionVotes::kBinary;
  // The local work (update and pack, apply) uses the cores this rank may have to itself, as the
  // sign-allreduce's kernels do (Communicator::kernel_threads; PRIDE_THREADS overrides; 1 where ranks
  // outnumber cores). A world of one takes PRIDE_THREADS or one thread.
  const int threads = backend != nullptr ? backend->communicator().kernel_threads()
                                         : std::max(1, Settings::get().threads);

  std::vector<size_t> starts;
  std::vector<int64_t> sizes;
  size_t total = 0;
  for (const auto& p : params) {
    starts.push_back(total);
    sizes.push_back(p.numel());
    total += round_up(size_t(p.numel()), kWord);
  }
  if (total == 0) return true;
  bucket_elements = std::max(kWord, round_up(std::min(bucket_elements, kMaxBucketElements), kWord));
  // Set by the first bucket that finds the layouts differ; later buckets then send nothing, so every
  // rank's next collective is the caller's diagnosis.
  auto layouts_differ = std::make_shared<std::atomic<bool>>(false);

  // Sized before any bucket's vote is queued: the worker holds references into it while later buckets pack.
  if (memory != nullptr) memory->reserve((total + bucket_elements - 1) / bucket_elements);

  std::vector<std::shared_ptr<Bucket>> buckets;
  // However the step ends (an error while packing a later bucket, or one rethrown by a bucket's wait),
  // it returns only after every queued vote has: they write `memory`, which the next step reads.
  struct WaitForQueuedVotes {
    const std::vector<std::shared_ptr<Bucket>>& buckets;
    ~WaitForQueuedVotes() {
      for (const auto& b : buckets) {
        if (!b->work) continue;
        try {
          b->work->wait();
        } catch (...) {  // the first error is the one already on its way to the caller
        }
      }
    }
  } wait_for_queued_votes{buckets};
  for (size_t begin = 0; begin < total; begin += bucket_elements) {
    auto b = std::make_shared<Bucket>();
    b->begin = begin;
    b->size = std::min(bucket_elements, total - begin);
    const size_t nwords = bits::words_for(b->size);
    b->votes.assign(2 * nwords, 0);
    b->input.layout_digest = layout_digest;
    b->input.bucket_numel = b->size;
    // 1. pack: the local Lion step of every tensor piece in the bucket that has a gradient here.
    WordRanges voting;  // the pieces that voted
    for (const Piece& pc : pieces_in(starts, sizes, b->begin, b->begin + b->size)) {
      const bool has = grads[pc.tensor].defined();
      b->input.has_grad.push_back(has ? 1 : 0);
      if (!has) continue;  // abstains (both planes stay 0) and keeps its momentum
      const size_t word = (pc.flat - b->begin) / kWord;
      const auto* g = static_cast<const char*>(grads[pc.tensor].data_ptr()) + pc.offset * elem;
      auto* m = static_cast<char*>(momenta[pc.tensor].data_ptr()) + pc.offset * elem;
      over_piece(pc.size, threads, [&](size_t first, size_t count, size_t w) {
        bits::lion_vote(g + first * elem, m + first * elem, dtype, count, hyper.beta1, hyper.beta2,
                        b->votes.data() + word + w, pack_ternary ? b->votes.data() + nwords + word + w : nullptr);
      });
      voting.emplace_back(word, pc.size);
    }
    // Exact votes: a few abstaining elements are listed and re-voted (sparse_abstentions.h), or the
    // union remembered from an earlier step is (bucket_agreement.h); many make the bucket ternary.
    b->input.can_revote = true;
    RememberedUnion* remembered =
        votes == LionVotes::kExact && memory != nullptr && backend != nullptr ? &memory->buckets[buckets.size()] : nullptr;
    if (votes == LionVotes::kExact) {
      const size_t limit =
          abstention_list_limit(b->size, backend != nullptr ? backend->getSize() : 1, remembered != nullptr);
      b->input.abstaining_complete =
          abstaining_elements(b->votes.data(), b->votes.data() + nwords, voting, limit, b->input.abstaining);
      if (remembered != nullptr) {
        b->input.memory_key = remembered_union_key(b->begin, b->size);
        b->input.outside_complete =
            abstaining_outside_union(*remembered, b->input.memory_key, b->votes.data(), b->votes.data() + nwords,
                                     voting, limit, b->input.outside_union);
        // (a memory of another bucket may hold elements past this one's end)
        if (remembered->key == b->input.memory_key) {
          b->input.voting_complete =
              voting_at(remembered->everywhere, b->votes.data(), b->votes.data() + nwords,
                        max_revote_list(b->size, backend->getSize()), b->input.voting_where_all_abstained);
        }
      }
    }
    if (votes == LionVotes::kTernary) b->input.wants_ternary = true;
    // 2. vote: queued on the group's worker; the next bucket is packed meanwhile. Only the worker
    // touches `remembered` from here on (the step returns after every bucket's vote, error or not).
    auto vote = [b, options, votes, voting = std::move(voting), nwords, remembered](Communicator* comm) {
      SignOptions o = options;
      if (comm != nullptr) {
        b->input.call_digest = sign_call_digest(*comm, b->size, o, kSignInputOptimizerBucket);
        b->agreed = agree_on_bucket(*comm, b->input, remembered);
        if (!b->agreed.layouts_agree) return;
        o.votes = b->agreed.votes;
        // Ranks that differ in a setting of the call (PRIDE_ALGO, ...) go through its own check, which
        // names the difference on every rank.
        o.call_agreed = b->agreed.calls_agree;
      } else {  // a world of one: its own view is everyone's
        b->agreed.any_grad = b->input.has_grad;
        o.votes = votes == LionVotes::kBinary ? VoteKind::kBinary : VoteKind::kTernary;
      }
      if (o.votes == VoteKind::kTernary && votes == LionVotes::kBinary) {
        binary_as_ternary(b->votes.data(), b->votes.data() + nwords, nwords, voting);
      }
      if (comm == nullptr) {
        b->result = local_result(b->votes, b->size, o);
      } else if (!b->agreed.revote.empty() || !b->agreed.abstain_everywhere.empty()) {
        // binary votes, the few abstentions re-voted (or known to be everyone's)
        b->result = sign_allreduce_revoting(*comm, b->votes.data(), b->votes.data() + nwords, b->size, o,
                                            kSignInputOptimizerBucket, b->agreed.revote, b->agreed.abstain_everywhere);
      } else {
        b->result = sign_allreduce_planes(*comm, b->votes.data(), b->size, o, kSignInputOptimizerBucket);
      }
    };
    if (backend == nullptr) {
      vote(nullptr);
    } else {
      b->work = backend->run_on_worker("pride:distributed_lion", {}, [vote, layouts_differ, b](Communicator& comm) {
        if (layouts_differ->load()) return;
        vote(&comm);
        if (!b->agreed.layouts_agree) layouts_differ->store(true);
      });
    }
    buckets.push_back(std::move(b));
  }

  // 3. apply, bucket by bucket as results arrive.
  for (const auto& b : buckets) {
    if (b->work) b->work->wait();  // rethrows the engine's error
    // The rest return at once, having sent nothing; wait_for_queued_votes waits for them.
    if (layouts_differ->load()) return false;
    const SignResult& r = b->result;
    const auto pieces = pieces_in(starts, sizes, b->begin, b->begin + b->size);
    for (size_t k = 0; k < pieces.size(); ++k) {
      const Piece& pc = pieces[k];
      if (!b->agreed.any_grad[k]) continue;  // no rank has its gradient: no step
      const size_t word = (pc.flat - b->begin) / kWord;
      auto* x = static_cast<char*>(params[pc.tensor].data_ptr()) + pc.offset * elem;
      if (r.plan.mode == SignMode::kVote) {
        const uint64_t* tie = r.tie_plane();
        over_piece(pc.size, threads, [&](size_t first, size_t count, size_t w) {
          bits::apply_vote(x + first * elem, dtype, count, r.plane(0) + word + w, tie ? tie + word + w : nullptr,
                           hyper.lr, hyper.weight_decay);
        });
      } else {
        over_piece(pc.size, threads, [&](size_t first, size_t count, size_t w) {
          // apply_mean reads planes packed for exactly its elements: gather their words from each plane.
          const size_t part_words = bits::words_for(count);
          std::vector<uint64_t> counts(size_t(r.plan.result_planes) * part_words);
          for (int p = 0; p < r.plan.result_planes; ++p) {
            std::memcpy(counts.data() + size_t(p) * part_words, r.plane(p) + word + w, part_words * 8);
          }
          bits::apply_mean(x + first * elem, dtype, count, counts.data(), r.plan.result_planes, r.plan.mean_scale,
                           r.plan.mean_offset, r.plan.nranks, hyper.lr, hyper.weight_decay);
        });
      }
    }
  }
  return true;
}

}  // namespace pride::torch_plugin
