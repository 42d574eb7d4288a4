// 1-bit Adam's and 0/1 Adam's fused steps after the variance froze on the GPU (bits/compressed_adam.h's
// kernels for device memory): compressed_adam_elements.h per element, one thread per element in a
// grid-stride loop, so every element gets the CPU kernels' bits.
#include <type_traits>

#include "collectives/bits/compressed_adam_params.h"
#include "collectives/bits/cuda/device_elements.cuh"
#include "collectives/bits/cuda/kernels.h"

#define PRIDE_KERNEL_NS cuda_device
#include "collectives/bits/compressed_adam_elements.h"
#undef PRIDE_KERNEL_NS

namespace pride::bits::cuda {
namespace {

using namespace device;
using detail::AdamApplyParams;
using detail::AdamLocalParams;
using detail::AdamSyncParams;

template <class Tr, bool kHasGrad, bool kDecay, bool kBiasCorrected, bool kSync>
__global__ void zero_one_local_kernel(typename Tr::T* p, const typename Tr::T* g, float* m, const float* v, float* acc,
                                      size_t n, AdamLocalParams a, float* scaled) {
  const Lerp lerp(a.weight);
  const AdamMove<kDecay, kBiasCorrected> move{a.decay_factor, a.eps, a.neg_step_size, a.bias_correction2_sqrt};
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  for (size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    zero_one_local_element<Tr, kHasGrad, kDecay, kBiasCorrected, kSync>(p, g, m, v, acc, scaled, i, lerp, move,
                                                                         a.eps);
  }
}

template <class Tr, bool kMask, bool kSetMomentum>
__global__ void zero_one_sync_kernel(const float* mean, const float* v, float* m, float* anchor, float* acc,
                                     typename Tr::T* p, size_t n, AdamSyncParams s) {
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  for (size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    zero_one_sync_element<Tr, kMask, kSetMomentum>(mean, v, m, anchor, acc, p, i, s.eps, s.neg_lr_sum);
  }
}

template <class Tr, bool kHasGrad>
__global__ void onebit_momentum_kernel(const typename Tr::T* g, float* m, float* out, size_t n, float weight) {
  const Lerp lerp(weight);
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  for (size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    onebit_momentum_element<Tr, kHasGrad>(g, m, out, i, lerp);
  }
}

template <class Tr, bool kMask, bool kDecay, bool kBiasCorrected>
__global__ void onebit_apply_kernel(const float* mean, const float* v, float* m, typename Tr::T* p, size_t n,
                                    AdamApplyParams a) {
  const AdamMove<kDecay, kBiasCorrected> move{a.decay_factor, a.eps, a.neg_step_size, a.bias_correction2_sqrt};
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  for (size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    onebit_apply_element<Tr, kMask, kDecay, kBiasCorrected>(mean, v, m, p, i, move);
  }
}

// The per-call switches become template arguments: one branch-free kernel per combination.
template <class Tr>
cudaError_t launch_local(void* pv, const void* gv, float* m, const float* v, float* acc, size_t n,
                         const AdamLocalParams& a, float* scaled, cudaStream_t stream) {
  using T = typename Tr::T;
  auto* p = static_cast<T*>(pv);
  const auto* g = static_cast<const T*>(gv);
  const int blocks = grid_for(n);
  auto go = [&](auto has_grad, auto decay, auto bias, auto sync) {
    zero_one_local_kernel<Tr, decltype(has_grad)::value, decltype(decay)::value, decltype(bias)::value,
                          decltype(sync)::value><<<blocks, kThreads, 0, stream>>>(p, g, m, v, acc, n, a, scaled);
  };
  auto with_sync = [&](auto has_grad, auto decay, auto bias) {
    if (scaled != nullptr) go(has_grad, decay, bias, std::true_type{});
    else go(has_grad, decay, bias, std::false_type{});
  };
  auto with_bias = [&](auto has_grad, auto decay) {
    if (a.bias_corrected) with_sync(has_grad, decay, std::true_type{});
    else with_sync(has_grad, decay, std::false_type{});
  };
  auto with_decay = [&](auto has_grad) {
    if (a.decay) with_bias(has_grad, std::true_type{});
    else with_bias(has_grad, std::false_type{});
  };
  if (g != nullptr) with_decay(std::true_type{});
  else with_decay(std::false_type{});
  return cudaGetLastError();
}

template <class Tr>
cudaError_t launch_sync(const float* mean, const float* v, float* m, float* anchor, float* acc, void* pv, size_t n,
                        const AdamSyncParams& s, cudaStream_t stream) {
  auto* p = static_cast<typename Tr::T*>(pv);
  const int blocks = grid_for(n);
  if (s.mask_zero_variance && s.set_momentum) {
    zero_one_sync_kernel<Tr, true, true><<<blocks, kThreads, 0, stream>>>(mean, v, m, anchor, acc, p, n, s);
  } else if (s.mask_zero_variance) {
    zero_one_sync_kernel<Tr, true, false><<<blocks, kThreads, 0, stream>>>(mean, v, m, anchor, acc, p, n, s);
  } else if (s.set_momentum) {
    zero_one_sync_kernel<Tr, false, true><<<blocks, kThreads, 0, stream>>>(mean, v, m, anchor, acc, p, n, s);
  } else {
    zero_one_sync_kernel<Tr, false, false><<<blocks, kThreads, 0, stream>>>(mean, v, m, anchor, acc, p, n, s);
  }
  return cudaGetLastError();
}

template <class Tr>
cudaError_t launch_momentum(const void* gv, float* m, float* out, size_t n, float weight, cudaStream_t stream) {
  const auto* g = static_cast<const typename Tr::T*>(gv);
  if (g != nullptr) onebit_momentum_kernel<Tr, true><<<grid_for(n), kThreads, 0, stream>>>(g, m, out, n, weight);
  else onebit_momentum_kernel<Tr, false><<<grid_for(n), kThreads, 0, stream>>>(g, m, out, n, weight);
  return cudaGetLastError();
}

template <class Tr>
cudaError_t launch_apply(const float* mean, const float* v, float* m, void* pv, size_t n, const AdamApplyParams& a,
                         cudaStream_t stream) {
  auto* p = static_cast<typename Tr::T*>(pv);
  const int blocks = grid_for(n);
  auto go = [&](auto mask, auto decay, auto bias) {
    onebit_apply_kernel<Tr, decltype(mask)::value, decltype(decay)::value, decltype(bias)::value>
        <<<blocks, kThreads, 0, stream>>>(mean, v, m, p, n, a);
  };
  auto with_bias = [&](auto mask, auto decay) {
    if (a.bias_corrected) go(mask, decay, std::true_type{});
    else go(mask, decay, std::false_type{});
  };
  auto with_decay = [&](auto mask) {
    if (a.decay) with_bias(mask, std::true_type{});
    else with_bias(mask, std::false_type{});
  };
  if (a.mask_zero_variance) with_decay(std::true_type{});
  else with_decay(std::false_type{});
  return cudaGetLastError();
}

}  // namespace

cudaError_t zero_one_adam_local_step(void* p, const void* g, DType dtype, float* m, const float* v, float* acc,
                                     size_t n, const AdamLocalStep& step, float* scaled, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const AdamLocalParams a = detail::adam_local_params(step);
  return with_float_traits(dtype, [&](auto tr) {
    return launch_local<decltype(tr)>(p, g, m, v, acc, n, a, scaled, stream);
  });
}

cudaError_t zero_one_adam_sync(const float* mean, const float* v, float* m, float* anchor, float* acc, void* p,
                               DType dtype, size_t n, const AdamSync& sync, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const AdamSyncParams s = detail::adam_sync_params(sync);
  return with_float_traits(dtype, [&](auto tr) {
    return launch_sync<decltype(tr)>(mean, v, m, anchor, acc, p, n, s, stream);
  });
}

cudaError_t onebit_adam_momentum(const void* g, DType dtype, float* m, size_t n, double beta1, float* out,
                                 cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const float weight = static_cast<float>(1.0 - beta1);
  return with_float_traits(dtype, [&](auto tr) { return launch_momentum<decltype(tr)>(g, m, out, n, weight, stream); });
}

cudaError_t onebit_adam_apply(const float* mean, const float* v, float* m, void* p, DType dtype, size_t n,
                              const AdamApply& apply, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const AdamApplyParams a = detail::adam_apply_params(apply);
  return with_float_traits(dtype, [&](auto tr) { return launch_apply<decltype(tr)>(mean, v, m, p, n, a, stream); });
}

}  // namespace pride::bits::cuda
