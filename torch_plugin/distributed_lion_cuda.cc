#include "torch_plugin/distributed_lion_cuda.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>
#include <tuple>

#include "backend/common/settings.h"
#include "collectives/bits/cuda/kernels.h"
#include "collectives/bits/cuda/tensor_slices.h"
#include "collectives/engine/call_description.h"
#include "collectives/engine/sign/sparse_abstentions.h"
#include "torch_plugin/device_revote.h"
#include "torch_plugin/device_vote.h"
#include "torch_plugin/pride_backend.h"
#include "torch_plugin/private_cuda_stream.h"
#include "torch_plugin/tensor_types.h"
#include "torch_plugin/word_buffers.h"

namespace pride::torch_plugin {

struct CudaLionWorkspace::Buffers {
  at::Tensor votes, planes;              // device, int64 words: every bucket's vote and result planes
  at::Tensor votes_host, planes_host;    // pinned twins for the host-staging path
  at::Tensor slices_host, slices;        // the slice tables of a step with a group, pinned and on the device
  // Exact votes with a group: per bucket, how many elements must abstain (uint32 counts), found on the
  // device and copied to the pinned twin in the caller's stream order, before the bucket's `packed` event;
  // and which (uint32 lists, up to each bucket's capacity, with where each Lion slice's run of them lies),
  // copied by the worker (through pinned memory of the moment) only when there are some.
  at::Tensor abstaining_counts, abstaining_counts_host;
  at::Tensor abstaining, abstaining_runs;
  cudaEvent_t last_use = nullptr;        // the end of the last step's use of the pinned buffers
  // The worker's stream for the votes, the same one every step: the caching allocator keeps its blocks
  // per stream, so the exchange's scratch planes come back at the same addresses, and the peers' UCX
  // finds their cuda_ipc mappings cached instead of opening new ones (a stream from the pool each step
  // cost fresh cudaMallocs, and each mapping a round of context switches on a shared GPU).
  // Its own, not one of torch's pool, which could be another group's NCCL stream (private_cuda_stream.h).
  std::optional<PrivateCudaStream> vote_stream;
  // The worker's stream for the few small copies of data it has already waited for on the host (the
  // abstention lists, the votes at a re-vote's elements): a wait on it is not behind the earlier buckets'
  // exchanges queued on vote_stream (NCCL's, which no host thread otherwise waits for). A stream of its
  // own, not one of torch's pool: the pool hands its 32 streams out in turn, so after 32 such requests
  // in a process this could be another's stream with unrelated work queued, which the waits would wait for.
  std::optional<PrivateCudaStream> copy_stream;
  std::vector<cudaEvent_t> packed;       // per bucket: its votes are in votes_host
  std::vector<cudaEvent_t> voted;        // per bucket: its result planes are written (on vote_stream)
  c10::DeviceIndex device = -1;

  // A world of one's slice table as last copied to `local_slices` (its own device buffer, made on
  // `local_slices_stream`): a step with the same one (the same tensors, the gradients at the same
  // addresses, as the caching allocator gives them back step after step) launches on the device table
  // as it stands, without copying it again or waiting for the last step.
  std::vector<bits::cuda::LocalSlice> local_table;
  at::Tensor local_slices;
  cudaStream_t local_slices_stream = nullptr;

