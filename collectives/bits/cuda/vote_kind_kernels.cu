// The two device-side helpers DistributedLion's agreement needs without the bucket's planes leaving the
// GPU (bucket_agreement.h does the same on host planes): listing the elements that must abstain, and
// rewriting binary votes as ternary ones. Both work on the bucket's Lion slices, whose words are
// disjoint and written whole by lion_vote_slices; one block per slice, one thread per word.
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

// One block per slice: each thread counts the abstentions of a few consecutive words, a scan of those
// counts over the block gives each thread where its elements go, and the slice takes its place in the
// list with one atomicAdd (slices without any, nearly all of them, touch nothing). Within a slice the
// list is ascending; the slices' runs lie in no particular order, and `runs` says where each is.
__global__ void list_abstentions_kernel(const TensorSlice* slices, size_t nslices, const uint64_t* pos,
                                        const uint64_t* neg, uint32_t* list, uint32_t capacity, uint32_t* count,
                                        uint32_t* runs) {
  __shared__ uint32_t scan[kThreads];
  __shared__ uint32_t base;
  for (size_t s = blockIdx.x; s < nslices; s += gridDim.x) {
    const TensorSlice sl = slices[s];
    const size_t words = (size_t{sl.count} + 63) / 64;
    const size_t per_thread = (words + blockDim.x - 1) / blockDim.x;
    const size_t first = threadIdx.x * per_thread, last = first + per_thread < words ? first + per_thread : words;
    auto abstaining = [&](size_t i) {
      const size_t w = sl.word + i;
      return ~(pos[w] | neg[w]) & element_mask(sl.count, i, words);
    };
    uint32_t mine = 0;
    for (size_t i = first; i < last; ++i) mine += uint32_t(__popcll(abstaining(i)));
    scan[threadIdx.x] = mine;
    __syncthreads();
    for (unsigned d = 1; d < blockDim.x; d <<= 1) {  // inclusive scan of the threads' counts
      const uint32_t add = threadIdx.x >= d ? scan[threadIdx.x - d] : 0;
      __syncthreads();
      scan[threadIdx.x] += add;
      __syncthreads();
    }
    if (threadIdx.x == blockDim.x - 1) {
      const uint32_t total = scan[threadIdx.x];
      base = total > 0 ? atomicAdd(count, total) : 0;
      runs[2 * s] = base;
      runs[2 * s + 1] = total;
    }
    __syncthreads();
    uint32_t at = base + scan[threadIdx.x] - mine;
    for (size_t i = first; i < last && at < capacity; ++i) {
      for (uint64_t a = abstaining(i); a != 0 && at < capacity; a &= a - 1, ++at) {
        list[at] = uint32_t((sl.word + i) * 64 + uint64_t(__ffsll(static_cast<long long>(a)) - 1));
      }
    }
    __syncthreads();  // `scan` and `base` are the next slice's
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

cudaError_t list_abstentions_slices(const TensorSlice* slices, size_t nslices, const uint64_t* pos,
                                    const uint64_t* neg, uint32_t* list, uint32_t capacity, uint32_t* count,
                                    uint32_t* runs, cudaStream_t stream) {
  if (nslices == 0) return cudaSuccess;
  // kThreads a block: the scan's shared array is that long.
  list_abstentions_kernel<<<grid_for(nslices * kThreads), kThreads, 0, stream>>>(slices, nslices, pos, neg, list,
                                                                                   capacity, count, runs);
  return cudaGetLastError();
}

cudaError_t binary_as_ternary_slices(const TensorSlice* slices, size_t nslices, uint64_t* pos, uint64_t* neg,
                                     cudaStream_t stream) {
  if (nslices == 0) return cudaSuccess;
  binary_as_ternary_kernel<<<grid_for(nslices * kThreads), kThreads, 0, stream>>>(slices, nslices, pos, neg);
  return cudaGetLastError();
}

}  // namespace pride::bits::cuda
