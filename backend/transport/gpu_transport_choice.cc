#include "backend/transport/gpu_transport_choice.h"

#include <set>

#include "backend/common/error.h"

namespace pride {

GpuTransport choose_gpu_transport(const std::string& setting, bool built_with_nccl, bool one_gpu_per_rank, int rank) {
  PRIDE_CHECK_ARG(setting == "auto" || setting == "nccl" || setting == "ucx",
                  "rank {}: PRIDE_CUDA_TRANSPORT='{}' is not one of auto, nccl, ucx", rank, setting);
  if (setting == "ucx") return GpuTransport::kUcx;
  PRIDE_CHECK_ARG(setting != "nccl" || built_with_nccl,
                  "rank {}: PRIDE_CUDA_TRANSPORT=nccl, but this build of pride has no NCCL transport (build it where "
                  "NCCL's header and library are, e.g. the nvidia-nccl wheel next to torch; see PRIDE_NCCL)",
                  rank);
  if (setting == "nccl") return GpuTransport::kNccl;
  return built_with_nccl && one_gpu_per_rank ? GpuTransport::kNccl : GpuTransport::kUcx;
}

const char* name(GpuTransport transport) { return transport == GpuTransport::kNccl ? "nccl" : "ucx"; }

bool one_gpu_per_rank(const std::vector<std::pair<std::string, std::string>>& gpus) {
  std::set<std::pair<std::string, std::string>> seen(gpus.begin(), gpus.end());
  return seen.size() == gpus.size();
}

}  // namespace pride
