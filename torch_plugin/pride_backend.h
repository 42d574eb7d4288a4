// pride as a c10d::Backend: what torch.distributed calls for a group whose backend is "pride", for
// CPU and (built with CUDA) CUDA tensors.
//
// Threading (as ProcessGroupGloo): calls validate their arguments on the caller's thread, then queue
// the operation for the backend's one worker thread, which runs them in issue order on the engine's
// Communicator and completes their Work. Every rank issues collectives in the same order, so the
// queues line up. Point-to-point operations are posted by the worker and then left in flight (an
// irecv must not block an isend queued behind it); the worker completes them as they finish.
//
// CUDA tensors: every operation is ordered after the caller's current stream and does its device work
// on one pride stream per device (cuda_ordering.h); sign-allreduce packs and unpacks on the GPU so
// that only the bits leave it (cuda_sign_allreduce.cc), the standard collectives are staged through
// host memory (host_staging.h).
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "backend/communicator.h"
#include "backend/transport/gpu_transport_choice.h"
#include "collectives/engine/sign/sign_allreduce.h"
#include "torch_plugin/host_staging.h"
#include "torch_plugin/pride_work.h"

namespace pride::torch_plugin {

class CudaOrdering;
class NcclCall;
class NcclGroup;

class PrideBackend : public c10d::Backend {
 public:
  PrideBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout);
  ~PrideBackend() override;

  const std::string getBackendName() const override { return "pride"; }
  c10::intrusive_ptr<Options> getBackendOptions() override;
  // dist.set_timeout / _set_pg_timeout: operations this rank starts from now on (queued ones included)
  // give up after `timeout`; p2p already posted keeps its deadline. Gloo's contexts take it at once too.
  void setTimeout(std::chrono::milliseconds timeout) override;
  // destroy_process_group(): queued work finishes, the ranks say goodbye, connections close quietly.
  void shutdown() override;
  // torch's abort path: the collective in progress and everything queued fail now, the peers are told,
  // every connection closes. Callable from any thread, even while a collective hangs.
  void abort() override;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits, std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  // torch.distributed.monitored_barrier (monitored_barrier.cc): blocks; names the ranks that did not come.
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks = false) override;
  // allreduce of a sparse COO tensor (sparse_allreduce.cc); allreduce() sends sparse tensors here.
  c10::intrusive_ptr<c10d::Work> allreduce_sparse(at::Tensor t, const c10d::AllreduceOptions& opts);
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;

  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return issued_.load(); }

  // pride's own collectives (SPEC §3), reached from Python through the group's backend object.
  c10::intrusive_ptr<c10d::Work> sign_allreduce(at::Tensor& tensor, SignOptions options);
  // Result tensor (int8 votes or float32 means) is the Work's result()[0].
  c10::intrusive_ptr<c10d::Work> sign_allreduce_packed(const at::Tensor& packed, int64_t numel, SignOptions options);
  // The 1-bit error-feedback allreduce (compressed/onebit_allreduce.h), in place on float32 `tensor`;
  // both errors are updated in place (compressed_allreduce.cc).
  c10::intrusive_ptr<c10d::Work> compressed_allreduce(at::Tensor& tensor, at::Tensor& worker_error,
                                                      at::Tensor& server_error);
  // sign(Σ_ranks q) in place on int8 `q` whose values lie in [−max_level, max_level] (Lion Cub's quantized
  // sum, compressed/level_vote.h; level_vote.cc).
  c10::intrusive_ptr<c10d::Work> level_vote(at::Tensor& q, int64_t max_level);
  // Runs `fn` on the worker thread in issue order (the optimizer's fused step uses it).
  c10::intrusive_ptr<c10d::Work> run_on_worker(const char* name, std::vector<at::Tensor> outputs,
                                               std::function<void(Communicator&)> fn);

#ifdef PRIDE_WITH_CUDA_TENSORS
  // Caller's thread: the ordering of a new operation on `device` against the caller's current stream,
  // on pride's stream for that device (created on first use).
  std::shared_ptr<CudaOrdering> cuda_ordering(c10::Device device);
