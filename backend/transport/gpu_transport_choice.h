// Which transport carries the CUDA tensors of a group (README, PRIDE_CUDA_TRANSPORT):
//   - NCCL (backend/transport/nccl): GPU to GPU over NVLink, InfiniBand/RoCE or sockets, kernels on the
//     device; the transport GPU clusters use. NCCL refuses two ranks of one communicator on one GPU,
//     so "auto" takes it only when every rank has a GPU of its own;
//   - UCX: the packed bits (and the staged standard collectives) through UCX, from device memory where
//     UCX carries it (cuda_ipc / cuda_copy) or through pinned host memory (PRIDE_CUDA_PATH).
// Every rank must choose the same: the inputs below are the same on every rank of a group.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace pride {

enum class GpuTransport : uint8_t { kUcx, kNccl };

// `setting` is PRIDE_CUDA_TRANSPORT (auto|nccl|ucx); "nccl" in a build without NCCL is an
// InvalidArgument naming the rank.
GpuTransport choose_gpu_transport(const std::string& setting, bool built_with_nccl, bool one_gpu_per_rank, int rank);
const char* name(GpuTransport transport);

// Whether no two ranks share a GPU: `gpus[r]` is rank r's (machine, GPU UUID).
bool one_gpu_per_rank(const std::vector<std::pair<std::string, std::string>>& gpus);

}  // namespace pride
