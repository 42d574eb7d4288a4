// pride.level_vote: the sign of the ranks' sum of small int8 levels (collectives/engine/compressed/
// level_vote.h), in place. CUDA tensors stay on their GPU: the range check, the packing and the
// unpacking run there (cuda_level_ops.h) on pride's stream, ordered after the caller's (cuda_ordering.h),
// and only the bit planes cross to the host messages: level_planes(s) + 2 bits per element over PCIe,
// where staging the int8 values would move 16.
#include <ATen/ATen.h>

#include <cstdint>

#include "collectives/engine/compressed/level_vote.h"
#include "torch_plugin/pride_backend.h"
#include "torch_plugin/tensor_types.h"
#ifdef PRIDE_WITH_CUDA_TENSORS
#include <c10/cuda/CUDAGuard.h>

#include "torch_plugin/cuda_level_ops.h"
#include "torch_plugin/cuda_ordering.h"
#endif

namespace pride::torch_plugin {
namespace {
constexpr const char* kName = "level_vote";
}  // namespace

c10::intrusive_ptr<c10d::Work> PrideBackend::level_vote(at::Tensor& q, int64_t max_level) {
  const int rank = getRank();
  TORCH_CHECK_VALUE(q.defined(), "pride ", kName, " (rank ", rank, "): undefined tensor");
  TORCH_CHECK_TYPE(q.scalar_type() == at::kChar, "pride ", kName, " (rank ", rank,
                   "): the levels must be an int8 tensor, got ", q.scalar_type());
  // The range [1, 127] is checked by the collective, after the ranks compare their calls (level_vote.h).
  TORCH_CHECK_VALUE(max_level >= INT32_MIN && max_level <= INT32_MAX, "pride ", kName, " (rank ", rank,
                    "): max_level must be in [1, 127], got ", max_level);
  if (q.is_cuda()) {
    TORCH_CHECK_VALUE(q.layout() == at::kStrided, "pride ", kName, " (rank ", rank,
                      "): expected a dense tensor, got layout ", q.layout());
    return level_vote_cuda(q, int(max_level));
  }
  check_cpu_tensor(q, {kName, rank});
  const int level = int(max_level);
  return enqueue(c10d::OpType::ALLREDUCE, "pride:level_vote", {q}, [t = q, level](Communicator& comm, PrideWork&) {
    at::Tensor buf = t.is_contiguous() ? t : t.contiguous();
    pride::level_vote(comm, buf.data_ptr<int8_t>(), size_t(buf.numel()), level);
    if (!buf.is_same(t)) const_cast<at::Tensor&>(t).copy_(buf);
    return true;
  });
}

#ifdef PRIDE_WITH_CUDA_TENSORS
c10::intrusive_ptr<c10d::Work> PrideBackend::level_vote_cuda(at::Tensor& q, int max_level) {
  std::shared_ptr<CudaOrdering> ordering = cuda_ordering(q.device());
  ordering->use_on_internal_stream(q);
  Task task = [q, max_level, ordering](Communicator& comm, PrideWork&) {
    ordering->enter();
    c10::cuda::CUDAGuard device_guard(q.device());
    c10::cuda::CUDAStreamGuard stream_guard(ordering->internal());  // allocations and copies on pride's stream
    at::Tensor buf = q.is_contiguous() ? q : q.contiguous();
    const size_t numel = size_t(buf.numel());
    CudaLevelOps ops(q.device(), ordering->stream(), comm.rank(), buf.data_ptr<int8_t>(), numel);
    pride::level_vote(comm, ops, numel, max_level);
    ops.release_host_memory();
    if (!buf.is_same(q)) const_cast<at::Tensor&>(q).copy_(buf, /*non_blocking=*/true);
    ordering->finish();
    return true;
  };
  return enqueue(c10d::OpType::ALLREDUCE, "pride:level_vote", {q}, std::move(task), ordering);
}
#else
c10::intrusive_ptr<c10d::Work> PrideBackend::level_vote_cuda(at::Tensor& q, int) {
  TORCH_CHECK_VALUE(false, "pride ", kName, " (rank ", getRank(), "): got a tensor on ", q.device(),
                    ", but this build of pride has no CUDA support");
}
#endif

}  // namespace pride::torch_plugin