#endif
  // Whether this build handles CUDA tensors.
  static bool cuda_supported();
  // Whether this build has the NCCL transport (nccl_group.h).
  static bool nccl_supported();
  // Caller's thread: the transport of this group's CUDA tensors (gpu_transport_choice.h), decided at the
  // first call from every rank's GPU, the same on every rank. UCX in a build without NCCL.
  GpuTransport gpu_transport(c10::Device device);
  // The group's NCCL side once gpu_transport() chose NCCL, else null (and always in builds without it).
  NcclGroup* nccl();

  // Immutable after construction (rank, size, host layout): safe to read from any thread.
  const Communicator& communicator() const { return *comm_; }

  // Traffic per algorithm, as of the last completed operation, less what had completed at the last
  // reset_traffic(). An operation in flight at the reset counts in full after it.
  std::map<std::string, TrafficCounters> traffic() const;
  void reset_traffic();

 private:
  // Runs on the worker; returns false when it left the Work to complete later (p2p in flight).
  using Task = BackendTask;
  // `device`: the operation's CUDA side, when it has one that no StagingScope describes.
  c10::intrusive_ptr<PrideWork> enqueue(c10d::OpType type, const char* name, std::vector<at::Tensor> outputs,
                                        Task task, std::shared_ptr<DeviceCompletion> device = nullptr);
  void worker_loop();
  void poll_in_flight();
  void fail_in_flight(const std::string& reason);
  std::exception_ptr local_failure(PrideWork& work, std::exception_ptr thrown, bool begun);
  struct InFlight;
  c10::intrusive_ptr<c10d::Work> post_p2p(c10d::OpType type, const char* name, at::Tensor tensor, int peer, int tag);
  c10::intrusive_ptr<c10d::Work> sign_allreduce_cuda(at::Tensor& tensor, SignOptions options);
  c10::intrusive_ptr<c10d::Work> compressed_allreduce_cuda(at::Tensor& tensor, at::Tensor& worker_error,
                                                           at::Tensor& server_error);
  c10::intrusive_ptr<c10d::Work> level_vote_cuda(at::Tensor& q, int max_level);

  // The standard collectives over NCCL (nccl_collectives.cc): null for a call NCCL does not take as is
  // (CPU tensors, a group on UCX, a build without NCCL, non-contiguous tensors, a dtype or reduce op
  // NCCL lacks, arguments that do not fit); the staged path then takes it and raises its errors.
  c10::intrusive_ptr<c10d::Work> nccl_allreduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOp& op,
                                                c10d::OpType type, const char* name);
  c10::intrusive_ptr<c10d::Work> nccl_broadcast(at::Tensor& tensor, int root);
  c10::intrusive_ptr<c10d::Work> nccl_reduce(at::Tensor& tensor, const c10d::ReduceOp& op, int root);
  c10::intrusive_ptr<c10d::Work> nccl_allgather(std::vector<at::Tensor>& outputs, at::Tensor& input);
  c10::intrusive_ptr<c10d::Work> nccl_allgather_base(at::Tensor& output, at::Tensor& input);
  c10::intrusive_ptr<c10d::Work> nccl_reduce_scatter(at::Tensor& output, std::vector<at::Tensor>& inputs,
                                                     const c10d::ReduceOp& op);
  c10::intrusive_ptr<c10d::Work> nccl_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                          const c10d::ReduceOp& op);
  c10::intrusive_ptr<c10d::Work> nccl_alltoall_base(at::Tensor& output, at::Tensor& input,
                                                    const std::vector<int64_t>& output_splits,
                                                    const std::vector<int64_t>& input_splits);
  c10::intrusive_ptr<c10d::Work> nccl_alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs);
  c10::intrusive_ptr<c10d::Work> nccl_gather(std::vector<std::vector<at::Tensor>>& outputs,
                                             std::vector<at::Tensor>& inputs, int root);
  c10::intrusive_ptr<c10d::Work> nccl_scatter(std::vector<at::Tensor>& outputs,
                                              std::vector<std::vector<at::Tensor>>& inputs, int root);
#ifdef PRIDE_WITH_NCCL_TRANSPORT
  // Whether `tensors` (dense, contiguous, one CUDA device and dtype) go through NCCL in this group.
  bool nccl_takes(const std::vector<at::Tensor>& tensors);
  // Queues `body` as the pride collective `collective` over NCCL, ordered like every CUDA operation.
  c10::intrusive_ptr<c10d::Work> enqueue_nccl(c10d::OpType type, const char* name, const char* collective,
                                              Fingerprint fp, std::vector<at::Tensor> outputs,
                                              const std::vector<at::Tensor>& inputs,
                                              std::function<void(NcclCall&)> body);
  c10::intrusive_ptr<c10d::Work> nccl_exchange(c10d::OpType type, const char* name, const char* collective,
                                               Fingerprint fp, std::vector<at::Tensor> outputs,
                                               std::vector<at::Tensor> inputs, std::vector<at::Tensor> sends,
                                               std::vector<at::Tensor> recvs, at::Tensor local_in,
                                               at::Tensor local_out);
#endif

  std::unique_ptr<Communicator> comm_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  struct Queued {
    c10::intrusive_ptr<PrideWork> work;
    Task task;
  };
  std::deque<Queued> queue_;
  bool stopping_ = false;
  std::optional<std::chrono::milliseconds> timeout_requested_;  // for the worker, before its next task
  std::atomic<uint64_t> issued_{0};
  // The communicator's counters are the worker's: it publishes them here after each operation. The
  // reset only moves the baseline, so no operation's bytes are lost or counted twice across it.
  std::map<std::string, TrafficCounters> traffic_snapshot_;
  std::map<std::string, TrafficCounters> traffic_baseline_;
  std::vector<std::unique_ptr<InFlight>> in_flight_;  // worker thread only
  bool abandon_in_flight_ = false;                     // worker thread only
  Clock::time_point next_liveness_check_{};            // worker thread only
  std::atomic<uint64_t> monitored_barriers_{0};        // tags the messages of each monitoredBarrier call
  std::chrono::milliseconds timeout_;
  bool aborting_ = false;                              // under mutex_: abort() was called
  std::once_flag ended_;                               // shutdown() or abort(), whichever comes first
  void stop_worker();
  std::thread worker_;
  struct CudaStreams;  // pride's stream per device (cuda_ordering.cc's builds only)
  std::unique_ptr<CudaStreams> cuda_streams_;
  std::shared_ptr<Store> store_;  // the group's store, as the engine sees it (the NCCL side bootstraps through it)
  struct Nccl;  // the group's NCCL side (nccl_group.h) in builds with NCCL; empty otherwise
  std::unique_ptr<Nccl> nccl_;
};

// The creator torch.distributed.Backend.register_backend calls (store, rank, size, timeout).
c10::intrusive_ptr<c10d::Backend> create_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                 std::chrono::milliseconds timeout);

}  // namespace pride::torch_plugin
