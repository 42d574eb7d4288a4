#include "torch_plugin/cuda_plane_ops.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>

#include <algorithm>

#include "backend/common/error.h"
#include "collectives/bits/cuda/kernels.h"
#include "torch_plugin/word_buffers.h"

namespace pride::torch_plugin {
namespace {

void check_launch(cudaError_t status, const char* what) {
  TORCH_CHECK(status == cudaSuccess, "pride sign_allreduce on device memory: ", what, " failed: ",
              cudaGetErrorString(status));
}

// Plane p of `planes` planes, `width` words each, from src (pitch src_stride words) to dst (pitch
// dst_stride words): one 2D copy.
void copy_planes(uint64_t* dst, size_t dst_stride, const uint64_t* src, size_t src_stride, int planes, size_t width,
                 cudaStream_t stream) {
  if (planes <= 0 || width == 0) return;
  C10_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_stride * 8, src, src_stride * 8, width * 8, size_t(planes),
                                   cudaMemcpyDeviceToDevice, stream));
}

}  // namespace

uint64_t* CudaPlaneOps::scratch(SignScratch what, size_t words, uint32_t instance) {
  at::Tensor& t = buffers_[{uint32_t(what), instance}];
  ensure_words(t, words, word_options(device_));
  return words_of(t);
}

void CudaPlaneOps::gather(const uint64_t* base, size_t stride, int planes, patterns::Range words, uint64_t* out) {
  copy_planes(out, words.size, base + words.begin, stride, planes, words.size, stream_);
}

void CudaPlaneOps::scatter(const uint64_t* in, int planes, patterns::Range words, uint64_t* base, size_t stride) {
  copy_planes(base + words.begin, stride, in, words.size, planes, words.size, stream_);
}

void CudaPlaneOps::count(const uint64_t* const* ballots, int nballots, size_t nwords, uint64_t* counter,
                         int counter_planes) {
  // pride's InvalidArgument (a ValueError in Python), not torch's: every rank finds this alike, so the
  // group stays usable (PrideBackend::local_failure tells the peers of torch's errors).
  PRIDE_CHECK_ARG(nballots <= bits::cuda::kMaxCountPlanes,
                  "pride sign_allreduce (rank {}): the device-memory path counts at most {} ranks, this group has {}; "
                  "set PRIDE_CUDA_PATH=host",
                  rank_, bits::cuda::kMaxCountPlanes, nballots);
  check_launch(bits::cuda::count_planes(ballots, nballots, nwords, counter, counter_planes, stream_), "count_planes");
}

void CudaPlaneOps::finalize(const SignPlan& plan, const uint64_t* counts, int planes, size_t nwords, uint64_t* result,
                            size_t result_stride) {
  finalize_on_device(plan, counts, planes, nwords, result, result_stride, stream_);
}

void CudaPlaneOps::encode_trits(const uint64_t* planes, size_t stride, size_t nwords, uint8_t* out) {
  check_launch(bits::cuda::encode_trits(planes, planes + stride, nwords, out, stream_), "encode_trits");
}

void CudaPlaneOps::decode_trits(const uint8_t* in, size_t nwords, uint64_t* planes, size_t stride) {
  check_launch(bits::cuda::decode_trits(in, nwords, planes, planes + stride, stream_), "decode_trits");
}

void CudaPlaneOps::encode_counts(const bits::counts::CountCode& code, const uint64_t* planes, size_t stride,
                                 size_t nwords, uint32_t* out) {
  check_launch(bits::cuda::encode_counts(code, planes, stride, nwords, out, stream_), "encode_counts");
}

void CudaPlaneOps::decode_counts(const bits::counts::CountCode& code, const uint32_t* in, size_t nwords,
                                 uint64_t* planes, size_t stride) {
  check_launch(bits::cuda::decode_counts(code, in, nwords, planes, stride, stream_), "decode_counts");
}

void CudaPlaneOps::settle() { C10_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

void CudaPlaneOps::finish_results() {
  if (!reads_follow_stream_) settle();
}

void finalize_on_device(const SignPlan& plan, const uint64_t* counts, int planes, size_t nwords, uint64_t* result,
                        size_t result_stride, cudaStream_t stream) {
  if (nwords == 0) return;
  const uint64_t* pos = counts;
  const uint64_t* neg = counts + size_t(planes) * nwords;
  if (plan.mode == SignMode::kVote) {
    uint64_t* tie = plan.result_planes == 2 ? result + result_stride : nullptr;
    check_launch(plan.kind == VoteKind::kBinary
                     ? bits::cuda::vote_from_count(pos, planes, nwords, plan.nranks, result, tie, stream)
                     : bits::cuda::vote_from_counts(pos, neg, planes, nwords, result, tie, stream),
                 "vote threshold");
    return;
  }
  if (plan.kind == VoteKind::kBinary) {  // the count itself is the result, widened to result_planes
    const int copied = std::min(planes, plan.result_planes);
    copy_planes(result, result_stride, pos, nwords, copied, nwords, stream);
    if (plan.result_planes > copied) {
      C10_CUDA_CHECK(cudaMemset2DAsync(result + size_t(copied) * result_stride, result_stride * 8, 0, nwords * 8,
                                       size_t(plan.result_planes - copied), stream));
    }
    return;
  }
  check_launch(bits::cuda::counter_signed_offset(pos, neg, planes, nwords, plan.nranks, result, plan.result_planes,
                                                 result_stride, stream),
               "mean offset");
}

}  // namespace pride::torch_plugin
