#include "collectives/engine/sign/sign_allreduce.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <future>
#include <memory>

#include "backend/common/error.h"
#include "backend/common/settings.h"
#include "collectives/bits/parallel_words.h"
#include "collectives/engine/call_description.h"
#include "collectives/engine/sign/direct_segment.h"
#include "collectives/engine/sign/hier_rails_segment.h"
#include "collectives/engine/sign/plane_ops.h"
#include "collectives/engine/sign/selector.h"
#include "collectives/engine/sign/sign_algorithms.h"
#include "collectives/engine/sign/sign_scratch.h"
#include "collectives/engine/standard/common.h"

namespace pride {
namespace {

// Words a pipelined kernel handles per thread between two rounds of transport progress (256 Ki
// elements: ~0.1 ms of packing fp32, while 1 Gbit/s moves ~12 KiB).
constexpr size_t kPollWords = bits::kMinWordsPerThread;

// Packed bytes per pipeline segment: PRIDE_SEGMENT_BYTES when set, else the algorithm's default.
// The direct algorithm's pipeline exposes one segment's pack before the first message and one
// segment's unpack after the last, so across hosts its segments are small: 128 KiB (1 Mi elements) took
// a 2^26-element call at 4 × 1 Gbit/s from 188 to 162 ms, 93% of the link (docs/performance.md). Within
// one host there is no slow link to hide: the exchange is a shared-memory copy of 1/32 of the tensor,
// while every segment adds two waits on the other ranks, each a scheduler time slice where ranks
// outnumber cores. There direct takes 4 MiB (2^24 fp32 elements, 4 ranks on 2 cores: 1.09× its kernels'
// time against 1.24× with 128 KiB). Ring, tree and all-gather pay a chain of exchanges per segment, and
// on one host 128 KiB made them ~25% slower, so they keep 1 MiB, as does hier's leader scheme (nodes of
// unequal size), a chain of exchanges too. Hier's rails pipeline keeps the link busy between segments
// (it queues a segment's counts behind the previous one's results), so like direct across hosts it
// takes 128 KiB: 2 hosts × 2 ranks at 1 Gbit/s, 2^24 fp32, 40.2–40.5 ms against 40.6–42.2 with
// 256 KiB, 48 with 512 KiB and 44–46 with 64 KiB. Every rank computes the same size (the node count
// and the node map are the group's; the size is in the fingerprint).
// A caller that knows better passes its own size (SignOptions::segment_bytes: DistributedLion on CUDA
// parameters, whose planes are exchanged in device memory, distributed_lion_cuda.cc).
size_t sign_segment_bytes(SignAlgorithm algorithm, int num_nodes, bool hier_rails, size_t requested) {
  if (const size_t forced = Settings::get().segment_bytes) return forced;
  if (requested != 0) return requested;
  switch (algorithm) {
    case SignAlgorithm::kDirect: return num_nodes == 1 ? size_t{4} << 20 : size_t{128} << 10;
    case SignAlgorithm::kHier: return hier_rails ? size_t{128} << 10 : size_t{1} << 20;
    default: return size_t{1} << 20;
  }
}

using AlgorithmFn = void (*)(Collective&, const SignPlan&, const SignSegment&);

AlgorithmFn algorithm_fn(SignAlgorithm a) {
  switch (a) {
    case SignAlgorithm::kRing: return &sign_ring;
    case SignAlgorithm::kTree: return &sign_tree;
    case SignAlgorithm::kDirect: return &sign_direct;
    case SignAlgorithm::kAllgather: return &sign_allgather;
    case SignAlgorithm::kHier: return &sign_hier;
    case SignAlgorithm::kAuto: break;
  }
  throw Error("sign_allreduce: no algorithm selected");
}

}  // namespace

namespace {

// Per-segment work of the values API around the communication: pack a segment's votes before it is
// sent, unpack its result after. Word ranges of the flat planes; either may be empty. The runners below
// are handed the first segment packed already (run_sign_allreduce packs it before the fingerprint check).
struct SegmentHooks {
  std::function<void(size_t first_word, size_t nwords)> pack;
  std::function<void(const SignResult& result, size_t first_word, size_t nwords)> unpack;
};

struct SegmentRange {
  size_t first_word;
  size_t nwords;
  uint32_t slot_base;
};

uint64_t* result_planes(SignResult& r) {
  return r.borrowed_planes != nullptr ? const_cast<uint64_t*>(r.borrowed_planes) : r.planes.data();
}

// Segment s of the call: its words of the votes and of the result planes, and its message slots.
SignSegment segment_of(SignResult& result, const uint64_t* votes, const SegmentRange& s) {
  return SignSegment{votes + s.first_word, result.nwords, result_planes(result) + s.first_word, result.nwords,
                     s.nwords, s.slot_base};
}

// Runs the segments in order: pack, communicate, unpack. Only the direct algorithm runs on planes
// outside host memory (`ops`); the others are given host planes.
void run_in_sequence(Collective& c, PlaneOps& ops, SignResult& result, const uint64_t* votes,
                     const std::vector<SegmentRange>& segs, const SegmentHooks& hooks) {
  AlgorithmFn run = algorithm_fn(result.algorithm);
  for (const SegmentRange& s : segs) {
    if (hooks.pack && &s != &segs.front()) hooks.pack(s.first_word, s.nwords);  // the first: before the check
    const SignSegment seg = segment_of(result, votes, s);
    if (result.algorithm == SignAlgorithm::kDirect) sign_direct(c, ops, result.plan, seg);
    else run(c, result.plan, seg);
    if (hooks.unpack) {
      ops.settle();  // the host reads the planes: a PlaneOps may have left their last writes queued
      hooks.unpack(result, s.first_word, s.nwords);
    }
  }
}

// Ring, tree, all-gather and hier's leader scheme over several segments: while this thread runs segment
// s's algorithm (its messages and counting), a second thread packs segment s+1 and unpacks s−1. Those kernels
// read and write the tensor, the memory-bound part of the call; the algorithms are a sequence of
// blocking exchanges, so the kernels could not be interleaved with them on one thread the way the
// direct algorithm's are. Segments touch disjoint words of the votes, the result planes and the
// tensor, and the algorithms' scratch is not the kernels', so the two threads share no data; the
// result is the same bits. Only this thread progresses the transport.
void run_overlapped(Collective& c, SignResult& result, const uint64_t* votes, const std::vector<SegmentRange>& segs,
                    const SegmentHooks& hooks) {
  AlgorithmFn run = algorithm_fn(result.algorithm);
  auto pack = [&](size_t i) {
    if (hooks.pack && i < segs.size()) hooks.pack(segs[i].first_word, segs[i].nwords);
  };
  auto unpack = [&](size_t i) {
    if (hooks.unpack) hooks.unpack(result, segs[i].first_word, segs[i].nwords);
  };
  for (size_t i = 0; i < segs.size(); ++i) {
    // std::async's future joins in its destructor: if the algorithm throws, the kernels finish before
    // the buffers they use unwind.
    std::future<void> beside = std::async(std::launch::async, [&, i] {
      pack(i + 1);
      if (i > 0) unpack(i - 1);
    });
    run(c, result.plan, segment_of(result, votes, segs[i]));
    beside.get();
  }
  unpack(segs.size() - 1);
}

// Pack and unpack of a segment for the pipelines below, in pieces with a round of transport progress
// between them: the pipeline's thread is the only one that progresses the transport, and a message
// posted before a long kernel would otherwise wait for it (a full socket buffer, a rendezvous nobody
// answers), which is no overlap at all.
struct PolledKernels {
  Collective& c;
  const SignResult& result;
  const std::vector<SegmentRange>& segs;
  const SegmentHooks& hooks;
  size_t piece;  // words per piece: each kernel thread gets kPollWords

