#include "torch_plugin/pride_backend.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <c10/util/Exception.h>

#include <sched.h>

#include <algorithm>
#include <cstring>

#ifdef PRIDE_WITH_CUDA_TENSORS
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "torch_plugin/cuda_ordering.h"
#include "torch_plugin/private_cuda_stream.h"
#endif
#ifdef PRIDE_WITH_NCCL_TRANSPORT
#include "torch_plugin/nccl_group.h"
#endif

#include "backend/common/error.h"
#include "backend/common/settings.h"
#include "backend/store/c10d_store.h"
#include "torch_plugin/tensor_types.h"

namespace pride::torch_plugin {
namespace {

// Engine errors become the c10 errors torch maps to Python: bad input → ValueError, everything that
// involves peers (failure, timeout, mismatch) → torch.distributed.DistBackendError.
std::exception_ptr to_torch_error(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const c10::Error&) {
    return std::current_exception();
  } catch (const InvalidArgument& e) {
    try {
      C10_THROW_ERROR(ValueError, e.what());
    } catch (...) {
      return std::current_exception();
    }
  } catch (const std::exception& e) {
    try {
      C10_THROW_ERROR(DistBackendError, e.what());
    } catch (...) {
      return std::current_exception();
    }
  }
  return error;
}

}  // namespace

// A point-to-point operation the worker posted and now watches.
struct PrideBackend::InFlight {
  c10::intrusive_ptr<PrideWork> work;
  at::Tensor staging;  // contiguous host buffer the transport reads or writes
  at::Tensor target;   // the caller's tensor, when staging is a copy of it (recv copies back)
  std::function<void()> deliver;  // recv into a CUDA tensor: the copy back on pride's stream
  RequestPtr request;
  Clock::time_point posted, deadline;
  std::string what;
};

#ifdef PRIDE_WITH_CUDA_TENSORS
// The group's two streams on a device (cuda_ordering.h): its operations', and the one its Futures'
// events wait on. Its own, not from torch's pool (private_cuda_stream.h); each Work's ordering holds
// them too, so a Work that outlives the group still has them.
struct PrideBackend::CudaStreams {
  struct OfDevice {
    std::shared_ptr<const PrivateCudaStream> operations, after_end;
  };
  std::mutex mutex;
  std::map<c10::DeviceIndex, OfDevice> by_device;
};

std::shared_ptr<CudaOrdering> PrideBackend::cuda_ordering(c10::Device device) {
  std::lock_guard<std::mutex> lock(cuda_streams_->mutex);
  auto it = cuda_streams_->by_device.find(device.index());
  if (it == cuda_streams_->by_device.end()) {
    CudaStreams::OfDevice streams{std::make_shared<const PrivateCudaStream>(device.index()),
                                  std::make_shared<const PrivateCudaStream>(device.index())};
    it = cuda_streams_->by_device.emplace(device.index(), std::move(streams)).first;
  }
  return std::make_shared<CudaOrdering>(device, it->second.operations, it->second.after_end);
}

bool PrideBackend::cuda_supported() { return true; }
#else
struct PrideBackend::CudaStreams {};
bool PrideBackend::cuda_supported() { return false; }

c10::intrusive_ptr<c10d::Work> PrideBackend::sign_allreduce_cuda(at::Tensor& tensor, SignOptions) {
  TORCH_CHECK_VALUE(false, "pride sign_allreduce (rank ", getRank(), "): got a tensor on ", tensor.device(),
                    ", but this build of pride has no CUDA support");
}
#endif

#ifdef PRIDE_WITH_NCCL_TRANSPORT
struct PrideBackend::Nccl {
  Nccl(std::shared_ptr<Store> store, int rank, int size) : group(std::move(store), rank, size) {}
  NcclGroup group;
};

GpuTransport PrideBackend::gpu_transport(c10::Device device) { return nccl_->group.transport(device, *comm_); }

NcclGroup* PrideBackend::nccl() { return nccl_->group.chosen() ? &nccl_->group : nullptr; }

bool PrideBackend::nccl_supported() { return true; }
#else
bool PrideBackend::nccl_supported() { return false; }

struct PrideBackend::Nccl {};

GpuTransport PrideBackend::gpu_transport(c10::Device) {
  try {  // a forced PRIDE_CUDA_TRANSPORT=nccl is an error here, not a silent UCX
    return choose_gpu_transport(Settings::get().cuda_transport, /*built_with_nccl=*/false, false, getRank());
  } catch (const std::exception& e) {
    TORCH_CHECK_VALUE(false, e.what());
  }
}

