// Sign-allreduce of packed planes on a GPU over NCCL (SPEC §4's algorithms, NCCL moving the bits):
//   direct:    the shards of this rank's votes go to their owners in one NCCL group of ncclSend /
//              ncclRecv; each owner counts its chunk on the GPU and decides it (cuda_plane_ops.h's
//              kernels); ncclAllGather returns every owner's result chunk (grouped send/recv when the
//              chunks are not all the same size, so that no padding goes on the wire), as planes or
//              coded (trits, packed counts: SignPlan::result_coding, chosen as over UCX);
//   allgather: ncclAllGather of every rank's votes, then every rank counts the whole tensor.
// Every byte this rank sends and receives is counted in pride.stats() under "nccl_direct" or
// "nccl_allgather", and equals SPEC §4's formula for the algorithm. The same bits as every other path.
// Compiled only where pride is built with NCCL (PRIDE_WITH_NCCL_TRANSPORT).
#pragma once

#include <c10/core/Device.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "collectives/engine/sign/sign_allreduce.h"

namespace pride::torch_plugin {

class NcclGroup;

// `votes`: device memory, plan.counters planes of words_for(numel) words (plane-major); `planes`:
// device memory for plan.result_planes planes of words_for(numel) words, written. `stream` must be
// current (CUDAStreamGuard) and already ordered after the votes were packed. Returns when the bits
// have arrived; the last kernels that write `planes` are queued on `stream`. `dtype_code` only enters
// the fingerprint. Throws on failure, naming the rank.
SignPlan nccl_sign_allreduce(Communicator& comm, NcclGroup& nccl, c10::Device device, cudaStream_t stream,
                             const uint64_t* votes, size_t numel, const SignOptions& options, uint32_t dtype_code,
                             uint64_t* planes);

}  // namespace pride::torch_plugin
