// The two device-side helpers DistributedLion needs to let a bucket travel in ternary votes without its
// planes leaving the GPU (bucket_agreement.h does the same on host planes): finding an element that
// must abstain, and rewriting binary votes as ternary ones. Both work on the bucket's Lion slices, whose
// words are disjoint and written whole by lion_vote_slices; one block per slice, one thread per word.
#include "collectives/bits/cuda/device_elements.cuh"
#include "collectives/bits/cuda/tensor_slices.h"

namespace pride::bits::cuda {
namespace {

using namespace device;

// The bits of word i (of `words`) that hold one of the slice's `count` elements.
__device__ inline uint64_t element_mask(uint32_t count, size_t i, size_t words) {
  const uint32_t tail = count % 64;
  return (i + 1 == words && tail != 0) ? (uint64_t{1} << tail) - 1 : ~uint64_t{0};
}

// Every thread that finds an abstention stores 1: the same value, so plain stores do (no atomics).
__global__ void find_abstentions_kernel(const TensorSlice* slices, size_t nslices, const uint64_t* pos,
                                        const uint64_t* neg, int* flag) {
  for (size_t s = blockIdx.x; s < nslices; s += gridDim.x) {
    const TensorSlice sl = slices[s];
    const size_t words = (size_t{sl.count} + 63) / 64;
    for (size_t i = threadIdx.x; i < words; i += blockDim.x) {
      const size_t w = sl.word + i;
      if ((~(pos[w] | neg[w]) & element_mask(sl.count, i, words)) != 0) *flag = 1;
    }
  }
}

__global__ void binary_as_ternary_kernel(const TensorSlice* slices, size_t nslices, uint64_t* pos, uint64_t* neg) {
  for (size_t s = blockIdx.x; s < nslices; s += gridDim.x) {
    const TensorSlice sl = slices[s];
    const size_t words = (size_t{sl.count} + 63) / 64;
    for (size_t i = threadIdx.x; i < words; i += blockDim.x) {
      const size_t w = sl.word + i;
      const uint64_t mask = element_mask(sl.count, i, words);
      const uint64_t p = pos[w] & mask;
      pos[w] = p;
      neg[w] = ~p & mask;
    }
  }
}

}  // namespace

cudaError_t find_abstentions_slices(const TensorSlice* slices, size_t nslices, const uint64_t* pos,
                                    const uint64_t* neg, int* flag, cudaStream_t stream) {
  if (nslices == 0) return cudaSuccess;
  find_abstentions_kernel<<<grid_for(nslices * kThreads), kThreads, 0, stream>>>(slices, nslices, pos, neg, flag);
  return cudaGetLastError();
}

cudaError_t binary_as_ternary_slices(const TensorSlice* slices, size_t nslices, uint64_t* pos, uint64_t* neg,
                                     cudaStream_t stream) {
  if (nslices == 0) return cudaSuccess;
  binary_as_ternary_kernel<<<grid_for(nslices * kThreads), kThreads, 0, stream>>>(slices, nslices, pos, neg);
  return cudaGetLastError();
}

}  // namespace pride::bits::cuda