NcclGroup* PrideBackend::nccl() { return nullptr; }

using Work = c10d::Work;
c10::intrusive_ptr<Work> PrideBackend::nccl_allreduce(std::vector<at::Tensor>&, const c10d::ReduceOp&, c10d::OpType,
                                                      const char*) {
  return {};
}
c10::intrusive_ptr<Work> PrideBackend::nccl_broadcast(at::Tensor&, int) { return {}; }
c10::intrusive_ptr<Work> PrideBackend::nccl_reduce(at::Tensor&, const c10d::ReduceOp&, int) { return {}; }
c10::intrusive_ptr<Work> PrideBackend::nccl_allgather(std::vector<at::Tensor>&, at::Tensor&) { return {}; }
c10::intrusive_ptr<Work> PrideBackend::nccl_allgather_base(at::Tensor&, at::Tensor&) { return {}; }
c10::intrusive_ptr<Work> PrideBackend::nccl_reduce_scatter(at::Tensor&, std::vector<at::Tensor>&,
                                                           const c10d::ReduceOp&) {
  return {};
}
c10::intrusive_ptr<Work> PrideBackend::nccl_reduce_scatter_base(at::Tensor&, at::Tensor&, const c10d::ReduceOp&) {
  return {};
}
c10::intrusive_ptr<Work> PrideBackend::nccl_alltoall_base(at::Tensor&, at::Tensor&, const std::vector<int64_t>&,
                                                          const std::vector<int64_t>&) {
  return {};
}
c10::intrusive_ptr<Work> PrideBackend::nccl_alltoall(std::vector<at::Tensor>&, std::vector<at::Tensor>&) { return {}; }
c10::intrusive_ptr<Work> PrideBackend::nccl_gather(std::vector<std::vector<at::Tensor>>&, std::vector<at::Tensor>&,
                                                   int) {
  return {};
}
c10::intrusive_ptr<Work> PrideBackend::nccl_scatter(std::vector<at::Tensor>&, std::vector<std::vector<at::Tensor>>&,
                                                    int) {
  return {};
}
#endif

PrideBackend::PrideBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                           std::chrono::milliseconds timeout)
    : c10d::Backend(rank, size), timeout_(timeout) {
  Communicator::Options options;
  options.timeout = timeout;
  // Each incarnation of a group gets keys of its own. c10d hands a group that is destroyed and made again
  // on the same user store (init, destroy, init) the same key prefix, where the last incarnation's
  // addresses still stand: a rank that read a dead worker's address failed to connect. The ranks of one
  // incarnation all add before any rank can make the next (its rendezvous waits for every rank), so
  // they share the count.
  // Counted, and keyed, per group size: c10d names groups by a count that destroy_process_group resets,
  // so one name can come back with another size.
  const int64_t joined = store->add(fmt::format("pride/incarnations/{}", size), 1);
  store_ = wrap_c10d_store(
      c10::make_intrusive<c10d::PrefixStore>(fmt::format("pride/{}/{}", size, (joined - 1) / size), store));
  comm_ = std::make_unique<Communicator>(store_, rank, size, options);
  cuda_streams_ = std::make_unique<CudaStreams>();
#ifdef PRIDE_WITH_NCCL_TRANSPORT
  nccl_ = std::make_unique<Nccl>(store_, rank, size);
#else
  nccl_ = std::make_unique<Nccl>();
#endif
  worker_ = std::thread([this] { worker_loop(); });
}

PrideBackend::~PrideBackend() { stop_worker(); }

void PrideBackend::stop_worker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  comm_->transport().wake();
  if (worker_.joinable() && worker_.get_id() != std::this_thread::get_id()) worker_.join();
}

c10::intrusive_ptr<c10d::Backend::Options> PrideBackend::getBackendOptions() {
  std::lock_guard<std::mutex> lock(mutex_);
  return c10::make_intrusive<Options>("pride", timeout_);
}

void PrideBackend::setTimeout(std::chrono::milliseconds timeout) {
  TORCH_CHECK_VALUE(timeout.count() > 0, "pride set_timeout (rank ", getRank(), "): the timeout must be positive, got ",
                    timeout.count(), " ms");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    timeout_ = timeout;
    timeout_requested_ = timeout;
  }
}

