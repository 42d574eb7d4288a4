#include "torch_plugin/lion_cub_steps.h"

#include <c10/util/Exception.h>

#include "collectives/bits/lion_cub.h"
#include "torch_plugin/tensor_types.h"

namespace pride::torch_plugin {
namespace {

// float16 keeps torch's operations (collectives/bits/lion_cub.h says why).
bool float_dtype(at::ScalarType t) { return t == at::kFloat || t == at::kBFloat16; }

bool cpu_contiguous(const at::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.layout() == at::kStrided && t.is_contiguous();
}

void check_buffer(const at::Tensor& t, at::ScalarType dtype, int64_t numel, const char* what) {
  TORCH_CHECK_VALUE(cpu_contiguous(t) && t.scalar_type() == dtype && t.numel() == numel, "pride Lion Cub step: ",
                    what, " must be a contiguous CPU ", dtype, " tensor of ", numel, " elements, got ",
                    t.defined() ? t.toString() : std::string("None"), " of ", t.defined() ? t.numel() : 0,
                    " elements on ", t.defined() ? t.device().str() : std::string("-"));
}

// Written through their data pointers: torch's version counters must still see the change (autograd
// checks them).
void bump_version(const at::Tensor& t) {
  if (!t.is_inference()) t.unsafeGetTensorImpl()->bump_version();
}

}  // namespace

bool lion_cub_fused_supported(const at::Tensor& param, const at::Tensor& grad, const at::Tensor& momentum) {
  if (!cpu_contiguous(param) || !float_dtype(param.scalar_type())) return false;
  for (const auto* t : {&grad, &momentum}) {
    if (!cpu_contiguous(*t) || t->scalar_type() != param.scalar_type() || t->numel() != param.numel()) return false;
  }
  return true;
}

std::pair<double, double> lion_cub_interpolate(const at::Tensor& grad, const at::Tensor& momentum, double beta1,
                                               double beta2, const at::Tensor& c) {
  TORCH_CHECK_VALUE(cpu_contiguous(grad) && float_dtype(grad.scalar_type()),
                    "pride Lion Cub step: the gradient must be a contiguous CPU float32 or bfloat16 tensor");
  check_buffer(momentum, grad.scalar_type(), grad.numel(), "the momentum");
  check_buffer(c, at::kFloat, grad.numel(), "c");
  const auto stats = bits::lion_cub_interpolate(grad.data_ptr(), momentum.data_ptr(),
                                                to_sign_dtype(grad.scalar_type(), "Lion Cub step"),
                                                size_t(grad.numel()), beta1, beta2, c.data_ptr<float>());
  bump_version(momentum);
  bump_version(c);
  return {stats.abs_sum, double(stats.abs_max)};
}

void lion_cub_signs(const at::Tensor& c, const at::Tensor& q) {
  check_buffer(c, at::kFloat, c.numel(), "c");
  check_buffer(q, at::kChar, c.numel(), "q");
  bits::lion_cub_signs(c.data_ptr<float>(), size_t(c.numel()), q.data_ptr<int8_t>());
  bump_version(q);
}

void lion_cub_levels(const at::Tensor& c, const at::Tensor& q, double scale, int64_t max_level) {
  check_buffer(c, at::kFloat, c.numel(), "c");
  check_buffer(q, at::kChar, c.numel(), "q");
  TORCH_CHECK_VALUE(max_level >= 1 && max_level <= 127, "pride Lion Cub step: max_level must be in [1, 127], got ",
                    max_level);
  const float scale32 = static_cast<float>(scale);
  TORCH_CHECK_VALUE(scale32 > 0.0f, "pride Lion Cub step: the scale must be > 0, got ", scale);
  bits::lion_cub_levels(c.data_ptr<float>(), size_t(c.numel()), scale32, int(max_level), q.data_ptr<int8_t>());
  bump_version(q);
}

void lion_cub_apply_sign(const at::Tensor& param, const at::Tensor& total, double lr, double weight_decay) {
  TORCH_CHECK_VALUE(cpu_contiguous(param) && float_dtype(param.scalar_type()),
                    "pride Lion Cub step: the parameter must be a contiguous CPU float32 or bfloat16 tensor");
  check_buffer(total, at::kChar, param.numel(), "the sums");
  bits::lion_cub_apply_sign(param.data_ptr(), to_sign_dtype(param.scalar_type(), "Lion Cub step"),
                            size_t(param.numel()), total.data_ptr<int8_t>(), lr, weight_decay);
  bump_version(param);
}

}  // namespace pride::torch_plugin