  void in_pieces(size_t i, const std::function<void(size_t, size_t)>& kernel) const {
    const size_t end = segs[i].first_word + segs[i].nwords;
    for (size_t w = segs[i].first_word; w < end; w += piece) {
      kernel(w, std::min(piece, end - w));
      c.poll();
    }
  }
  void pack(size_t i) const {
    if (hooks.pack) in_pieces(i, hooks.pack);
  }
  void unpack(size_t i) const {
    if (hooks.unpack) in_pieces(i, [&](size_t first, size_t n) { hooks.unpack(result, first, n); });
  }
};

// The direct algorithm as a three-stage software pipeline: while segment s's shards are on the wire
// the thread packs segment s+1, and while s's results are on the wire it unpacks segment s−1 and
// posts s+1's shards. Packing, sending and counting overlap; the result is the same bits.
void run_direct_pipelined(Collective& c, PlaneOps& ops, SignResult& result, const uint64_t* votes,
                          const std::vector<SegmentRange>& segs, const SegmentHooks& hooks, int threads) {
  const PolledKernels kernels{c, result, segs, hooks, kPollWords * size_t(std::max(threads, 1))};
  auto segment = [&](size_t i) {
    return std::make_unique<DirectSegment>(c, ops, result.plan, segment_of(result, votes, segs[i]), uint32_t(i % 2));
  };
  std::unique_ptr<DirectSegment> current = segment(0), next;
  current->post_shards();
  for (size_t i = 0; i < segs.size(); ++i) {
    const bool more = i + 1 < segs.size();
    if (more) kernels.pack(i + 1);
    current->vote_and_post_results();
    if (more) {
      next = segment(i + 1);
      next->post_shards();
    }
    if (i > 0) kernels.unpack(i - 1);
    current->finish();
    current = std::move(next);
  }
  // The last segment's result planes: the host reads them now through the unpack hook, or else the
  // caller orders its own readers after the PlaneOps (finish_results: on a GPU, an event).
  if (hooks.unpack) ops.settle();
  else ops.finish_results();
  kernels.unpack(segs.size() - 1);
}

// The hierarchical algorithm's rails (hier_rails_segment.h) as a software pipeline: while segment s's
// counts cross the inter-node link the thread packs segment s+1 and posts its votes to the node's
// ranks; as soon as s's results are posted, s+1's counts are queued behind them, and while both cross
// the link the thread takes in segment s−1's parts from the node's ranks and unpacks it. The link thus
// always has the next message waiting (a segment's counts never wait for the previous segment's
// results to arrive and be shared in the node), and the node's parts of s−1 have had a whole stage to
// arrive: three segments are in flight, each with its own buffers. run_overlapped's second thread hid
// the kernels behind the exchanges too, but each segment's exchanges ran one after the other, the first
// pack and the last unpack exposed; and on a host whose ranks outnumber its cores no second thread
// competes for them here. Every wait is on a message posted at an earlier stage of the same order on
// every rank, so the order cannot deadlock.
void run_hier_pipelined(Collective& c, SignResult& result, const uint64_t* votes, const std::vector<SegmentRange>& segs,
                        const SegmentHooks& hooks, const NodeGroups& nodes, int threads) {
  const PolledKernels kernels{c, result, segs, hooks, kPollWords * size_t(std::max(threads, 1))};
  auto segment = [&](size_t i) {
    return std::make_unique<HierRailsSegment>(c, result.plan, segment_of(result, votes, segs[i]), nodes,
                                              uint32_t(i % 3));
  };
  std::unique_ptr<HierRailsSegment> previous, current = segment(0), next;
  current->post_votes();
  current->count_and_post_counts();
  for (size_t i = 0; i < segs.size(); ++i) {
    const bool more = i + 1 < segs.size();
    if (more) {
      kernels.pack(i + 1);
      next = segment(i + 1);
      next->post_votes();
    }
    current->decide_and_post_results();
    if (more) next->count_and_post_counts();
    if (previous) {
      previous->finish();
      kernels.unpack(i - 1);
    }
    current->share_part();
    previous = std::move(current);
    current = std::move(next);
  }
  previous->finish();
  kernels.unpack(segs.size() - 1);
}

// `planes_out`: where the result planes go (plan.result_planes × words_for(numel) words); null: into
// the returned SignResult's own vector. `ops`: where the votes and result planes live (null: host
// memory, the communicator's workspace); other memories take the direct algorithm only.
// What every rank decides alone for a call, and what the ranks then compare: plan, algorithm, segments.
struct SignCall {
  SignPlan plan;
  SignAlgorithm algorithm = SignAlgorithm::kAuto;
  size_t segment_words = 1;
  NodeGroups nodes;         // the node map, built for hier only (the other algorithms do not need it)
  bool hier_rails = false;  // hier over nodes of equal size: the rails, pipelined (else the leader scheme)
  Fingerprint fingerprint;
};

SignCall plan_sign_call(const Communicator& comm, size_t numel, const SignOptions& options, uint32_t dtype_code) {
  PRIDE_CHECK_ARG(options.segment_bytes == 0 || options.segment_bytes >= 64,
                  "pride rank {}/{}: sign_allreduce: segment_bytes must be 0 (the default) or at least 64, got {}",
                  comm.rank(), comm.size(), options.segment_bytes);
  SignCall call;
  call.plan = SignPlan::make(comm.size(), options.mode, options.votes);
  call.algorithm = choose_sign_algorithm(comm, call.plan, numel, options);
  call.plan.result_coding =
      select_result_coding(call.plan, call.algorithm, numel, comm.num_nodes(), comm.ranks_per_core());
  // Large tensors go through in segments: bounded scratch memory per step, and each segment's
  // messages are tagged apart by their slot range (reused once far behind). Ranks must agree on the
  // segment size (PRIDE_SEGMENT_BYTES), so it is part of the fingerprint.
  // A segment never exceeds the tensor: sizes beyond it mean the same call, and the fingerprint's
  // segment field then stays below kFingerprintPackedNodeCounts' bit for any tensor under 2^41 elements.
  if (call.algorithm == SignAlgorithm::kHier) {
    call.nodes = NodeGroups::make(comm.node_of_rank(), comm.rank());
    call.hier_rails = uniform_nodes(call.nodes);
    // Only the rails send node counts packed; the leader scheme's nodes differ in size.
    call.plan.packed_node_counts =
        call.hier_rails &&
        select_packed_node_counts(call.plan, call.algorithm, numel, comm.num_nodes(), comm.ranks_per_core());
  }
  call.segment_words = std::clamp<size_t>(sign_segment_bytes(call.algorithm, comm.num_nodes(), call.hier_rails,
                                                             options.segment_bytes) / 8,
                                          1, std::max<size_t>(1, bits::words_for(numel)));
  Fingerprint& fp = call.fingerprint;
  fp.op = kSignAllreduceOp;
  fp.dtype = dtype_code;
  fp.numel = numel;
  fp.describe = &describe_call;
  fp.detail = uint64_t(options.mode) | uint64_t(options.votes) << 8 | uint64_t(call.algorithm) << 16 |
              uint64_t(call.segment_words) << 24 |
              (call.plan.result_coding == ResultCoding::kTrits ? kFingerprintTritResults : 0) |
              (call.plan.result_coding == ResultCoding::kCounts ? kFingerprintCountResults : 0) |
              (call.plan.packed_node_counts ? kFingerprintPackedNodeCounts : 0);
  return call;
}

SignResult run_sign_allreduce(Communicator& comm, const uint64_t* votes, size_t numel, const SignOptions& options,
                              uint32_t dtype_code, const SegmentHooks& hooks, uint64_t* planes_out,
                              PlaneOps* ops = nullptr) {
  const SignCall call = plan_sign_call(comm, numel, options, dtype_code);
  SignResult result;
  result.plan = call.plan;
  result.numel = numel;
  result.nwords = bits::words_for(numel);
  result.algorithm = call.algorithm;
  PRIDE_CHECK_ARG(ops == nullptr || result.algorithm == SignAlgorithm::kDirect,
                  "rank {}: sign_allreduce over a PlaneOps (device memory) runs the direct algorithm only, not {}",
                  comm.rank(), name(result.algorithm));
  HostPlaneOps host(comm.workspace());
  if (ops == nullptr) ops = &host;
  if (planes_out != nullptr) {
    result.borrowed_planes = planes_out;
  } else {
    result.planes.resize(size_t(result.plan.result_planes) * result.nwords);  // every word is written
  }

  const size_t segment_words = call.segment_words;
  const uint32_t slots = sign_slots_per_segment(comm.size());
  std::vector<SegmentRange> segs;
  uint32_t slot = 0;
  for (size_t begin = 0; begin < result.nwords; begin += segment_words) {
    segs.push_back({begin, std::min(segment_words, result.nwords - begin), slot});
    slot = slot + 2 * slots > Collective::kMaxSlot ? 0 : slot + slots;
  }
  // The first segment is packed before the fingerprint check, which every runner below then takes as
  // done: packing only reads the tensor and writes this rank's own votes, so a call the check refuses
  // has sent nothing. The check's rounds then meet ranks that have already packed, and the shards go
  // out right after it: one wait on the slowest rank fewer per call (with 4 ranks on 2 cores each such
  // wait costs a scheduler slice; docs/performance.md).
  if (hooks.pack && !segs.empty()) hooks.pack(segs.front().first_word, segs.front().nwords);
  Collective c = options.call_agreed ? comm.begin_agreed("sign_allreduce", name(result.algorithm))
                                     : comm.begin("sign_allreduce", name(result.algorithm), call.fingerprint);
  if (segs.empty()) return result;
  if (result.algorithm == SignAlgorithm::kDirect && segs.size() > 1) {
    run_direct_pipelined(c, *ops, result, votes, segs, hooks, comm.kernel_threads());
  } else if (call.hier_rails && segs.size() > 1) {
    run_hier_pipelined(c, result, votes, segs, hooks, call.nodes, comm.kernel_threads());
  } else if (segs.size() > 1 && (hooks.pack || hooks.unpack)) {
    run_overlapped(c, result, votes, segs, hooks);
  } else {
    run_in_sequence(c, *ops, result, votes, segs, hooks);
  }
  return result;
}

// Writes the values of result words [first_word, first_word + nwords) as dtype.
void write_words(const SignResult& r, size_t first_word, size_t nwords, void* y, bits::DType dtype) {
  if (nwords == 0) return;
  const size_t begin = first_word * 64, count = std::min(r.numel, (first_word + nwords) * 64) - begin;
  void* out = static_cast<char*>(y) + begin * bits::dtype_size(dtype);
  if (r.plan.mode == SignMode::kVote) {
    const uint64_t* tie = r.tie_plane();
    // The pipelines unpack a large tensor in pieces (about 1 MiB): each is streamed past the cache,
    // which the whole tensor would not fit anyway, rather than judged by its own size.
    const bool large = r.numel * bits::dtype_size(dtype) >= bits::kStreamingStoreBytes;
    bits::unpack_vote(r.plane(0) + first_word, tie ? tie + first_word : nullptr, count, out, dtype,
                      large ? bits::OutputStores::kStreaming : bits::OutputStores::kBySize);
    return;
  }
  // unpack_mean reads planes laid out for exactly `count` elements: gather this range's words.
  std::vector<uint64_t> planes(size_t(r.plan.result_planes) * nwords);
  for (int p = 0; p < r.plan.result_planes; ++p) {
    std::memcpy(planes.data() + size_t(p) * nwords, r.plane(p) + first_word, nwords * 8);
  }
  bits::unpack_mean(planes.data(), r.plan.result_planes, count, r.plan.mean_scale, r.plan.mean_offset,
                    r.plan.nranks, out, dtype);
}

}  // namespace

void SignResult::write(void* y, bits::DType dtype) const { write_words(*this, 0, nwords, y, dtype); }

uint64_t sign_call_digest(const Communicator& comm, size_t numel, const SignOptions& options, uint32_t dtype_code) {
  std::vector<size_t> words;  // both vote kinds' fingerprints, hashed like a size vector (FNV-1a)
  for (VoteKind votes : {VoteKind::kBinary, VoteKind::kTernary}) {
    SignOptions o = options;
    o.votes = votes;
    const Fingerprint fp = plan_sign_call(comm, numel, o, dtype_code).fingerprint;
    words.insert(words.end(), {size_t(fp.op), size_t(fp.dtype), size_t(fp.numel), size_t(fp.detail)});
  }
  return standard::hash_sizes(words);
}

SignAlgorithm choose_sign_algorithm(const Communicator& comm, const SignPlan& plan, size_t numel,
                                    const SignOptions& options) {
  if (options.algorithm != SignAlgorithm::kAuto) return options.algorithm;
  return select_sign_algorithm(plan, numel, comm.num_nodes(), comm.ranks_per_core());
}

SignResult sign_allreduce_planes(Communicator& comm, PlaneOps& ops, const uint64_t* votes, size_t numel,
                                 const SignOptions& options, uint32_t dtype_code, uint64_t* planes_out) {
  PRIDE_CHECK_ARG(planes_out != nullptr || numel == 0, "sign_allreduce_planes: null result buffer");
  return run_sign_allreduce(comm, votes, numel, options, dtype_code, {}, planes_out, &ops);
}

SignResult sign_allreduce_planes(Communicator& comm, const uint64_t* votes, size_t numel, const SignOptions& options,
                                 uint32_t dtype_code) {
  return run_sign_allreduce(comm, votes, numel, options, dtype_code, {}, nullptr);
}

SignResult sign_allreduce_planes(Communicator& comm, const uint64_t* votes, size_t numel, const SignOptions& options,
                                 uint32_t dtype_code, uint64_t* planes_out) {
  PRIDE_CHECK_ARG(planes_out != nullptr || numel == 0, "sign_allreduce_planes: null result buffer");
  return run_sign_allreduce(comm, votes, numel, options, dtype_code, {}, planes_out);
}

void sign_allreduce(Communicator& comm, void* x, bits::DType dtype, size_t numel, const SignOptions& options) {
  PRIDE_CHECK_ARG(dtype == bits::DType::kFloat32 || dtype == bits::DType::kBFloat16 || dtype == bits::DType::kFloat16,
                  "sign_allreduce: unsupported dtype {} (float32, bfloat16 or float16)", bits::dtype_name(dtype));
  PRIDE_CHECK_ARG(x != nullptr || numel == 0, "sign_allreduce: null buffer");
  const size_t nwords = bits::words_for(numel), elem = bits::dtype_size(dtype);
  const bool binary = options.votes == VoteKind::kBinary;
  // Packed votes and result planes live in the communicator's workspace: no allocation, page faults
  // or zero-fill per call.
  uint64_t* votes = sign_scratch(comm.workspace(), SignScratch::kVotes, size_t(binary ? 1 : 2) * nwords);
  const int result_planes = SignPlan::make(comm.size(), options.mode, options.votes).result_planes;
  uint64_t* planes = sign_scratch(comm.workspace(), SignScratch::kResultPlanes, size_t(result_planes) * nwords);
  // Packing and unpacking read and write the tensor itself, the memory-bound part of the call: they
  // use the threads the rank's cores allow (Communicator::kernel_threads), on disjoint word ranges.
  const int threads = comm.kernel_threads();
  SegmentHooks hooks;
  hooks.pack = [&](size_t segment_first, size_t segment_words) {
    bits::parallel_words(segment_words, threads, [&](size_t offset, size_t words) {
      const size_t first_word = segment_first + offset;
      const size_t begin = first_word * 64, count = std::min(numel, (first_word + words) * 64) - begin;
      const void* in = static_cast<const char*>(x) + begin * elem;
      if (binary) bits::pack_binary(in, dtype, count, votes + first_word);
      else bits::pack_ternary(in, dtype, count, votes + first_word, votes + nwords + first_word);
    });
  };
  hooks.unpack = [&](const SignResult& r, size_t segment_first, size_t segment_words) {
    bits::parallel_words(segment_words, threads, [&](size_t offset, size_t words) {
      write_words(r, segment_first + offset, words, x, dtype);
    });
  };
  run_sign_allreduce(comm, votes, numel, options, uint32_t(dtype), hooks, planes);
}

void sign_allreduce_packed(Communicator& comm, const uint8_t* packed, size_t numel, const SignOptions& options,
                           void* out) {
  PRIDE_CHECK_ARG(options.votes == VoteKind::kBinary, "sign_allreduce_packed: packed input carries binary votes only");
  PRIDE_CHECK_ARG((packed != nullptr && out != nullptr) || numel == 0, "sign_allreduce_packed: null buffer");
  const size_t nwords = bits::words_for(numel);
  std::vector<uint64_t> votes(nwords, 0);
  if (numel > 0) {
    std::memcpy(votes.data(), packed, bits::bytes_for(numel));
    if (numel % 64 != 0) votes[nwords - 1] &= (uint64_t(1) << (numel % 64)) - 1;  // readers ignore trailing bits
  }
  const bits::DType out_type = options.mode == SignMode::kVote ? bits::DType::kInt8 : bits::DType::kFloat32;
  SegmentHooks hooks;
  hooks.unpack = [&](const SignResult& r, size_t first_word, size_t words) {
    write_words(r, first_word, words, out, out_type);
  };
  run_sign_allreduce(comm, votes.data(), numel, options, kSignInputPacked, hooks, nullptr);
}

}  // namespace pride