void PrideBackend::shutdown() {
  std::call_once(ended_, [this] {
    // Up to the group's timeout for the peers' goodbyes, and never more than 30 s: a rank that does not
    // end the group (it crashed, or still works) only delays this one.
    std::chrono::milliseconds timeout;
    {
      std::lock_guard<std::mutex> lock(mutex_);  // setTimeout writes it from the caller's side
      timeout = timeout_;
    }
    const auto patience = std::min(timeout, std::chrono::milliseconds(30000));
    c10::intrusive_ptr<c10d::Work> goodbye;
    try {
      goodbye = run_on_worker("pride:shutdown", {}, [this, patience](Communicator& comm) {
        comm.close(patience);
#ifdef PRIDE_WITH_NCCL_TRANSPORT
        if (comm.abort_requested()) {
          nccl_->group.abort();  // abort() came during the destroy: no graceful finish to wait for
        } else {
          // After every rank's goodbye: no peer still reads from these communicators.
          nccl_->group.close(patience);
        }
#endif
      });
      goodbye->wait();
    } catch (const std::exception&) {
      // The group had failed: its connections are closed already, and the failure was reported then.
    }
    stop_worker();
  });
}

void PrideBackend::abort() {
  // First, outside the once-flag that a destroy may hold: a destroy waiting for its peers' goodbyes
  // (Communicator::close) or for a queued collective stops at its next poll, tells the peers and
  // closes the connections; this abort then finds the group ended instead of waiting up to the
  // goodbyes' patience (Gloo's abort returns at once).
  comm_->request_abort();
  comm_->transport().wake();
  std::call_once(ended_, [this] {
    std::deque<Queued> dropped;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      aborting_ = true;
      dropped.swap(queue_);
    }
    comm_->request_abort();  // the collective in progress on the worker throws at its next poll
    const std::string message = fmt::format("pride rank {}/{}: the process group was aborted", getRank(), getSize());
    for (Queued& q : dropped) q.work->complete(to_torch_error(std::make_exception_ptr(PeerError(message))));
    stop_worker();  // the worker tells the peers and closes every connection on its way out
  });
}

c10::intrusive_ptr<PrideWork> PrideBackend::enqueue(c10d::OpType type, const char* name,
                                                    std::vector<at::Tensor> outputs, Task task,
                                                    std::shared_ptr<DeviceCompletion> device) {
  if (const StagingScope* staging = StagingScope::active()) {  // CUDA tensors staged through host twins
    task = staging->wrap(std::move(task), outputs);
    outputs = staging->originals(outputs);
    device = staging->completion();
  }
  // An output whose elements share memory (an expand()ed view: stride 0) cannot hold a result, and
  // the copy back from the staging buffer would fail only after the ranks had exchanged their data:
  // refuse it here, before anything is sent, as Gloo refuses every non-contiguous tensor.
  const char* collective = std::strncmp(name, "pride:", 6) == 0 ? name + 6 : name;  // the profiler's title
  for (size_t i = 0; i < outputs.size(); ++i) {
    // Sparse outputs are replaced whole (their layout has no strides to overlap).
    const bool strided = outputs[i].defined() && outputs[i].layout() == at::kStrided;
    TORCH_CHECK_VALUE(!strided || at::has_internal_overlap(outputs[i]) != at::MemOverlap::Yes,
                      "pride ", collective, " (rank ", getRank(), "): output tensor ", i,
                      " of shape ", outputs[i].sizes(), " and strides ", outputs[i].strides(),
                      " has elements that share memory (an expand()ed view), so the result cannot be written "
                      "into it; pass a tensor with memory of its own (e.g. its .clone())");
  }
  auto work = c10::make_intrusive<PrideWork>(getRank(), type, name, std::move(outputs), std::move(device));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    TORCH_CHECK(!stopping_, "pride: the backend is shutting down");
    queue_.push_back({work, std::move(task)});
    ++issued_;
  }
  wake_.notify_one();
  comm_->transport().wake();  // a worker blocked on the transport's event fd (p2p in flight) too
  return work;
}

