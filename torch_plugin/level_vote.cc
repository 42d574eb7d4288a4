// pride.level_vote: the sign of the ranks' sum of small int8 levels (collectives/engine/compressed/
// level_vote.h), in place. CUDA tensors are staged through pinned host memory (host_staging.h) and ordered
// after the caller's stream like the standard collectives: the values are one byte per element and the
// vote's arithmetic is a few logic operations per 64 of them, so the copies are the cost either way.
#include <ATen/ATen.h>

#include <cstdint>

#include "collectives/engine/compressed/level_vote.h"
#include "torch_plugin/host_staging.h"
#include "torch_plugin/pride_backend.h"
#include "torch_plugin/tensor_types.h"

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
  std::vector<at::Tensor> outputs{q};
  StagingScope staging(*this, {&outputs[0]}, kName);
  at::Tensor t = outputs[0];
  check_cpu_tensor(t, kName);
  const int level = int(max_level);
  return enqueue(c10d::OpType::ALLREDUCE, "pride:level_vote", outputs, [t, level](Communicator& comm, PrideWork&) {
    at::Tensor buf = t.is_contiguous() ? t : t.contiguous();
    pride::level_vote(comm, buf.data_ptr<int8_t>(), size_t(buf.numel()), level);
    if (!buf.is_same(t)) const_cast<at::Tensor&>(t).copy_(buf);
    return true;
  });
}

}  // namespace pride::torch_plugin