  ~Buffers() {
    if (device < 0) return;
    // A destructor has nowhere to report an error, and the guard's cudaSetDevice may throw when the
    // CUDA runtime is gone (a workspace freed at exit): then the events are left to the driver.
    try {
      c10::cuda::CUDAGuard guard(device);
      if (last_use) cudaEventSynchronize(last_use);
      if (last_use) cudaEventDestroy(last_use);
      for (cudaEvent_t e : packed) cudaEventDestroy(e);
      for (cudaEvent_t e : voted) cudaEventDestroy(e);
    } catch (...) {
    }
  }
};

CudaLionWorkspace::CudaLionWorkspace() : buffers_(std::make_unique<Buffers>()) {}
CudaLionWorkspace::~CudaLionWorkspace() = default;

int64_t CudaLionWorkspace::device_bytes() const {
  int64_t bytes = 0;
  for (const at::Tensor* t : {&buffers_->votes, &buffers_->planes, &buffers_->slices, &buffers_->local_slices,
                              &buffers_->abstaining_counts, &buffers_->abstaining, &buffers_->abstaining_runs}) {
    if (t->defined()) bytes += t->numel() * t->element_size();
  }
  return bytes;
}

namespace {

using bits::cuda::LocalSlice;
using bits::cuda::TensorSlice;
constexpr size_t kWord = 64;

// Packed bytes per pipeline segment of a bucket's exchange when every rank is on one host and sends
// its planes from GPU memory: the whole bucket's planes in one segment (a 1 GiB fp32 bucket packs to
// 32 MiB a plane). There the planes move GPU to GPU at about 1.3 TB/s, so segments hide nothing, and
// each one costs a few waits on the other ranks' streams: with ranks sharing a GPU each such wait is a
// context switch. 4 ranks on one H200, 350M fp32 parameters in 1 GiB buckets: 36.1 ms a step with the
// engine's 4 MiB segments, 17.7 ms with these (docs/performance.md). Across hosts the engine's small
// segments stay (they pipeline the link), and so they do on host staging, whose scratch would grow to
// the bucket's size and stay allocated in the communicator's workspace.
constexpr size_t kOneHostSegmentBytes = size_t{256} << 20;

// The most abstaining elements of one bucket that the device lists for the exact votes' agreement: 2^22
// uint32 indices, 16 MiB on the device (the worker takes pinned memory for a copy only when there is a
// list). Up to abstentions_worth_listing (bucket_agreement.h) and these two caps the agreement decides as
// the CPU step's would; a rank with more than the device listed says its lists are too long, and the
// bucket may go ternary where the CPU step's would re-vote: exact either way, only dearer.
constexpr size_t kMaxListedAbstentions = size_t{1} << 22;
// ... and at most one element in this many of the bucket: the device list then costs at most 1/32 of
// fp32 parameters' bytes (the votes and result planes take 1/8), with room for models where up to 3% of
// a rank's elements are dead (the digits CNN has ~3%). With a memory the CPU step lists up to about
// numel / 20 at N = 4 (abstention_list_limit): a CUDA rank with 3-5% abstaining goes ternary there.
constexpr size_t kListedElementsPerBucketElement = 32;

size_t round_up(size_t x, size_t to) { return (x + to - 1) / to * to; }

void check_launch(cudaError_t status, const CallSite& site, const char* what) {
  TORCH_CHECK(status == cudaSuccess, "pride ", site, ": ", what, " failed: ", cudaGetErrorString(status));
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

struct BucketPlan {
  SignPlan plan;  // how its result is encoded (decided with the other ranks: binary or ternary)
  size_t begin = 0, size = 0, nwords = 0;
  size_t vote_offset = 0, plane_offset = 0;  // in words, into the votes / planes buffers
  size_t first_lion = 0, nlion = 0;          // into the lion table: the slices with a gradient here
  size_t first_apply = 0, napply = 0;        // into the apply table: every slice
  std::vector<size_t> apply_owner;           // per apply slice: its tensor's index among the bucket's
  bool lacks_grad = false;                   // some tensor of the bucket has no gradient here
  BucketInput input;                         // this rank's side of the agreement (bucket_agreement.h)
  BucketAgreement agreed;
  // Exact votes: where the device lists this bucket's abstaining elements (uint32 entries into the
  // lists buffer), and how many it may; the bucket's memory of them (null: none kept).
  size_t list_offset = 0, list_capacity = 0;
  RememberedUnion* remembered = nullptr;
  c10::intrusive_ptr<c10d::Work> work;
};

struct StepPlan {
  SignPlan binary, ternary;  // the two encodings a bucket may travel in
  SignOptions options;
  LionVotes votes;
  LionHyper hyper;
  bits::DType dtype;
  cudaStream_t stream;         // the caller's: local update, pack, apply
  c10::cuda::CUDAStream vote_stream;  // the worker's: agreement, exchange and count of each bucket's planes
  c10::cuda::CUDAStream copy_stream;  // the worker's: small copies of what it has waited for (Buffers)
  c10::Device device;
  int nranks;
  NcclGroup* nccl;             // the group's NCCL side when NCCL carries its CUDA tensors, else null
  CallSite site;               // "DistributedLion" and this rank, for errors
};

// A world of one (no group, or G-Lion's step on gradients already averaged): the vote is this rank's
// own, so each tensor with a gradient takes Lion's whole step in one pass (lion_local_slices), and one
// without takes none. No planes, no buckets: one launch reads g, m and x once and writes m and x once.
void local_step(CudaLionWorkspace::Buffers& ws, const std::vector<at::Tensor>& params,
                const std::vector<at::Tensor>& grads, const std::vector<at::Tensor>& momenta, const StepPlan& step) {
  const size_t elem = bits::dtype_size(step.dtype);
  std::vector<LocalSlice> slices;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!grads[i].defined()) continue;
    const size_t n = size_t(params[i].numel());
    for (size_t offset = 0; offset < n; offset += bits::cuda::kSliceElements) {
      const char* g = static_cast<const char*>(grads[i].data_ptr()) + offset * elem;
      char* m = static_cast<char*>(momenta[i].data_ptr()) + offset * elem;
      char* x = static_cast<char*>(params[i].data_ptr()) + offset * elem;
      const auto count = uint32_t(std::min<size_t>(bits::cuda::kSliceElements, n - offset));
      slices.push_back({g, m, x, count, uint32_t(aligned16(g) && aligned16(m) && aligned16(x))});
    }
  }
  const size_t nslices = slices.size();
  if (nslices == 0) return;
  static_assert(std::has_unique_object_representations_v<LocalSlice>, "tables are compared byte for byte");
  const size_t table_bytes = nslices * sizeof(LocalSlice);
  const bool same_table = ws.last_use != nullptr && ws.local_table.size() == nslices &&
                          std::memcmp(ws.local_table.data(), slices.data(), table_bytes) == 0;
  if (same_table) {
    // The device table is this step's already; only its copy must be done before the kernel reads it,
    // which the stream orders when the caller's stream is the last step's, and this wait when not.
    C10_CUDA_CHECK(cudaStreamWaitEvent(step.stream, ws.last_use, 0));
  } else {
    // Another table (the first step, another parameter group, gradients elsewhere): it goes to a new
    // device buffer through a new pinned one, both from torch's caching allocators, so nothing waits on
    // the host. Parameter groups (stepped one after the other, each with its own table) miss every
    // time, and waiting here for the last group's kernel would keep the host from running ahead. The
    // host allocator keeps the pinned block until the copy has read it; the old device table goes back
    // to its stream's pool behind the kernels that read it (recordStream below, for other streams).
    ws.local_table.clear();  // until the copy below is queued: a failure leaves no table to trust
    at::Tensor host = at::empty({int64_t(round_up(table_bytes, 8) / 8)}, word_options(at::kCPU, /*pinned=*/true));
    std::copy(slices.begin(), slices.end(), reinterpret_cast<LocalSlice*>(host.data_ptr<int64_t>()));
    c10::cuda::CUDAStreamGuard on_step(c10::cuda::getStreamFromExternal(step.stream, step.device.index()));
    ws.local_slices = host.to(step.device, /*non_blocking=*/true);
    ws.local_slices_stream = step.stream;
    ws.local_table = std::move(slices);
  }
  if (step.stream != ws.local_slices_stream) {
    c10::cuda::CUDACachingAllocator::recordStream(ws.local_slices.storage().data_ptr(),
                                                  c10::cuda::getStreamFromExternal(step.stream, step.device.index()));
  }
  const cudaError_t launched = bits::cuda::lion_local_slices(
      reinterpret_cast<const LocalSlice*>(ws.local_slices.data_ptr<int64_t>()), nslices, step.dtype, step.hyper.beta1,
      step.hyper.beta2, step.votes != LionVotes::kBinary, step.hyper.lr, step.hyper.weight_decay, step.stream);
  // A step on another stream that finds this table waits for this (the copy is behind it) before its
  // kernel reads the table; the workspace waits for it before it is freed. Recorded even if the launch
  // failed, since the copy is queued either way.
  if (!ws.last_use) C10_CUDA_CHECK(cudaEventCreateWithFlags(&ws.last_use, cudaEventDisableTiming));
  C10_CUDA_CHECK(cudaEventRecord(ws.last_use, step.stream));
  check_launch(launched, step.site, "lion_local");
}

// Returns false (nothing applied) when the ranks' layouts differ.
bool pack_vote_apply(PrideBackend* backend, CudaLionWorkspace::Buffers& ws, const StepPlan& step,
                     std::vector<BucketPlan>& buckets, const std::vector<TensorSlice>& apply_slices,
                     const TensorSlice* lion_table, const TensorSlice* apply_table);

}  // namespace