void PrideBackend::worker_loop() {
  // The tasks write results into the caller's tensors (copies back from staging, flattened or sparse
  // results, received messages): as the collective's own data movement, below autograd and inference
  // mode, as Gloo's raw writes are. A leaf parameter that requires grad (broadcast of a transposed view,
  // a channels_last weight) and an inference tensor (all_gather of a list under torch.inference_mode)
  // otherwise refused the copy after the exchange, and failed the group. Autograd's version counters are
  // the dispatcher's c10d ops' to bump, on the caller's thread.
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  uint64_t idle_rounds = 0;
  for (;;) {
    Queued next;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (queue_.empty() && in_flight_.empty()) wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty() && stopping_) {
        if (aborting_) {
          lock.unlock();
          // Notices out and connections closed first: only then may the in-flight buffers go.
          comm_->abandon(fmt::format("pride rank {}/{}: the process group was aborted", getRank(), getSize()));
#ifdef PRIDE_WITH_NCCL_TRANSPORT
          nccl_->group.abort();  // kernels waiting for a peer end now
#endif
          fail_in_flight("the process group was aborted");
          return;
        }
        if (in_flight_.empty()) return;
        abandon_in_flight_ = true;  // the group is going away: unmatched p2p fails now, not at its deadline
      }
      if (!queue_.empty()) {
        next = std::move(queue_.front());
        queue_.pop_front();
      }
      if (timeout_requested_) {
        comm_->set_timeout(*timeout_requested_);  // the communicator is the worker's: set between tasks
        timeout_requested_.reset();
      }
    }
    if (next.work) {
      idle_rounds = 0;
      std::exception_ptr error;
      bool done = true;
      const uint64_t begun = comm_->collectives_begun();
      try {
        done = next.task(*comm_, *next.work);
      } catch (...) {
        error = local_failure(*next.work, std::current_exception(), comm_->collectives_begun() != begun);
      }
      {
        std::lock_guard<std::mutex> lock(mutex_);
        traffic_snapshot_ = comm_->traffic();
      }
      if (error || done) next.work->complete(error);
    } else if (!in_flight_.empty()) {
      // p2p in flight, nothing queued: progress like a collective's wait (an abort notice fails them),
      // then block on the transport's event fd, which a message or enqueue() ends.
      bool progressed = false;
      try {
        progressed = comm_->progress_p2p();
      } catch (const std::exception& e) {
        fail_in_flight(e.what());
      }
      idle_rounds = progressed ? 0 : idle_rounds + 1;
      if (idle_rounds > 64) comm_->transport().wait_for_activity(std::chrono::milliseconds(1));
    }
    poll_in_flight();
  }
}

// A task that failed: the error its Work gets. pride's errors that involve the peers (PeerError,
// TimeoutError: a dead or silent peer, a deadline, an abort notice) have told them already, and a
// mismatch or a bad argument (MismatchError, InvalidArgument) is found alike by every rank, which leaves
// the group usable: these pass as they are. Any other error is a failure of this rank's own: pride's
// plain Error (a failed UCX call; Collective::fail() has broken the group already), torch's or the
// system's (an allocation that failed, on a full GPU or host; a failed kernel launch). If a collective
// began in this task (`begun`), the peers are in it, or have left it while this rank has not finished
// it (a copy back after the exchange): they would wait for this rank until their deadline, or pair its
// next collective with the wrong one, so they are told now, and the group is broken here as it is
// after a failed exchange. pride's and torch's errors keep their type (torch.OutOfMemoryError, ...);
// others become a DistBackendError that names this rank and the collective.
std::exception_ptr PrideBackend::local_failure(PrideWork& work, std::exception_ptr thrown, bool begun) {
  std::string what = "unknown error";
  bool keep_type = false;
  try {
    std::rethrow_exception(thrown);
  } catch (const PeerError&) {
    return to_torch_error(thrown);
  } catch (const TimeoutError&) {
    return to_torch_error(thrown);
  } catch (const MismatchError&) {
    return to_torch_error(thrown);
  } catch (const InvalidArgument&) {
    return to_torch_error(thrown);
  } catch (const Error& e) {
    what = e.what();
    keep_type = true;
  } catch (const c10::Error& e) {
    what = e.what_without_backtrace();
    keep_type = true;
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
  }
  what = what.substr(0, what.find('\n'));  // the notice has room for a line, not a backtrace
  const std::string message =
      fmt::format("pride rank {}/{}: {}{} failed on this rank: {}", getRank(), getSize(),
                  work.name(),
                  begun ? fmt::format(" #{}", comm_->collectives_begun()) : std::string(), what);
  if (begun && !comm_->broken()) comm_->abandon(message);
  if (keep_type) return to_torch_error(thrown);
  return to_torch_error(std::make_exception_ptr(std::runtime_error(message)));
}

