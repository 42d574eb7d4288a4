#include "torch_plugin/zero_one_adam_steps.h"

#include <c10/util/Exception.h>

#include "torch_plugin/tensor_types.h"

namespace pride::torch_plugin {
namespace {

bool usable(const at::Tensor& t, at::ScalarType dtype, int64_t numel) {
  return t.defined() && t.device().is_cpu() && t.layout() == at::kStrided && t.is_contiguous() &&
         t.scalar_type() == dtype && t.numel() == numel;
}

bool float_dtype(at::ScalarType t) { return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf; }

// Every list as long as the parameter list, with a message naming what differs.
void check_lengths(size_t n, std::initializer_list<std::pair<const char*, size_t>> lists) {
  for (const auto& [what, size] : lists) {
    TORCH_CHECK_VALUE(size == n, "pride ZeroOneAdam fused step: ", n, " parameters but ", size, " ", what);
  }
}

// Written through their data pointers: torch's version counters must still see the change (autograd
// checks them, and the optimizer caches by them).
void bump_versions(const std::vector<at::Tensor>& tensors) {
  for (const auto& t : tensors) {
    if (!t.is_inference()) t.unsafeGetTensorImpl()->bump_version();
  }
}

void check_supported(bool ok) {
  TORCH_CHECK_VALUE(ok, "pride ZeroOneAdam fused step: the tensors do not qualify (CPU, contiguous, one float dtype "
                        "for parameters and gradients, float32 state of the same sizes); check with "
                        "zero_one_adam_fused_supported first");
}

}  // namespace

bool zero_one_adam_fused_supported(const std::vector<at::Tensor>& params,
                                   const std::vector<std::optional<at::Tensor>>& grads,
                                   const std::vector<at::Tensor>& momenta, const std::vector<at::Tensor>& variances,
                                   const std::vector<at::Tensor>& accumulators,
                                   const std::vector<at::Tensor>& anchors) {
  const size_t n = params.size();
  if (grads.size() != n || momenta.size() != n || variances.size() != n || accumulators.size() != n ||
      (!anchors.empty() && anchors.size() != n) || n == 0 || !float_dtype(params[0].scalar_type())) {
    return false;
  }
  const at::ScalarType dtype = params[0].scalar_type();
  for (size_t i = 0; i < n; ++i) {
    const int64_t numel = params[i].numel();
    if (!usable(params[i], dtype, numel)) return false;
    if (grads[i].has_value() && !usable(*grads[i], dtype, numel)) return false;
    for (const auto* state : {&momenta[i], &variances[i], &accumulators[i]}) {
      if (!usable(*state, at::kFloat, numel)) return false;
    }
    if (!anchors.empty() && !usable(anchors[i], at::kFloat, numel)) return false;
  }
  return true;
}

void zero_one_adam_local_step(const std::vector<at::Tensor>& params,
                              const std::vector<std::optional<at::Tensor>>& grads,
                              const std::vector<at::Tensor>& momenta, const std::vector<at::Tensor>& variances,
                              const std::vector<at::Tensor>& accumulators, const std::optional<at::Tensor>& scaled,
                              const bits::AdamLocalStep& step) {
  check_lengths(params.size(), {{"gradients", grads.size()}, {"momenta", momenta.size()},
                                {"variances", variances.size()}, {"accumulators", accumulators.size()}});
  check_supported(zero_one_adam_fused_supported(params, grads, momenta, variances, accumulators, {}));
  int64_t total = 0;
  for (const auto& p : params) total += p.numel();
  float* out = nullptr;
  if (scaled.has_value()) {
    TORCH_CHECK_VALUE(usable(*scaled, at::kFloat, total), "pride ZeroOneAdam fused step: the flat buffer must be a "
                      "contiguous float32 CPU tensor of ", total, " elements, got ", scaled->sizes(), " ",
                      scaled->scalar_type());
    out = scaled->data_ptr<float>();
  }
  const bits::DType dtype = to_sign_dtype(params[0].scalar_type(), "ZeroOneAdam");
  int64_t offset = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const int64_t numel = params[i].numel();
    bits::zero_one_adam_local_step(params[i].data_ptr(), grads[i].has_value() ? grads[i]->data_ptr() : nullptr, dtype,
                                   momenta[i].data_ptr<float>(), variances[i].data_ptr<float>(),
                                   accumulators[i].data_ptr<float>(), size_t(numel), step,
                                   out != nullptr ? out + offset : nullptr);
    offset += numel;
  }
  bump_versions(params);
  bump_versions(momenta);
  if (scaled.has_value()) bump_versions({*scaled});
  else bump_versions(accumulators);
}

void zero_one_adam_sync(const at::Tensor& mean, const std::vector<at::Tensor>& params,
                        const std::vector<at::Tensor>& momenta, const std::vector<at::Tensor>& variances,
                        const std::vector<at::Tensor>& accumulators, const std::vector<at::Tensor>& anchors,
                        const bits::AdamSync& sync) {
  check_lengths(params.size(), {{"momenta", momenta.size()}, {"variances", variances.size()},
                                {"accumulators", accumulators.size()}, {"anchors", anchors.size()}});
  const std::vector<std::optional<at::Tensor>> no_grads(params.size());
  check_supported(zero_one_adam_fused_supported(params, no_grads, momenta, variances, accumulators, anchors));
  int64_t total = 0;
  for (const auto& p : params) total += p.numel();
  TORCH_CHECK_VALUE(usable(mean, at::kFloat, total), "pride ZeroOneAdam fused step: the allreduce result must be a "
                    "contiguous float32 CPU tensor of ", total, " elements, got ", mean.sizes(), " ",
                    mean.scalar_type());
  const bits::DType dtype = to_sign_dtype(params[0].scalar_type(), "ZeroOneAdam");
  const float* u = mean.data_ptr<float>();
  int64_t offset = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const int64_t numel = params[i].numel();
    bits::zero_one_adam_sync(u + offset, variances[i].data_ptr<float>(), momenta[i].data_ptr<float>(),
                             anchors[i].data_ptr<float>(), accumulators[i].data_ptr<float>(), params[i].data_ptr(),
                             dtype, size_t(numel), sync);
    offset += numel;
  }
  bump_versions(params);
  bump_versions(momenta);
  bump_versions(anchors);
  bump_versions(accumulators);
}

}  // namespace pride::torch_plugin