bool distributed_lion_step_cuda(PrideBackend* backend, CudaLionWorkspace& workspace,
                                const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                                const std::vector<at::Tensor>& momenta, const LionHyper& hyper, SignOptions options,
                                LionVotes votes, size_t bucket_elements, uint64_t layout_digest,
                                const CallSite& site, AbstentionMemory* memory) {
  check_step_tensors(params, grads, momenta, site);
  if (params.empty()) return true;
  TORCH_CHECK_VALUE(params[0].is_cuda(), "pride ", site, ": expected CUDA tensors, got ", params[0].device());
  const c10::Device device = params[0].device();
  c10::cuda::CUDAGuard device_guard(device);
  CudaLionWorkspace::Buffers& ws = workspace.buffers();
  TORCH_CHECK_VALUE(ws.device < 0 || ws.device == device.index(), "pride ", site, ": a workspace serves one device, ",
                    int(ws.device), ", got tensors on ", device);
  ws.device = device.index();
  if (!ws.vote_stream) ws.vote_stream.emplace(device.index());
  if (!ws.copy_stream) ws.copy_stream.emplace(device.index());
  const int nranks = backend ? backend->getSize() : 1;
  const StepPlan step{SignPlan::make(nranks, options.mode, VoteKind::kBinary),
                      SignPlan::make(nranks, options.mode, VoteKind::kTernary),
                      options,
                      votes,
                      hyper,
                      to_sign_dtype(params[0].scalar_type(), site),
                      c10::cuda::getCurrentCUDAStream(device.index()).stream(),
                      ws.vote_stream->get(),
                      ws.copy_stream->get(),
                      device,
                      nranks,
                      backend != nullptr && backend->gpu_transport(device) == GpuTransport::kNccl ? backend->nccl()
                                                                                                  : nullptr,
                      site};
  const size_t elem = bits::dtype_size(step.dtype);
  if (backend == nullptr) {
    local_step(ws, params, grads, momenta, step);
    return true;
  }
  // The last step is done with the pinned buffers (and its copies back to the GPU, which nothing else
  // waits for): this must stay before ensure_words below, which may free and replace them.
  if (ws.last_use) C10_CUDA_CHECK(cudaEventSynchronize(ws.last_use));

  // Layout: every tensor starts on a word of the flat index space; buckets are word-aligned ranges.
  std::vector<size_t> starts;
  size_t total = 0;
  for (const auto& p : params) {
    starts.push_back(total);
    total += round_up(size_t(p.numel()), kWord);
  }
  if (total == 0) return true;
  bucket_elements = std::max(kWord, round_up(std::min(bucket_elements, kMaxBucketElements), kWord));

  // Sized before any bucket's vote is queued: the worker holds references into it while later buckets pack.
  if (votes != LionVotes::kExact) memory = nullptr;
  if (memory != nullptr) memory->reserve((total + bucket_elements - 1) / bucket_elements);

  // Buckets and their slices (pieces of at most kSliceElements, words relative to the bucket). The
  // buffers have room for ternary votes and results, whichever kind a bucket ends up with.
  const size_t result_planes = size_t(std::max(step.binary.result_planes, step.ternary.result_planes));
  std::vector<BucketPlan> buckets;
  std::vector<TensorSlice> lion_slices, apply_slices;
  size_t vote_words = 0, plane_words = 0, list_entries = 0;
  for (size_t begin = 0; begin < total; begin += bucket_elements) {
    BucketPlan b;
    b.begin = begin;
    b.size = std::min(bucket_elements, total - begin);
    b.nwords = bits::words_for(b.size);
    b.vote_offset = vote_words;
    b.plane_offset = plane_words;
    vote_words += 2 * b.nwords;
    plane_words += result_planes * b.nwords;
    b.first_lion = lion_slices.size();
    b.first_apply = apply_slices.size();
    b.input.layout_digest = layout_digest;
    b.input.bucket_numel = b.size;
    if (votes == LionVotes::kExact) {
      if (memory != nullptr) {
        // Read before the bucket's vote is queued, which alone writes this bucket's memory in this step.
        b.remembered = &memory->buckets[buckets.size()];
        b.input.memory_key = remembered_union_key(b.begin, b.size);
      }
      b.list_capacity = std::min(abstentions_worth_listing(b.size, nranks, b.remembered, b.input.memory_key),
                                 std::min(kMaxListedAbstentions, b.size / kListedElementsPerBucketElement));
      b.list_offset = list_entries;
      list_entries += b.list_capacity;
    }
    for (size_t i = 0; i < params.size(); ++i) {
      const size_t lo = std::max(begin, starts[i]), hi = std::min(begin + b.size, starts[i] + size_t(params[i].numel()));
      if (lo >= hi) continue;
      const bool has = grads[i].defined();
      b.lacks_grad = b.lacks_grad || !has;
      const size_t owner = b.input.has_grad.size();
      b.input.has_grad.push_back(has ? 1 : 0);
      for (size_t flat = lo; flat < hi; flat += bits::cuda::kSliceElements) {
        const size_t offset = flat - starts[i], count = std::min<size_t>(bits::cuda::kSliceElements, hi - flat);
        char* x = static_cast<char*>(params[i].data_ptr()) + offset * elem;
        const uint64_t word = (flat - begin) / kWord;
        apply_slices.push_back({nullptr, x, word, uint32_t(count), uint32_t(aligned16(x))});
        b.apply_owner.push_back(owner);
        if (!has) continue;  // abstains here and keeps its momentum
        const char* g = static_cast<const char*>(grads[i].data_ptr()) + offset * elem;
        char* m = static_cast<char*>(momenta[i].data_ptr()) + offset * elem;
        lion_slices.push_back({g, m, word, uint32_t(count), uint32_t(aligned16(g) && aligned16(m))});
      }
    }
    b.nlion = lion_slices.size() - b.first_lion;
    b.napply = apply_slices.size() - b.first_apply;
    buckets.push_back(std::move(b));
  }

  // Buffers, reused from the last step when large enough.
  const auto on_device = params[0].options().dtype(at::kLong);
  const auto pinned = word_options(at::kCPU, /*pinned=*/true);
  ensure_words(ws.votes, vote_words, on_device);
  ensure_words(ws.planes, plane_words, on_device);
  ensure_words(ws.votes_host, vote_words, pinned);
  ensure_words(ws.planes_host, plane_words, pinned);
  if (votes == LionVotes::kExact) {  // uint32 counts and lists, in int64 words
    ensure_words(ws.abstaining_counts, (buckets.size() + 1) / 2, on_device);
    ensure_words(ws.abstaining_counts_host, (buckets.size() + 1) / 2, pinned);
    ensure_words(ws.abstaining, (list_entries + 1) / 2, on_device);
    ensure_words(ws.abstaining_runs, lion_slices.size(), on_device);  // two uint32 a Lion slice
  }
  const size_t table_bytes = (lion_slices.size() + apply_slices.size()) * sizeof(TensorSlice);
  ensure_words(ws.slices_host, round_up(table_bytes, 8) / 8, pinned);
  ensure_words(ws.slices, round_up(table_bytes, 8) / 8, on_device);
  auto* table_host = reinterpret_cast<TensorSlice*>(ws.slices_host.data_ptr<int64_t>());
  std::copy(lion_slices.begin(), lion_slices.end(), table_host);
  std::copy(apply_slices.begin(), apply_slices.end(), table_host + lion_slices.size());
  C10_CUDA_CHECK(cudaMemcpyAsync(ws.slices.data_ptr(), table_host, table_bytes, cudaMemcpyHostToDevice, step.stream));
  const auto* lion_table = reinterpret_cast<const TensorSlice*>(ws.slices.data_ptr<int64_t>());
  const TensorSlice* apply_table = lion_table + lion_slices.size();
  for (std::vector<cudaEvent_t>* events : {&ws.packed, &ws.voted}) {
    while (events->size() < buckets.size()) {
      cudaEvent_t e;
      C10_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      events->push_back(e);
    }
  }

  // A failure part-way (a launch, or a peer) must not leave bucket tasks queued on the worker that
  // still read and write the workspace: wait for every task that was queued, then rethrow.
  bool applied = false;
  try {
    applied = pack_vote_apply(backend, ws, step, buckets, apply_slices, lion_table, apply_table);
  } catch (...) {
    for (BucketPlan& b : buckets) {
      if (!b.work) continue;
      try {
        b.work->wait();
      } catch (...) {
      }
    }
    // Work a task queued on the vote stream may still write the workspace (no task waits for it), and a
    // task that returned early never waited for its bucket's copies to the pinned buffers: wait for the
    // former here; the next step waits for the latter before it reuses or grows those buffers.
    // Unchecked: the error being rethrown is the one to report.
    (void)cudaStreamSynchronize(step.vote_stream.stream());
    (void)cudaStreamSynchronize(step.copy_stream.stream());
    if (!ws.last_use && cudaEventCreateWithFlags(&ws.last_use, cudaEventDisableTiming) != cudaSuccess) ws.last_use = nullptr;
    if (ws.last_use) (void)cudaEventRecord(ws.last_use, step.stream);
    throw;
  }
  if (!ws.last_use) C10_CUDA_CHECK(cudaEventCreateWithFlags(&ws.last_use, cudaEventDisableTiming));
  C10_CUDA_CHECK(cudaEventRecord(ws.last_use, step.stream));
  return applied;
}