// Every in-flight p2p fails with `reason` (an abort notice arrived: the group is broken).
void PrideBackend::fail_in_flight(const std::string& reason) {
  for (auto& op : in_flight_) {
    op->work->complete(to_torch_error(std::make_exception_ptr(
        PeerError(fmt::format("pride rank {}/{}: {} failed: {}", getRank(), getSize(), op->what, reason)))));
  }
  in_flight_.clear();  // callers closed the transport first: nothing reads these buffers any more
}

void PrideBackend::poll_in_flight() {
  const auto now = Clock::now();
  // Like a collective's wait, a long wait checks its peer every liveness interval: a dead peer is
  // reported within it, not at the deadline.
  const bool check_liveness = now >= next_liveness_check_;
  if (check_liveness) next_liveness_check_ = now + Communicator::kLivenessInterval;
  for (size_t i = 0; i < in_flight_.size();) {
    InFlight& op = *in_flight_[i];
    std::exception_ptr error;
    if (op.request->pending() && abandon_in_flight_) {
      error = to_torch_error(std::make_exception_ptr(PeerError(fmt::format(
          "pride rank {}/{}: {} abandoned: the process group was destroyed first", getRank(), getSize(), op.what))));
    } else if (op.request->pending()) {
      std::string gone = check_liveness && now - op.posted >= Communicator::kLivenessInterval
                             ? comm_->peer_gone(op.request->peer())
                             : std::string();
      if (!gone.empty()) {
        std::string message = fmt::format("pride rank {}/{}: {} failed: peer {} is gone: {}", getRank(), getSize(),
                                          op.what, op.request->peer(), gone);
        comm_->abandon(message);  // closes every connection before this op's buffers are freed below
        error = to_torch_error(std::make_exception_ptr(PeerError(message)));
      } else if (now < op.deadline) {
        ++i;
        continue;
      } else {
        // The timeout it was posted with (set_timeout may have changed the group's since).
        const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(op.deadline - op.posted);
        std::string message =
            fmt::format("pride rank {}/{}: {} timed out after {} ms", getRank(), getSize(), op.what, waited.count());
        comm_->abandon(message);  // the pending request must not read or write the buffer freed below
        error = to_torch_error(std::make_exception_ptr(TimeoutError(message)));
      }
    } else if (op.request->state() == Request::State::kFailed) {
      std::string failure = comm_->transport().peer_failure(op.request->peer());
      error = to_torch_error(std::make_exception_ptr(PeerError(fmt::format(
          "pride rank {}/{}: {} failed: {}", getRank(), getSize(), op.what,
          failure.empty() ? op.request->error() : fmt::format("peer {} failed ({})", op.request->peer(), failure)))));
    } else if (!op.request->is_send()) {
      if (op.request->bytes() != nbytes(op.staging)) {
        error = to_torch_error(std::make_exception_ptr(MismatchError(fmt::format(
            "pride rank {}/{}: {} received {} bytes, expected {}", getRank(), getSize(), op.what,
            op.request->bytes(), nbytes(op.staging)))));
      } else if (op.deliver) {
        try {
          op.deliver();
        } catch (...) {
          error = to_torch_error(std::current_exception());
        }
      } else if (op.target.defined()) {
        op.target.copy_(op.staging);
      }
      if (!error) {
        comm_->count_p2p_received(op.request->bytes());
        std::lock_guard<std::mutex> lock(mutex_);
        traffic_snapshot_ = comm_->traffic();
      }
      op.work->set_source_rank(op.request->peer());
    }
    op.work->complete(error);
    in_flight_.erase(in_flight_.begin() + std::ptrdiff_t(i));
  }
}

