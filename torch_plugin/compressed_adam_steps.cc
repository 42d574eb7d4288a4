#include "torch_plugin/compressed_adam_steps.h"

#include <c10/util/Exception.h>

#include "torch_plugin/tensor_types.h"

namespace pride::torch_plugin {
namespace {

bool usable(const at::Tensor& t, at::ScalarType dtype, int64_t numel) {
  return t.defined() && t.device().is_cpu() && t.layout() == at::kStrided && t.is_contiguous() &&
         t.scalar_type() == dtype && t.numel() == numel;
}

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
  TORCH_CHECK_VALUE(usable(t, at::kFloat, total), "pride compressed Adam fused step: ", what,
                    " must be a contiguous float32 CPU tensor of ", total, " elements, got ", t.sizes(), " ",
                    t.scalar_type());
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
  for (size_t i = 0; i < n; ++i) {
    const int64_t numel = params[i].numel();
    if (!usable(params[i], dtype, numel)) return false;
    if (grads[i].has_value() && !usable(*grads[i], dtype, numel)) return false;
    for (const auto& state : states) {
      if (!usable(state[i], at::kFloat, numel)) return false;
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
    bits::zero_one_adam_local_step(params[i].data_ptr(), grad_or_null(grads[i]), dtype, momenta[i].data_ptr<float>(),
                                   variances[i].data_ptr<float>(), accumulators[i].data_ptr<float>(),
                                   size_t(params[i].numel()), step, out != nullptr ? out + offset : nullptr);
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
    bits::zero_one_adam_sync(u + offset, variances[i].data_ptr<float>(), momenta[i].data_ptr<float>(),
                             anchors[i].data_ptr<float>(), accumulators[i].data_ptr<float>(), params[i].data_ptr(),
                             dtype, size_t(params[i].numel()), sync);
  }
  for (const Tensors* written : {&params, &momenta, &anchors, &accumulators}) bump_versions(*written);
}

void onebit_adam_momentum(const Tensors& params, const MaybeTensors& grads, const Tensors& momenta,
                          const at::Tensor& out, double beta1) {
  check(params, grads, {momenta});
  float* o = flat(out, params, "the flat buffer");
  const bits::DType dtype = to_sign_dtype(params[0].scalar_type(), "OneBitAdam");
  for (size_t i = 0, offset = 0; i < params.size(); offset += size_t(params[i].numel()), ++i) {
    bits::onebit_adam_momentum(grad_or_null(grads[i]), dtype, momenta[i].data_ptr<float>(), size_t(params[i].numel()),
                               beta1, o + offset);
  }
  bump_versions(momenta);
}

void onebit_adam_apply(const at::Tensor& mean, const Tensors& params, const Tensors& momenta, const Tensors& variances,
                       const bits::AdamApply& apply) {
  check(params, MaybeTensors(params.size()), {momenta, variances});
  const float* u = flat(mean, params, "the allreduce result");
  const bits::DType dtype = to_sign_dtype(params[0].scalar_type(), "OneBitAdam");
  for (size_t i = 0, offset = 0; i < params.size(); offset += size_t(params[i].numel()), ++i) {
    bits::onebit_adam_apply(u + offset, variances[i].data_ptr<float>(), momenta[i].data_ptr<float>(),
                            params[i].data_ptr(), dtype, size_t(params[i].numel()), apply);
  }
  bump_versions(params);
  bump_versions(momenta);
}

}  // namespace pride::torch_plugin
