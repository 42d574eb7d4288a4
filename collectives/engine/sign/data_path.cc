#include "collectives/engine/sign/data_path.h"

#include "backend/common/error.h"

namespace pride {

DataPath choose_data_path(const std::string& setting, bool transport_carries_cuda, SignAlgorithm algorithm,
                          int rank) {
  PRIDE_CHECK_ARG(setting == "auto" || setting == "device" || setting == "host",
                  "rank {}: PRIDE_CUDA_PATH='{}' is not one of auto, device, host", rank, setting);
  if (setting == "host") return DataPath::kHostStaging;
  PRIDE_CHECK_ARG(setting != "device" || transport_carries_cuda,
                  "rank {}: PRIDE_CUDA_PATH=device, but this UCX cannot move CUDA memory (it lacks cuda_copy and "
                  "cuda_ipc, as Debian's does; build with -DPRIDE_UCX=wheel (the libucx-cu13 wheel), or set PRIDE_CUDA_PATH=auto)",
                  rank);
  if (!transport_carries_cuda || algorithm != SignAlgorithm::kDirect) return DataPath::kHostStaging;
  return DataPath::kDeviceMemory;
}

SignAlgorithm choose_nccl_sign_algorithm(SignAlgorithm requested, const std::string& setting, int rank) {
  const SignAlgorithm asked = requested != SignAlgorithm::kAuto ? requested : parse_sign_algorithm(setting);
  PRIDE_CHECK_ARG(asked != SignAlgorithm::kRing && asked != SignAlgorithm::kTree && asked != SignAlgorithm::kHier,
                  "rank {}: sign_allreduce over NCCL runs the direct or allgather algorithm, not {} (set "
                  "PRIDE_CUDA_TRANSPORT=ucx for it)", rank, name(asked));
  return asked == SignAlgorithm::kAuto ? SignAlgorithm::kDirect : asked;
}

const char* name(DataPath path) { return path == DataPath::kDeviceMemory ? "device memory" : "host staging"; }

}  // namespace pride