c10::intrusive_ptr<c10d::Work> PrideBackend::post_p2p(c10d::OpType type, const char* name, at::Tensor tensor,
                                                      int peer, int tag) {
  TORCH_CHECK_VALUE(tag >= 0, "pride ", name, " (rank ", getRank(), "): tag must be non-negative, got ", tag);
  const bool is_send = type == c10d::OpType::SEND;
  auto op = std::make_shared<InFlight>();
  std::shared_ptr<DeviceCompletion> device;
  std::function<void()> before_post;  // worker, before the transport sees the buffer
  if (tensor.is_cuda()) {
#ifdef PRIDE_WITH_CUDA_TENSORS
    // Staged through a pinned host twin: a send fills it from the device first, a receive copies it
    // back to the device on pride's stream when the message has arrived.
    auto ordering = cuda_ordering(tensor.device());
    ordering->use_on_internal_stream(tensor);
    op->staging = at::empty(tensor.sizes(), tensor.options().device(at::kCPU).pinned_memory(true));
    at::Tensor staging = op->staging;
    before_post = [ordering, staging, tensor, is_send]() mutable {
      ordering->enter();
      if (is_send) {
        c10::cuda::CUDAStreamGuard guard(ordering->internal());
        staging.copy_(tensor, /*non_blocking=*/true);
        C10_CUDA_CHECK(cudaStreamSynchronize(ordering->stream()));
        ordering->finish();
      }
    };
    if (!is_send) {
      op->deliver = [ordering, staging, tensor]() mutable {
        {
          c10::cuda::CUDAStreamGuard guard(ordering->internal());
          tensor.copy_(staging, /*non_blocking=*/true);
        }
        ordering->finish();
        ordering->wait_finished_on_host();  // the host twin goes away with the in-flight record
      };
    }
    device = ordering;
#else
    TORCH_CHECK_VALUE(false, "pride ", name, " (rank ", getRank(), "): got a tensor on ", tensor.device(),
                      ", but this build of pride has no CUDA support");
#endif
  } else {
    op->staging = tensor.is_contiguous() ? tensor : tensor.contiguous();
    if (!is_send && !tensor.is_contiguous()) op->target = tensor;
  }
  op->what = peer == Transport::kAnyPeer ? fmt::format("{} (tag {}) from any rank", name, tag)
                                         : fmt::format("{} (tag {}) {} rank {}", name, tag, is_send ? "to" : "from", peer);
  Task task = [this, op, is_send, peer, tag, before_post](Communicator& comm, PrideWork& w) {
    if (before_post) before_post();
    void* data = op->staging.data_ptr();
    size_t bytes = nbytes(op->staging);
    op->request = is_send ? comm.p2p_send(peer, uint64_t(tag), data, bytes)
                          : comm.p2p_recv(peer, uint64_t(tag), data, bytes);
    op->posted = Clock::now();
    op->deadline = op->posted + comm.timeout();
    op->work = c10::intrusive_ptr<PrideWork>::reclaim_copy(&w);
    in_flight_.push_back(std::make_unique<InFlight>(std::move(*op)));
    return false;
  };
  std::string what = op->what;  // the task moves *op into in_flight_, maybe before enqueue returns
  auto work = enqueue(type, name, {tensor}, std::move(task), std::move(device));
  work->set_description(std::move(what));  // only wait(timeout) reads it, on the caller's side
  return work;
}

// One dense tensor, on the CPU or (built with CUDA) a CUDA device: post_p2p stages CUDA tensors.
void check_p2p_tensor(const std::vector<at::Tensor>& tensors, CallSite site) {
  TORCH_CHECK_VALUE(tensors.size() == 1, "pride ", site, ": expected exactly one tensor, got ", tensors.size());
  const at::Tensor& t = tensors[0];
  if (t.defined() && t.is_cuda()) {
    TORCH_CHECK_VALUE(t.layout() == at::kStrided, "pride ", site, ": expected a dense tensor, got layout ", t.layout());
    return;
  }
  check_cpu_tensor(t, site);
}

c10::intrusive_ptr<c10d::Work> PrideBackend::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  check_p2p_tensor(tensors, {"send", getRank()});
  check_root(dst, getSize(), {"send", getRank()});
  return post_p2p(c10d::OpType::SEND, "send", tensors[0], dst, tag);
}

c10::intrusive_ptr<c10d::Work> PrideBackend::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  check_p2p_tensor(tensors, {"recv", getRank()});
  check_root(src, getSize(), {"recv", getRank()});
  return post_p2p(c10d::OpType::RECV, "recv", tensors[0], src, tag);
}

c10::intrusive_ptr<c10d::Work> PrideBackend::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  check_p2p_tensor(tensors, {"recv", getRank()});
  return post_p2p(c10d::OpType::RECVANYSOURCE, "recv", tensors[0], Transport::kAnyPeer, tag);
}

