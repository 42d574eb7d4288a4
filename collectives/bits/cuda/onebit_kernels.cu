// The 1-bit compression of 1-bit Adam and 0/1 Adam on the GPU (bits/onebit.h's kernels for device
// memory). Signs, errors, averages and expansions give the CPU kernels' bits; sums of squares are taken
// in double in a fixed order of their own (kernels.h says which).
#include <algorithm>

#include "collectives/bits/cuda/device_elements.cuh"
#include "collectives/bits/cuda/kernels.h"

namespace pride::bits::cuda {
namespace {

using namespace device;

// scale with its sign bit flipped when `negative`: the CPU's flip_sign_if (onebit_scalar.h).
__device__ inline float flip_sign_if(float scale, bool negative) {
  return __uint_as_float(__float_as_uint(scale) ^ (uint32_t(negative) << 31));
}
__device__ inline double flip_sign_if(double scale, bool negative) {
  const auto bits = static_cast<unsigned long long>(__double_as_longlong(scale)) ^
                    (static_cast<unsigned long long>(negative) << 63);
  return __longlong_as_double(static_cast<long long>(bits));
}

// x += error (when error is given), and this block's Σ x² in double: each thread sums its grid-stride
// elements in order, then the block's threads are added pairwise in a fixed tree.
__global__ void add_error_and_square_sum_kernel(float* x, const float* error, size_t n, double* partials) {
  __shared__ double sums[kThreads];
  double sum = 0.0;
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  for (size_t k = size_t{blockIdx.x} * blockDim.x + threadIdx.x; k < n; k += stride) {
    float v = x[k];
    if (error != nullptr) {
      v = v + error[k];
      x[k] = v;
    }
    sum += double(v) * double(v);
  }
  sums[threadIdx.x] = sum;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (int(threadIdx.x) < half) sums[threadIdx.x] += sums[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = sums[0];
}

// The blocks' partial sums in block order.
__global__ void sum_partials_kernel(const double* partials, int count, double* sum) {
  double total = 0.0;
  for (int i = 0; i < count; ++i) total += partials[i];
  *sum = total;
}

// One warp per 64 elements: each lane decides two elements, and two ballots make the word.
__global__ void compress_signs_kernel(const float* y, float scale, size_t n, uint64_t* signs, float* error) {
  const size_t nwords = plane_words(n);
  const size_t warps = (size_t{gridDim.x} * blockDim.x) / 32;
  for (size_t w = (size_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32; w < nwords; w += warps) {
    uint32_t halves[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const size_t k = w * 64 + size_t(h) * 32 + lane_id();
      bool positive = false;
      if (k < n) {
        const float v = y[k];
        const bool negative = v < 0.0f;  // false for −0 and NaN: they count as +1
        positive = !negative;
        error[k] = v - flip_sign_if(scale, negative);
      }
      halves[h] = __ballot_sync(kFullMask, positive);
    }
    if (lane_id() == 0) signs[w] = uint64_t{halves[0]} | (uint64_t{halves[1]} << 32);
  }
}

__global__ void expand_signs_kernel(const uint64_t* signs, float scale, size_t n, float* out) {
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  for (size_t k = size_t{blockIdx.x} * blockDim.x + threadIdx.x; k < n; k += stride) {
    const bool positive = (signs[k / 64] >> (k % 64)) & 1u;
    out[k] = flip_sign_if(scale, !positive);
  }
}

// The sign vectors and their scales travel by value in the launch's parameter space.
struct SignVectors {
  const uint64_t* signs[kMaxCountPlanes];
  float scales[kMaxCountPlanes];
};

__global__ void average_signs_kernel(SignVectors vectors, int count, size_t n, float* out) {
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  for (size_t k = size_t{blockIdx.x} * blockDim.x + threadIdx.x; k < n; k += stride) {
    double sum = 0.0;
    for (int i = 0; i < count; ++i) {
      const bool positive = (vectors.signs[i][k / 64] >> (k % 64)) & 1u;
      sum += flip_sign_if(double(vectors.scales[i]), !positive);
    }
    out[k] = float(sum / double(count));
  }
}

}  // namespace

cudaError_t add_error_and_square_sum(float* x, const float* error, size_t n, double* partials, double* sum,
                                     cudaStream_t stream) {
  const int blocks = std::min(grid_for(n), kSquareSumBlocks);
  add_error_and_square_sum_kernel<<<blocks, kThreads, 0, stream>>>(x, error, n, partials);
  sum_partials_kernel<<<1, 1, 0, stream>>>(partials, blocks, sum);
  return cudaGetLastError();
}

cudaError_t compress_signs(const float* y, float scale, size_t n, uint64_t* signs, float* error, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  compress_signs_kernel<<<grid_for(plane_words(n) * 32), kThreads, 0, stream>>>(y, scale, n, signs, error);
  return cudaGetLastError();
}

cudaError_t average_signs(const uint64_t* const* signs, const float* scales, int count, size_t n, float* out,
                          cudaStream_t stream) {
  if (count < 1 || count > kMaxCountPlanes) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  SignVectors vectors{};
  for (int i = 0; i < count; ++i) {
    vectors.signs[i] = signs[i];
    vectors.scales[i] = scales[i];
  }
  average_signs_kernel<<<grid_for(n), kThreads, 0, stream>>>(vectors, count, n, out);
  return cudaGetLastError();
}

cudaError_t expand_signs(const uint64_t* signs, float scale, size_t n, float* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  expand_signs_kernel<<<grid_for(n), kThreads, 0, stream>>>(signs, scale, n, out);
  return cudaGetLastError();
}

}  // namespace pride::bits::cuda
