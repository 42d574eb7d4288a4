// How the packed bits of a GPU tensor travel between ranks (README, PRIDE_CUDA_PATH):
//   - device memory: the planes stay on the GPU and the transport moves them itself (UCX's cuda_ipc
//     between processes on one node, cuda_copy staging inside UCX otherwise); the owner's count runs on
//     the GPU. Needs a transport that carries CUDA memory, and the direct algorithm (plane_ops.h).
//   - host staging: the planes are copied to pinned host memory and the host engine runs any algorithm
//     on them, with any transport (Debian's UCX has no CUDA support).
// Both send the same messages for the direct algorithm, so the choice is each rank's own.
#pragma once

#include <string>

#include "collectives/engine/sign/sign_types.h"

namespace pride {

enum class DataPath : uint8_t { kDeviceMemory, kHostStaging };

// `setting` is PRIDE_CUDA_PATH: "auto" takes device memory wherever it applies; "host" never does;
// "device" is "auto" that insists the transport carries CUDA memory (InvalidArgument naming the rank
// otherwise), for tests and for users who want to know. Algorithms other than direct stage through
// host memory under every setting.
DataPath choose_data_path(const std::string& setting, bool transport_carries_cuda, SignAlgorithm algorithm, int rank);
const char* name(DataPath path);

// The algorithm a sign-allreduce runs over NCCL (torch_plugin/nccl_sign_allreduce.h): the one asked
// for (`requested`, else PRIDE_ALGO given as `setting`), direct when neither asks. NCCL runs direct and
// allgather; ring, tree and hier are InvalidArgument naming the rank (they exist for UCX's small messages and
// its shared memory).
SignAlgorithm choose_nccl_sign_algorithm(SignAlgorithm requested, const std::string& setting, int rank);

}  // namespace pride
