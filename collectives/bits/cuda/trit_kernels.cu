// The trit coding of trit_coding.h on the GPU: one thread per byte to encode, one per word to decode,
// so no two threads write the same byte or word (no atomics).
#include "collectives/bits/cuda/device_elements.cuh"
#include "collectives/bits/cuda/kernels.h"
#include "collectives/bits/trit_coding.h"

namespace pride::bits::cuda {
namespace {

using namespace device;

__global__ void encode_trits_kernel(const uint64_t* pos, const uint64_t* tie, size_t nwords, uint8_t* out) {
  const size_t nbytes = trits::bytes_for_words(nwords);
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  for (size_t b = size_t{blockIdx.x} * blockDim.x + threadIdx.x; b < nbytes; b += stride) {
    const size_t first = b * trits::kPerByte;
    out[b] = trits::encode5(trits::bits5(pos, nwords, first), trits::bits5(tie, nwords, first));
  }
}

__global__ void decode_trits_kernel(const uint8_t* in, size_t nwords, uint64_t* pos, uint64_t* tie) {
  const size_t nbytes = trits::bytes_for_words(nwords);
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  for (size_t w = size_t{blockIdx.x} * blockDim.x + threadIdx.x; w < nwords; w += stride) {
    trits::decode_word(in, nbytes, w, nullptr, pos + w, tie + w);
  }
}

}  // namespace

cudaError_t encode_trits(const uint64_t* pos, const uint64_t* tie, size_t nwords, uint8_t* out, cudaStream_t stream) {
  if (nwords == 0) return cudaSuccess;
  const size_t nbytes = trits::bytes_for_words(nwords);
  encode_trits_kernel<<<grid_for(nbytes), kThreads, 0, stream>>>(pos, tie, nwords, out);
  return cudaGetLastError();
}

cudaError_t decode_trits(const uint8_t* in, size_t nwords, uint64_t* pos, uint64_t* tie, cudaStream_t stream) {
  if (nwords == 0) return cudaSuccess;
  decode_trits_kernel<<<grid_for(nwords), kThreads, 0, stream>>>(in, nwords, pos, tie);
  return cudaGetLastError();
}

}  // namespace pride::bits::cuda
