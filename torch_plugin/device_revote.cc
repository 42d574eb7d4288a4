#include "torch_plugin/device_revote.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <cstring>

#include "backend/common/error.h"
#include "collectives/bits/cuda/kernels.h"
#include "collectives/engine/sign/sparse_abstentions.h"
#include "torch_plugin/word_buffers.h"

namespace pride::torch_plugin {
namespace {

void check_launch(cudaError_t status, const Communicator& comm, const char* what) {
  TORCH_CHECK(status == cudaSuccess, "pride rank ", comm.rank(), ": DistributedLion's re-vote: ", what,
              " failed: ", cudaGetErrorString(status));
}

// `host` on the device, copied on the current stream from pinned memory: the caching host allocator
// keeps the pinned block until the copy has read it, and the device block goes back to the current
// stream's pool, behind the kernels queued on it, when the tensor goes.
at::Tensor on_device(const void* host, size_t bytes, c10::Device device) {
  at::Tensor pinned = empty_words((bytes + 7) / 8, word_options(at::kCPU, /*pinned=*/true));
  if (bytes > 0) std::memcpy(pinned.data_ptr(), host, bytes);
  return pinned.to(device, /*non_blocking=*/true);
}

}  // namespace

SignPlan revote_on_device(Communicator& comm, NcclGroup* nccl, size_t numel, SignOptions options, uint32_t dtype_code,
                          const DeviceVote& where, cudaStream_t side, const std::vector<uint32_t>& revote,
                          const std::vector<uint32_t>& abstain_everywhere) {
  check_revote_lists(comm.rank(), numel, revote, abstain_everywhere);
  const size_t nwords = bits::words_for(numel), m = revote.size(), mw = bits::words_for(m);

  // 1. This rank's ternary votes at U, gathered on the device and brought to the host (on `side`, whose
  // blocks these temporaries come from and go back to).
  at::Tensor votes_at_host;
  if (m > 0) {
    c10::cuda::CUDAStreamGuard on_side(c10::cuda::getStreamFromExternal(side, where.device.index()));
    const at::Tensor at_device = on_device(revote.data(), m * 4, where.device);
    const at::Tensor votes_at = empty_words(2 * mw, word_options(where.device));
    check_launch(bits::cuda::gather_vote_bits(where.votes, where.votes + nwords,
                                              reinterpret_cast<const uint32_t*>(at_device.data_ptr()), m,
                                              words_of(votes_at), side),
                 comm, "gather_vote_bits");
    votes_at_host = empty_words(2 * mw, word_options(at::kCPU, /*pinned=*/true));
    C10_CUDA_CHECK(cudaMemcpyAsync(words_of(votes_at_host), words_of(votes_at), 2 * mw * 8, cudaMemcpyDeviceToHost,
                                   side));
    C10_CUDA_CHECK(cudaStreamSynchronize(side));
  }

  // 2. The binary call on the whole bucket: exact wherever no rank abstains. Its planes are written by
  // work queued on where.stream (vote_on_device records where.written there), so what follows on that
  // stream comes after them.
  c10::cuda::CUDAStreamGuard on_stream(c10::cuda::getStreamFromExternal(where.stream, where.device.index()));
  SignOptions binary_options = options;
  binary_options.votes = VoteKind::kBinary;
  const SignPlan binary = vote_on_device(comm, nccl, numel, binary_options, dtype_code, where);

  // 3. The exact count at U, through the host (the same call as the CPU's re-vote).
  SignResult counted;
  if (m > 0) counted = count_revotes(comm, words_of(votes_at_host), m, options, dtype_code);

  // 4. The binary result re-encoded as the ternary one, on the device, as sparse_abstentions.cc does on the
  // host: a vote keeps its planes (a tie plane that binary votes lack is all zero); a mean's u = 2c is the
  // binary count shifted up one plane.
  const SignPlan ternary = SignPlan::make(comm.size(), options.mode, VoteKind::kTernary);
  if (numel > 0) {
    if (ternary.mode == SignMode::kVote) {
      const int extra = ternary.result_planes - binary.result_planes;
      if (extra > 0) {
        C10_CUDA_CHECK(cudaMemsetAsync(where.planes + size_t(binary.result_planes) * nwords, 0,
                                       size_t(extra) * nwords * 8, where.stream));
      }
    } else {
      PRIDE_ENFORCE(ternary.result_planes == binary.result_planes + 1,
                    "rank {}: revote_on_device: a mean of {} ranks has {} binary and {} ternary planes", comm.rank(),
                    comm.size(), binary.result_planes, ternary.result_planes);
      for (int p = binary.result_planes - 1; p >= 0; --p) {  // top down: each copy's source is still the binary plane
        C10_CUDA_CHECK(cudaMemcpyAsync(where.planes + size_t(p + 1) * nwords, where.planes + size_t(p) * nwords,
                                       nwords * 8, cudaMemcpyDeviceToDevice, where.stream));
      }
      C10_CUDA_CHECK(cudaMemsetAsync(where.planes, 0, nwords * 8, where.stream));
    }
  }

  // 5. The re-vote's bits at U and the zero counts at E, written into the result planes.
  const RevotePatch patch = revote_patch(ternary, counted, revote, abstain_everywhere);
  if (!patch.elements.empty()) {
    const at::Tensor elements = on_device(patch.elements.data(), patch.elements.size() * 4, where.device);
    const at::Tensor values = on_device(patch.bits.data(), patch.bits.size() * 8, where.device);
    check_launch(bits::cuda::scatter_plane_bits(where.planes, patch.planes, nwords,
                                                reinterpret_cast<const uint32_t*>(elements.data_ptr()),
                                                patch.elements.size(), words_of(values), where.stream),
                 comm, "scatter_plane_bits");
  }
  if (where.written != nullptr) {
    C10_CUDA_CHECK(cudaEventRecord(where.written, where.stream));
  } else {
    C10_CUDA_CHECK(cudaStreamSynchronize(where.stream));
  }
  return ternary;
}

}  // namespace pride::torch_plugin