c10::intrusive_ptr<c10d::Work> PrideBackend::sign_allreduce(at::Tensor& tensor, SignOptions options) {
  if (tensor.defined() && tensor.is_cuda()) return sign_allreduce_cuda(tensor, options);
  check_cpu_tensor(tensor, {"sign_allreduce", getRank()});
  const bits::DType dtype = to_sign_dtype(tensor.scalar_type(), {"sign_allreduce", getRank()});
  return enqueue(c10d::OpType::ALLREDUCE, "pride:sign_allreduce", {tensor},
                 [tensor, dtype, options](Communicator& comm, PrideWork&) {
                   at::Tensor buf = tensor.is_contiguous() ? tensor : tensor.contiguous();
                   pride::sign_allreduce(comm, buf.data_ptr(), dtype, size_t(buf.numel()), options);
                   if (!buf.is_same(tensor)) const_cast<at::Tensor&>(tensor).copy_(buf);
                   return true;
                 });
}

c10::intrusive_ptr<c10d::Work> PrideBackend::sign_allreduce_packed(const at::Tensor& packed, int64_t numel,
                                                                   SignOptions options) {
  // The result is created on the input's device; CUDA buffers are staged through host twins.
  at::Tensor packed_in = packed;
  at::Tensor out = packed.defined() ? at::empty({std::max<int64_t>(numel, 0)},
                                                packed.options().dtype(options.mode == SignMode::kVote ? at::kChar : at::kFloat))
                                    : at::Tensor();
  StagingScope staging(*this, tensor_refs(packed_in, out), "sign_allreduce_packed");
  check_cpu_tensor(packed_in, {"sign_allreduce_packed", getRank()});
  TORCH_CHECK_TYPE(packed_in.scalar_type() == at::kByte,
                   "pride sign_allreduce_packed (rank ", getRank(), "): expected a uint8 tensor, got ",
                   packed_in.scalar_type());
  TORCH_CHECK_VALUE(numel >= 0, "pride sign_allreduce_packed (rank ", getRank(), "): numel must be at least 0, got ",
                    numel);
  TORCH_CHECK_VALUE(packed_in.numel() == int64_t(bits::bytes_for(size_t(numel))),
                    "pride sign_allreduce_packed (rank ", getRank(), "): ", numel, " elements need ",
                    bits::bytes_for(size_t(numel)), " packed bytes, got ", packed_in.numel());
  at::Tensor in = packed_in.contiguous();
  return enqueue(c10d::OpType::ALLREDUCE, "pride:sign_allreduce_packed", {out},
                 [in, out, numel, options](Communicator& comm, PrideWork&) {
                   pride::sign_allreduce_packed(comm, in.data_ptr<uint8_t>(), size_t(numel), options, out.data_ptr());
                   return true;
                 });
}

c10::intrusive_ptr<c10d::Work> PrideBackend::run_on_worker(const char* name, std::vector<at::Tensor> outputs,
                                                           std::function<void(Communicator&)> fn) {
  return enqueue(c10d::OpType::ALLREDUCE, name, std::move(outputs), [fn = std::move(fn)](Communicator& comm, PrideWork&) {
    fn(comm);
    return true;
  });
}

std::map<std::string, TrafficCounters> PrideBackend::traffic() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::map<std::string, TrafficCounters> since_reset;
  for (const auto& [name, now] : traffic_snapshot_) {
    TrafficCounters before;
    if (auto it = traffic_baseline_.find(name); it != traffic_baseline_.end()) before = it->second;
    const TrafficCounters moved{now.calls - before.calls, now.bytes_sent - before.bytes_sent,
                                now.bytes_received - before.bytes_received,
                                now.device_bytes_sent - before.device_bytes_sent};
    if (moved.calls || moved.bytes_sent || moved.bytes_received) since_reset[name] = moved;
  }
  return since_reset;
}

void PrideBackend::reset_traffic() {
  std::lock_guard<std::mutex> lock(mutex_);
  traffic_baseline_ = traffic_snapshot_;  // the worker's counters keep running: an operation in flight counts after
}

c10::intrusive_ptr<c10d::Backend> create_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                 std::chrono::milliseconds timeout) {
  try {
    return c10::make_intrusive<PrideBackend>(store, rank, size, timeout);
  } catch (const c10::Error&) {
    throw;
  } catch (const std::exception& e) {
    C10_THROW_ERROR(DistBackendError, std::string("pride: could not create the backend: ") + e.what());
  }
}

}  // namespace pride::torch_plugin
