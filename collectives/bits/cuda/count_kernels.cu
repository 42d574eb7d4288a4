// The owner's count and the thresholds on the GPU, one 64-bit word (64 elements) per thread: the same
// bit-sliced arithmetic as counters_impl.h and threshold_impl.h, on single words.
#include <cstring>

#include "collectives/bits/cuda/device_elements.cuh"
#include "collectives/bits/cuda/kernels.h"
#include "collectives/bits/kernel_table.h"

namespace pride::bits::cuda {
namespace {

using namespace device;
constexpr int kMaxDigits = 32;  // kernel_table.h's kMaxPlanes

// The ballots travel by value in the launch's parameter space (2 KiB of pointers).
struct Ballots {
  const uint64_t* plane[kMaxCountPlanes];
};

// Digits a count of up to kMaxCountPlanes planes needs (planes_needed(256) = 9). The thread's digits
// live in registers, so this bounds them: sized by counter planes (32) they took 127 registers a
// thread, a quarter of the GPU's occupancy, and count_planes ran at 0.44 of a same-size copy on an H200.
constexpr int kMaxCountDigits = 9;
// Ballot words a thread loads before it adds them in: independent loads in flight together, instead
// of one memory latency per plane.
constexpr int kBallotsInFlight = 4;

// counter = Σ planes: each vote plane rippled in with half adders. A thread's digits stay in
// registers; the loop over digits is bounded by a compile-time maximum and stops at `ndigits`.
__global__ void count_planes_kernel(Ballots ballots, int nplanes, size_t nwords, uint64_t* counter,
                                    int counter_planes, int ndigits) {
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  for (size_t w = size_t{blockIdx.x} * blockDim.x + threadIdx.x; w < nwords; w += stride) {
    uint64_t digit[kMaxCountDigits];
#pragma unroll
    for (int d = 0; d < kMaxCountDigits; ++d) digit[d] = 0;
    for (int k0 = 0; k0 < nplanes; k0 += kBallotsInFlight) {
      uint64_t ballot[kBallotsInFlight];
#pragma unroll
      for (int j = 0; j < kBallotsInFlight; ++j) ballot[j] = k0 + j < nplanes ? ballots.plane[k0 + j][w] : 0;
#pragma unroll
      for (int j = 0; j < kBallotsInFlight; ++j) {
        uint64_t c = ballot[j];
#pragma unroll
        for (int d = 0; d < kMaxCountDigits; ++d) {
          if (d >= ndigits || c == 0) break;
          const uint64_t t = digit[d] & c;
          digit[d] ^= c;
          c = t;
        }
      }
    }
    for (int p = 0; p < counter_planes; ++p) {
      uint64_t value = 0;
#pragma unroll
      for (int d = 0; d < kMaxCountDigits; ++d) value = d == p && d < ndigits ? digit[d] : value;
      counter[size_t(p) * nwords + w] = value;
    }
  }
}

// s = 2*count - nvotes against 0, i.e. count against half = nvotes / 2, most significant plane first.
__global__ void vote_from_count_kernel(const uint64_t* count, int planes, size_t nwords, uint64_t half, bool even,
                                       uint64_t* pos, uint64_t* tie) {
  const bool reachable = planes >= 64 || (half >> planes) == 0;
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  for (size_t w = size_t{blockIdx.x} * blockDim.x + threadIdx.x; w < nwords; w += stride) {
    uint64_t gt = 0, eq = reachable ? ~uint64_t{0} : 0;
    for (int p = planes - 1; p >= 0; --p) {
      const uint64_t c = count[size_t(p) * nwords + w];
      if (p < 64 && ((half >> p) & 1u)) {
        eq &= c;
      } else {
        gt |= eq & c;
        eq &= ~c;
      }
    }
    pos[w] = gt;
    if (tie) tie[w] = even ? eq : 0;
  }
}

__global__ void vote_from_counts_kernel(const uint64_t* pos_count, const uint64_t* neg_count, int planes,
                                        size_t nwords, uint64_t* pos, uint64_t* tie) {
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  for (size_t w = size_t{blockIdx.x} * blockDim.x + threadIdx.x; w < nwords; w += stride) {
    uint64_t gt = 0, eq = ~uint64_t{0};
    for (int p = planes - 1; p >= 0; --p) {
      const uint64_t a = pos_count[size_t(p) * nwords + w], b = neg_count[size_t(p) * nwords + w];
      gt |= eq & a & ~b;
      eq &= ~(a ^ b);
    }
    pos[w] = gt;
    if (tie) tie[w] = eq;
  }
}

// out = pos + ~neg + 1 + offset modulo 2^out_planes (counters_impl.h explains why that is exact).
__global__ void signed_offset_kernel(const uint64_t* pos, const uint64_t* neg, int planes, size_t nwords,
                                     uint64_t offset, uint64_t* out, int out_planes, size_t out_stride) {
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  for (size_t w = size_t{blockIdx.x} * blockDim.x + threadIdx.x; w < nwords; w += stride) {
    uint64_t c1 = ~uint64_t{0}, c2 = 0;
    for (int p = 0; p < out_planes; ++p) {
      const uint64_t a = p < planes ? pos[size_t(p) * nwords + w] : 0;
      const uint64_t b = p < planes ? ~neg[size_t(p) * nwords + w] : ~uint64_t{0};
      const uint64_t u = a ^ b, diff = u ^ c1;
      c1 = (a & b) | (u & c1);
      const uint64_t k = (p < 64 && ((offset >> p) & 1u)) ? ~uint64_t{0} : 0;
      const uint64_t v = diff ^ k;
      out[size_t(p) * out_stride + w] = v ^ c2;
      c2 = (diff & k) | (v & c2);
    }
  }
}

int planes_needed(int64_t max_count) {
  int planes = 1;
  while (planes < 63 && (int64_t{1} << planes) <= max_count) ++planes;
  return planes;
}

bool planes_ok(int planes) { return planes >= 1 && planes <= kMaxDigits; }

}  // namespace

cudaError_t count_planes(const uint64_t* const* planes, int nplanes, size_t nwords, uint64_t* counter,
                         int counter_planes, cudaStream_t stream) {
  if (nplanes < 0 || nplanes > kMaxCountPlanes || !planes_ok(counter_planes) ||
      counter_planes < planes_needed(nplanes)) {
    return cudaErrorInvalidValue;
  }
  if (nwords == 0) return cudaSuccess;
  static_assert(kMaxCountDigits >= 1 && (int64_t{1} << kMaxCountDigits) > kMaxCountPlanes, "digits for every count");
  Ballots ballots{};
  for (int k = 0; k < nplanes; ++k) ballots.plane[k] = planes[k];
  count_planes_kernel<<<grid_for(nwords), kThreads, 0, stream>>>(ballots, nplanes, nwords, counter, counter_planes,
                                                                  planes_needed(nplanes));
  return cudaGetLastError();
}

cudaError_t vote_from_count(const uint64_t* count, int planes, size_t nwords, int64_t nvotes, uint64_t* pos,
                            uint64_t* tie, cudaStream_t stream) {
  if (!planes_ok(planes) || nvotes < 0) return cudaErrorInvalidValue;
  if (nwords == 0) return cudaSuccess;
  vote_from_count_kernel<<<grid_for(nwords), kThreads, 0, stream>>>(count, planes, nwords, uint64_t(nvotes / 2),
                                                                     nvotes % 2 == 0, pos, tie);
  return cudaGetLastError();
}

cudaError_t vote_from_counts(const uint64_t* pos_count, const uint64_t* neg_count, int planes, size_t nwords,
                             uint64_t* pos, uint64_t* tie, cudaStream_t stream) {
  if (!planes_ok(planes)) return cudaErrorInvalidValue;
  if (nwords == 0) return cudaSuccess;
  vote_from_counts_kernel<<<grid_for(nwords), kThreads, 0, stream>>>(pos_count, neg_count, planes, nwords, pos, tie);
  return cudaGetLastError();
}

cudaError_t counter_signed_offset(const uint64_t* pos, const uint64_t* neg, int planes, size_t nwords, int64_t offset,
                                  uint64_t* out, int out_planes, size_t out_stride, cudaStream_t stream) {
  if (out_stride == 0) out_stride = nwords;
  if (!planes_ok(planes) || !planes_ok(out_planes) || offset < 0 || out_planes < planes_needed(2 * offset) ||
      out_stride < nwords) {
    return cudaErrorInvalidValue;
  }
  if (nwords == 0) return cudaSuccess;
  signed_offset_kernel<<<grid_for(nwords), kThreads, 0, stream>>>(pos, neg, planes, nwords, uint64_t(offset), out,
                                                                   out_planes, out_stride);
  return cudaGetLastError();
}

}  // namespace pride::bits::cuda
