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

// The inclusive scan of the block's values (Hillis-Steele in shared memory, blockDim.x <= kThreads);
// every thread may read scan[blockDim.x − 1], the block's sum, until the next __syncthreads.
__device__ uint32_t block_inclusive_scan(uint32_t value, uint32_t* scan) {
  scan[threadIdx.x] = value;
  __syncthreads();
  for (unsigned d = 1; d < blockDim.x; d <<= 1) {
    const uint32_t add = threadIdx.x >= d ? scan[threadIdx.x - d] : 0;
    __syncthreads();
    scan[threadIdx.x] += add;
    __syncthreads();
  }
  return scan[threadIdx.x];
}

// One block per slice (launched with kThreads threads: the scan's shared array is that long). The block
// counts the slice's abstentions, and the slice takes its place in the list with one atomicAdd (slices
// without any, nearly all of them, touch nothing); then, a chunk of consecutive words at a time (one
// word a thread, coalesced), a scan of the words' counts gives each thread where its elements go.
// Within a slice the list is ascending; the slices' runs lie in no particular order, and `runs` says
// where each is.
// A slice's element k is bit k of its word `sl.word` on: tensors start on a word of the flat index space
// and a slice is a whole number of words into its tensor.
static_assert(kSliceElements % 64 == 0, "slices must start on a word");
__global__ void list_abstentions_kernel(const TensorSlice* slices, size_t nslices, const uint64_t* pos,
                                        const uint64_t* neg, uint32_t* list, uint32_t capacity, uint32_t* count,
                                        uint32_t* runs) {
  __shared__ uint32_t scan[kThreads];
  __shared__ uint32_t base;
  for (size_t s = blockIdx.x; s < nslices; s += gridDim.x) {
    const TensorSlice sl = slices[s];
    const size_t words = (size_t{sl.count} + 63) / 64;
    auto abstaining = [&](size_t i) {
      const size_t w = sl.word + i;
      return i < words ? ~(pos[w] | neg[w]) & element_mask(sl.count, i, words) : uint64_t{0};
    };
    uint32_t mine = 0;
    for (size_t i = threadIdx.x; i < words; i += blockDim.x) mine += uint32_t(__popcll(abstaining(i)));
    block_inclusive_scan(mine, scan);
    const uint32_t total = scan[blockDim.x - 1];  // the same on every thread of the block
    if (threadIdx.x == 0) {
      base = total > 0 ? atomicAdd(count, total) : 0;
      runs[2 * s] = base;
      runs[2 * s + 1] = total;
    }
    __syncthreads();  // `base` is written; every thread has read the sum
    if (total == 0) continue;
    uint32_t offset = base;  // the first place of this chunk's elements
    for (size_t chunk = 0; chunk < words; chunk += blockDim.x) {
      const size_t i = chunk + threadIdx.x;
      const uint64_t a = abstaining(i);
      const uint32_t n = uint32_t(__popcll(a));
      uint32_t at = offset + block_inclusive_scan(n, scan) - n;
      offset += scan[blockDim.x - 1];
      for (uint64_t b = a; b != 0 && at < capacity; b &= b - 1, ++at) {
        list[at] = uint32_t((sl.word + i) * 64 + uint64_t(__ffsll(static_cast<long long>(b)) - 1));
      }
      __syncthreads();  // every thread has read the chunk's sum before the next scan writes `scan`
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