namespace {

// Where one bucket's abstaining elements were listed on the device (pack_vote_apply), for its vote.
struct AbstentionList {
  const uint32_t* count_host = nullptr;  // pinned: how many there are (the list holds up to the bucket's capacity)
  const uint32_t* device = nullptr;      // the list: each Lion slice's run ascending, the runs in no order
  const uint32_t* runs_device = nullptr;  // per Lion slice of the bucket: (first place, count) of its run
  size_t nslices = 0;
};

// The bucket's abstaining elements, ascending, from the device's list (complete: count <= its capacity),
// copied on `stream`, which has nothing else to wait for: the runs in slice order (the slices lie in
// ascending order of their words). False if the runs do not add up to `count` or are out of order (then
// the rank says its list is too long, which costs bytes, never exactness, and every rank still decides
// from the same header).
bool abstaining_in_order(const AbstentionList& listed, size_t count, cudaStream_t stream,
                         std::vector<uint32_t>& elements) {
  // Pinned memory of the moment, from torch's caching host allocator: the copies are waited for below.
  at::Tensor host = at::empty({int64_t(count + 2 * listed.nslices)}, at::TensorOptions().dtype(at::kInt).pinned_memory(true));
  auto* list = reinterpret_cast<uint32_t*>(host.data_ptr<int32_t>());
  uint32_t* runs = list + count;
  C10_CUDA_CHECK(cudaMemcpyAsync(list, listed.device, count * 4, cudaMemcpyDeviceToHost, stream));
  C10_CUDA_CHECK(cudaMemcpyAsync(runs, listed.runs_device, listed.nslices * 8, cudaMemcpyDeviceToHost, stream));
  C10_CUDA_CHECK(cudaStreamSynchronize(stream));
  elements.clear();
  elements.reserve(count);
  for (size_t s = 0; s < listed.nslices; ++s) {
    const size_t first = runs[2 * s], n = runs[2 * s + 1];
    if (first + n > count) return false;
    elements.insert(elements.end(), list + first, list + first + n);
  }
  return elements.size() == count && std::is_sorted(elements.begin(), elements.end());
}

// One bucket's vote, on the worker: the agreement, then the exchange and count of its planes by the
// transport and data path that apply (device_vote.h), the result planes left on the device.
void vote_on_bucket(Communicator& comm, BucketPlan& b, const StepPlan& step, uint64_t* votes, uint64_t* planes,
                    uint64_t* votes_host, uint64_t* planes_host, const TensorSlice* lion_table, cudaEvent_t packed,
                    cudaEvent_t voted, const AbstentionList& listed) {
  const cudaStream_t stream = step.vote_stream.stream();
  const bool packed_ternary = step.votes != LionVotes::kBinary;
  if (step.votes == LionVotes::kExact) {
    // The count was found and copied to pinned memory before `packed` (pack_vote_apply): one wait for
    // the packing serves both, rather than a second wait on this stream for a kernel of its own. The
    // votes are then written, so the vote stream needs no wait on `packed`: with nothing queued on it,
    // the exchange's first synchronisation (binary votes need no staging copy) returns at once instead
    // of waiting for a time slice on a GPU that processes share.
    C10_CUDA_CHECK(cudaEventSynchronize(packed));
    const size_t count = *listed.count_host;
    std::vector<uint32_t> elements;
    // The list itself only when there is one to read: one more wait, for a copy alone, on steps that
    // have abstentions.
    bool complete = count <= b.list_capacity;
    if (count > 0 && complete) complete = abstaining_in_order(listed, count, step.copy_stream.stream(), elements);
    if (!complete) elements.clear();
    describe_abstentions(elements, complete, abstention_list_limit(b.size, step.nranks, b.remembered != nullptr),
                         max_revote_list(b.size, step.nranks), b.remembered, b.input);
  } else {
    C10_CUDA_CHECK(cudaStreamWaitEvent(stream, packed, 0));  // the vote stream's work follows the packing
  }
  if (step.votes == LionVotes::kTernary) b.input.wants_ternary = true;
  SignOptions options = step.options;
  // One segment per bucket only where every rank is on one host and on the device-memory path: each
  // rank proposes its own path's size in its digest, and the agreement tells which size all use.
  auto segment_bytes = [&comm](bool device_memory) {
    return comm.num_nodes() == 1 && device_memory ? kOneHostSegmentBytes : size_t{0};
  };
  if (step.nccl == nullptr) {  // the vote kind is agreed below: claim device memory only if both kinds go there
    b.input.device_memory = true;
    for (VoteKind kind : {VoteKind::kBinary, VoteKind::kTernary}) {
      SignOptions probe = options;
      probe.votes = kind;
      b.input.device_memory = b.input.device_memory && ucx_data_path(comm, b.size, probe) == DataPath::kDeviceMemory;
    }
  }
  options.segment_bytes = segment_bytes(b.input.device_memory);
  // The call's fingerprint rides on the agreement, as on the CPU path (distributed_lion.cc): when every
  // rank sent the same, the exchange skips its own check, one round trip less per bucket. Ranks that
  // differ in a setting (PRIDE_ALGO, the data path, ...) go through that check, which names any
  // difference left. The NCCL transport keeps its own check either way.
  b.input.call_digest = sign_call_digest(comm, b.size, options, kSignInputOptimizerBucket);
  b.agreed = agree_on_bucket(comm, b.input, b.remembered);
  if (!b.agreed.layouts_agree) return;
  options.votes = b.agreed.votes;
  options.segment_bytes = segment_bytes(b.agreed.all_device_memory);
  options.call_agreed = b.agreed.calls_agree;
  if (options.votes == VoteKind::kTernary && !packed_ternary) {
    check_launch(bits::cuda::binary_as_ternary_slices(lion_table + b.first_lion, b.nlion, votes, votes + b.nwords,
                                                      stream),
                 step.site, "binary_as_ternary");
  }
  const DeviceVote where{step.device, stream, votes, planes, votes_host, planes_host, voted};
  if (!b.agreed.revote.empty() || !b.agreed.abstain_everywhere.empty()) {
    // binary votes, the few abstentions re-voted (or known to be everyone's)
    b.plan = revote_on_device(comm, step.nccl, b.size, options, kSignInputOptimizerBucket, where,
                              step.copy_stream.stream(), b.agreed.revote, b.agreed.abstain_everywhere);
  } else {
    b.plan = vote_on_device(comm, step.nccl, b.size, options, kSignInputOptimizerBucket, where);
  }
}

// The bucket's apply slices of the tensors that some rank has a gradient for, on the device (only
// built when some tensor has none anywhere: it takes no step, not even weight decay).
at::Tensor apply_slices_with_grad(const BucketPlan& b, const std::vector<TensorSlice>& apply_slices,
                                  const c10::Device device, size_t* count) {
  std::vector<TensorSlice> kept;
  for (size_t k = 0; k < b.napply; ++k) {
    if (b.agreed.any_grad[b.apply_owner[k]]) kept.push_back(apply_slices[b.first_apply + k]);
  }
  *count = kept.size();
  const int64_t words = int64_t(round_up(std::max<size_t>(kept.size(), 1) * sizeof(TensorSlice), 8) / 8);
  at::Tensor host = empty_words(size_t(words), word_options(at::kCPU, /*pinned=*/true));
  std::copy(kept.begin(), kept.end(), reinterpret_cast<TensorSlice*>(host.data_ptr<int64_t>()));
  // Pinned → device on the current stream; torch keeps `host` alive until the copy is done, and the
  // device copy is freed in stream order after the launch that reads it.
  return host.to(device, /*non_blocking=*/true);
}

bool pack_vote_apply(PrideBackend* backend, CudaLionWorkspace::Buffers& ws, const StepPlan& step,
                     std::vector<BucketPlan>& buckets, const std::vector<TensorSlice>& apply_slices,
                     const TensorSlice* lion_table, const TensorSlice* apply_table) {
  const cudaStream_t stream = step.stream;
  const bool pack_ternary = step.votes != LionVotes::kBinary;
  // Set by the first bucket that finds the layouts differ; later buckets then send nothing.
  auto layouts_differ = std::make_shared<std::atomic<bool>>(false);
  // 1 and 2: pack each bucket on the GPU; with a group, hand it to the worker, which starts once it is packed.
  for (size_t k = 0; k < buckets.size(); ++k) {
    BucketPlan& b = buckets[k];
    uint64_t* votes = words_of(ws.votes) + b.vote_offset;
    // Words of a tensor without a gradient here are written by no slice: they must read as abstentions.
    if (b.lacks_grad) C10_CUDA_CHECK(cudaMemsetAsync(votes, 0, 2 * b.nwords * 8, stream));
    check_launch(bits::cuda::lion_vote_slices(lion_table + b.first_lion, b.nlion, step.dtype, step.hyper.beta1,
                                              step.hyper.beta2, votes, pack_ternary ? votes + b.nwords : nullptr,
                                              stream),
                 step.site, "lion_vote");
    uint64_t* planes = words_of(ws.planes) + b.plane_offset;
    uint64_t* votes_host = words_of(ws.votes_host) + b.vote_offset;
    uint64_t* planes_host = words_of(ws.planes_host) + b.plane_offset;
    AbstentionList listed;
    if (step.votes == LionVotes::kExact) {  // the elements that must abstain, counted with the votes
      uint32_t* count = reinterpret_cast<uint32_t*>(ws.abstaining_counts.data_ptr()) + k;
      uint32_t* count_host = reinterpret_cast<uint32_t*>(ws.abstaining_counts_host.data_ptr()) + k;
      uint32_t* list = reinterpret_cast<uint32_t*>(ws.abstaining.data_ptr()) + b.list_offset;
      uint32_t* runs = reinterpret_cast<uint32_t*>(ws.abstaining_runs.data_ptr()) + 2 * b.first_lion;
      listed = {count_host, list, runs, b.nlion};
      C10_CUDA_CHECK(cudaMemsetAsync(count, 0, sizeof(uint32_t), stream));
      check_launch(bits::cuda::list_abstentions_slices(lion_table + b.first_lion, b.nlion, votes, votes + b.nwords,
                                                       list, uint32_t(b.list_capacity), count, runs, stream),
                   step.site, "list_abstentions");
      C10_CUDA_CHECK(cudaMemcpyAsync(count_host, count, sizeof(uint32_t), cudaMemcpyDeviceToHost, stream));
    }
    cudaEvent_t packed = ws.packed[k], voted = ws.voted[k];
    C10_CUDA_CHECK(cudaEventRecord(packed, stream));
    BucketPlan* bucket = &b;  // `buckets` is not resized while tasks run; the step waits for every one
    // The task holds the pinned buffers while it runs; the copies it leaves queued (host staging's copy
    // back to the GPU) end before `ws.last_use`, which the next step and the workspace wait for before
    // they reuse, grow or free them.
    b.work = backend->run_on_worker(
        "pride:distributed_lion", {},
        [packed, voted, votes, planes, votes_host, planes_host, listed, bucket, &step, layouts_differ, lion_table,
         keep = std::make_tuple(ws.votes_host, ws.planes_host, ws.abstaining_counts_host, ws.abstaining,
                                ws.abstaining_runs)](Communicator& comm) {
          (void)keep;
          if (layouts_differ->load()) return;
          c10::cuda::CUDAGuard device_guard(step.device);
          c10::cuda::CUDAStreamGuard stream_guard(step.vote_stream);  // the worker's allocations and copies
          vote_on_bucket(comm, *bucket, step, votes, planes, votes_host, planes_host, lion_table, packed, voted,
                         listed);
          if (!bucket->agreed.layouts_agree) layouts_differ->store(true);
        });
  }

  // 3: apply each bucket's result as it arrives.
  for (size_t k = 0; k < buckets.size(); ++k) {
    BucketPlan& b = buckets[k];
    uint64_t* planes = words_of(ws.planes) + b.plane_offset;
    if (b.work) {
      b.work->wait();  // rethrows the engine's error; b.plan is the kind the ranks agreed on
      if (layouts_differ->load()) {
        for (BucketPlan& rest : buckets) {
          if (rest.work) rest.work->wait();  // they return at once, having sent nothing
        }
        // A bucket that agreed before the one that did not may still write its planes on the vote stream.
        C10_CUDA_CHECK(cudaStreamSynchronize(step.vote_stream.stream()));
        return false;
      }
      // The worker has queued the work that writes the result planes on the vote stream, and `voted`
      // after it, without waiting for the GPU: the apply below waits for it on the device. (A device
      // fault in that last work shows as the error of a later CUDA call on this stream, not the vote's.)
      C10_CUDA_CHECK(cudaStreamWaitEvent(stream, ws.voted[k], 0));
    }
    const TensorSlice* table = apply_table + b.first_apply;
    size_t nslices = b.napply;
    at::Tensor filtered;
    if (std::find(b.agreed.any_grad.begin(), b.agreed.any_grad.end(), 0) != b.agreed.any_grad.end()) {
      filtered = apply_slices_with_grad(b, apply_slices, step.device, &nslices);
      table = reinterpret_cast<const TensorSlice*>(filtered.data_ptr<int64_t>());
    }
    if (nslices == 0) continue;
    const SignPlan& r = b.plan;
    if (r.mode == SignMode::kVote) {
      check_launch(bits::cuda::apply_vote_slices(table, nslices, step.dtype, planes,
                                                 r.has_tie_plane() ? planes + b.nwords : nullptr, step.hyper.lr,
                                                 step.hyper.weight_decay, stream),
                   step.site, "apply_vote");
    } else {
      check_launch(bits::cuda::apply_mean_slices(table, nslices, step.dtype, planes, r.result_planes, b.nwords,
                                                 r.mean_scale, r.mean_offset, r.nranks, step.hyper.lr,
                                                 step.hyper.weight_decay, stream),
                   step.site, "apply_mean");
    }
  }
  return true;
}

}  // namespace

}  // namespace pride::torch_plugin
