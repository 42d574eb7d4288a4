#include "torch_plugin/compressed_adam_steps.h"

#include <c10/util/Exception.h>

#include "torch_plugin/tensor_types.h"
#ifdef PRIDE_WITH_CUDA_TENSORS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "collectives/bits/cuda/kernels.h"
#endif

namespace pride::torch_plugin {
namespace {

bool usable(const at::Tensor& t, at::ScalarType dtype, int64_t numel, c10::Device device) {
  return t.defined() && t.device() == device && t.layout() == at::kStrided && t.is_contiguous() &&
         t.scalar_type() == dtype && t.numel() == numel;
}

// CPU tensors run the CPU kernels; CUDA tensors (in a build with CUDA) the same arithmetic's CUDA
// kernels, queued on the caller's current stream as torch's own operations would be.
bool device_supported(c10::Device device) {
#ifdef PRIDE_WITH_CUDA_TENSORS
  return device.is_cpu() || device.is_cuda();
#else
  return device.is_cpu();
#endif
}

#ifdef PRIDE_WITH_CUDA_TENSORS
struct OnDevice {
  explicit OnDevice(c10::Device device) : guard(device), stream(c10::cuda::getCurrentCUDAStream(device.index())) {}
  c10::cuda::CUDAGuard guard;
  cudaStream_t stream;
};

void check_launch(cudaError_t status, const char* what) {
  TORCH_CHECK(status == cudaSuccess, "pride compressed Adam fused step: ", what, " failed: ",
              cudaGetErrorString(status));
}
#endif

bool float_dtype(at::ScalarType t) { return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf; }

// Written through their data pointers: torch's version counters must still see the change (autograd
// checks them, and the optimizers cache by them).
void bump_versions(const Tensors& tensors) {
  for (const auto& t : tensors) {
    if (!t.is_inference()) t.unsafeGetTensorImpl()->bump_version();
  }
}

void check(const Tensors& params, const MaybeTensors& grads, const std::vector<Tensors>& states) {
  TORCH_CHECK_VALUE(compressed_adam_fused_supported(params, grads, states),
                    "pride compressed Adam fused step: the tensors do not qualify (CPU, contiguous, one float dtype "
                    "for parameters and gradients, float32 state of the same sizes); check with "
                    "compressed_adam_fused_supported first");
}

// The group's flat float32 buffer: Σ numel elements.
float* flat(const at::Tensor& t, const Tensors& params, const char* what) {
  int64_t total = 0;
  for (const auto& p : params) total += p.numel();
  TORCH_CHECK_VALUE(usable(t, at::kFloat, total, params[0].device()), "pride compressed Adam fused step: ", what,
                    " must be a contiguous float32 tensor of ", total, " elements on ", params[0].device(), ", got ",
                    t.sizes(), " ", t.scalar_type(), " on ", t.device());
  bump_versions({t});
  return t.data_ptr<float>();
}

const void* grad_or_null(const std::optional<at::Tensor>& g) { return g.has_value() ? g->data_ptr() : nullptr; }

}  // namespace

bool compressed_adam_fused_supported(const Tensors& params, const MaybeTensors& grads,
                                     const std::vector<Tensors>& states) {
  const size_t n = params.size();
  if (n == 0 || grads.size() != n || !float_dtype(params[0].scalar_type())) return false;
  for (const auto& state : states) {
    if (state.size() != n) return false;
  }
  const at::ScalarType dtype = params[0].scalar_type();
  const c10::Device device = params[0].device();
  if (!device_supported(device)) return false;
  for (size_t i = 0; i < n; ++i) {
    const int64_t numel = params[i].numel();
    if (!usable(params[i], dtype, numel, device)) return false;
    if (grads[i].has_value() && !usable(*grads[i], dtype, numel, device)) return false;
    for (const auto& state : states) {
      if (!usable(state[i], at::kFloat, numel, device)) return false;
    }
  }
  return true;
}

void zero_one_adam_local_step(const Tensors& params, const MaybeTensors& grads, const Tensors& momenta,
                              const Tensors& variances, const Tensors& accumulators,
                              const std::optional<at::Tensor>& scaled, const bits::AdamLocalStep& step) {
  check(params, grads, {momenta, variances, accumulators});
  float* out = scaled.has_value() ? flat(*scaled, params, "the flat buffer") : nullptr;
  const bits::DType dtype = to_sign_dtype(params[0].scalar_type(), "ZeroOneAdam");
  for (size_t i = 0, offset = 0; i < params.size(); offset += size_t(params[i].numel()), ++i) {
    void* p = params[i].data_ptr();
    const void* g = grad_or_null(grads[i]);
    float *m = momenta[i].data_ptr<float>(), *acc = accumulators[i].data_ptr<float>();
    const float* v = variances[i].data_ptr<float>();
    const size_t n = size_t(params[i].numel());
    float* scaled_i = out != nullptr ? out + offset : nullptr;
#ifdef PRIDE_WITH_CUDA_TENSORS
    if (params[i].is_cuda()) {
      const OnDevice on(params[i].device());
      check_launch(bits::cuda::zero_one_adam_local_step(p, g, dtype, m, v, acc, n, step, scaled_i, on.stream),
                   "zero_one_adam_local_step");
      continue;
    }
#endif
    bits::zero_one_adam_local_step(p, g, dtype, m, v, acc, n, step, scaled_i);
  }
  bump_versions(params);
  bump_versions(momenta);
  if (out == nullptr) bump_versions(accumulators);
}

void zero_one_adam_sync(const at::Tensor& mean, const Tensors& params, const Tensors& momenta, const Tensors& variances,
                        const Tensors& accumulators, const Tensors& anchors, const bits::AdamSync& sync) {
  check(params, MaybeTensors(params.size()), {momenta, variances, accumulators, anchors});
  const float* u = flat(mean, params, "the allreduce result");
  const bits::DType dtype = to_sign_dtype(params[0].scalar_type(), "ZeroOneAdam");
  for (size_t i = 0, offset = 0; i < params.size(); offset += size_t(params[i].numel()), ++i) {
    const float* v = variances[i].data_ptr<float>();
    float *m = momenta[i].data_ptr<float>(), *anchor = anchors[i].data_ptr<float>();
    float* acc = accumulators[i].data_ptr<float>();
    const size_t n = size_t(params[i].numel());
#ifdef PRIDE_WITH_CUDA_TENSORS
    if (params[i].is_cuda()) {
      const OnDevice on(params[i].device());
      check_launch(bits::cuda::zero_one_adam_sync(u + offset, v, m, anchor, acc, params[i].data_ptr(), dtype, n, sync,
                                                  on.stream),
                   "zero_one_adam_sync");
      continue;
    }
#endif
    bits::zero_one_adam_sync(u + offset, v, m, anchor, acc, params[i].data_ptr(), dtype, n, sync);
  }
  for (const Tensors* written : {&params, &momenta, &anchors, &accumulators}) bump_versions(*written);
}

void onebit_adam_momentum(const Tensors& params, const MaybeTensors& grads, const Tensors& momenta,
                          const at::Tensor& out, double beta1) {
  check(params, grads, {momenta});
  float* o = flat(out, params, "the flat buffer");
  const bits::DType dtype = to_sign_dtype(params[0].scalar_type(), "OneBitAdam");
  for (size_t i = 0, offset = 0; i < params.size(); offset += size_t(params[i].numel()), ++i) {
    const void* g = grad_or_null(grads[i]);
    float* m = momenta[i].data_ptr<float>();
    const size_t n = size_t(params[i].numel());
#ifdef PRIDE_WITH_CUDA_TENSORS
    if (params[i].is_cuda()) {
      const OnDevice on(params[i].device());
      check_launch(bits::cuda::onebit_adam_momentum(g, dtype, m, n, beta1, o + offset, on.stream),
                   "onebit_adam_momentum");
      continue;
    }
#endif
    bits::onebit_adam_momentum(g, dtype, m, n, beta1, o + offset);
  }
  bump_versions(momenta);
}

void onebit_adam_apply(const at::Tensor& mean, const Tensors& params, const Tensors& momenta, const Tensors& variances,
                       const bits::AdamApply& apply) {
  check(params, MaybeTensors(params.size()), {momenta, variances});
  const float* u = flat(mean, params, "the allreduce result");
  const bits::DType dtype = to_sign_dtype(params[0].scalar_type(), "OneBitAdam");
  for (size_t i = 0, offset = 0; i < params.size(); offset += size_t(params[i].numel()), ++i) {
    const float* v = variances[i].data_ptr<float>();
    float* m = momenta[i].data_ptr<float>();
    const size_t n = size_t(params[i].numel());
#ifdef PRIDE_WITH_CUDA_TENSORS
    if (params[i].is_cuda()) {
      const OnDevice on(params[i].device());
      check_launch(bits::cuda::onebit_adam_apply(u + offset, v, m, params[i].data_ptr(), dtype, n, apply, on.stream),
                   "onebit_adam_apply");
      continue;
    }
#endif
    bits::onebit_adam_apply(u + offset, v, m, params[i].data_ptr(), dtype, n, apply);
  }
  bump_versions(params);
  bump_versions(momenta);
}

}  // namespace pride::torch_plugin
