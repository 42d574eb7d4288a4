#include "torch_plugin/lion_cub_steps.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <vector>

#include "collectives/bits/lion_cub.h"
#include "torch_plugin/tensor_types.h"

namespace pride::torch_plugin {
namespace {

// Elements per task on torch's intra-op threads (the threads its own operations would use), and the
// unit in which Σ|c| is summed: each chunk's eight lanes (lion_cub.h), then the chunks' sums in chunk
// order, so that the scale does not depend on how many threads ran.
constexpr int64_t kChunk = int64_t(1) << 16;

// fn(offset, length) for every chunk of [0, n), spread over torch's intra-op threads.
template <class Fn>
void for_each_chunk(int64_t n, const Fn& fn) {
  at::parallel_for(0, (n + kChunk - 1) / kChunk, 1, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) fn(k * kChunk, std::min(kChunk, n - k * kChunk));
  });
}

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
  const bits::DType dtype = to_sign_dtype(grad.scalar_type(), "Lion Cub step");
  const auto* g = static_cast<const char*>(grad.data_ptr());
  auto* m = static_cast<char*>(momentum.data_ptr());
  float* out = c.data_ptr<float>();
  const int64_t size = grad.element_size(), n = grad.numel();
  std::vector<bits::InterpolationStats> parts(size_t((n + kChunk - 1) / kChunk));
  for_each_chunk(n, [&](int64_t offset, int64_t length) {
    parts[size_t(offset / kChunk)] = bits::lion_cub_interpolate(g + offset * size, m + offset * size, dtype,
                                                                size_t(length), beta1, beta2, out + offset);
  });
  double abs_sum = 0.0;
  float abs_max = 0.0f;
  for (const auto& part : parts) {
    abs_sum += part.abs_sum;
    abs_max = std::max(abs_max, part.abs_max);
  }
  bump_version(momentum);
  bump_version(c);
  return {abs_sum, double(abs_max)};
}

void lion_cub_signs(const at::Tensor& c, const at::Tensor& q) {
  check_buffer(c, at::kFloat, c.numel(), "c");
  check_buffer(q, at::kChar, c.numel(), "q");
  const float* in = c.data_ptr<float>();
  int8_t* out = q.data_ptr<int8_t>();
  for_each_chunk(c.numel(), [&](int64_t offset, int64_t length) {
    bits::lion_cub_signs(in + offset, size_t(length), out + offset);
  });
  bump_version(q);
}

void lion_cub_levels(const at::Tensor& c, const at::Tensor& q, double scale, int64_t max_level) {
  check_buffer(c, at::kFloat, c.numel(), "c");
  check_buffer(q, at::kChar, c.numel(), "q");
  TORCH_CHECK_VALUE(max_level >= 1 && max_level <= 127, "pride Lion Cub step: max_level must be in [1, 127], got ",
                    max_level);
  const float scale32 = static_cast<float>(scale);
  TORCH_CHECK_VALUE(scale32 > 0.0f, "pride Lion Cub step: the scale must be > 0, got ", scale);
  const float* in = c.data_ptr<float>();
  int8_t* out = q.data_ptr<int8_t>();
  for_each_chunk(c.numel(), [&](int64_t offset, int64_t length) {
    bits::lion_cub_levels(in + offset, size_t(length), scale32, int(max_level), out + offset);
  });
  bump_version(q);
}

void lion_cub_apply_sign(const at::Tensor& param, const at::Tensor& total, double lr, double weight_decay) {
  TORCH_CHECK_VALUE(cpu_contiguous(param) && float_dtype(param.scalar_type()),
                    "pride Lion Cub step: the parameter must be a contiguous CPU float32 or bfloat16 tensor");
  check_buffer(total, at::kChar, param.numel(), "the sums");
  const bits::DType dtype = to_sign_dtype(param.scalar_type(), "Lion Cub step");
  auto* x = static_cast<char*>(param.data_ptr());
  const int8_t* sums = total.data_ptr<int8_t>();
  const int64_t size = param.element_size();
  for_each_chunk(param.numel(), [&](int64_t offset, int64_t length) {
    bits::lion_cub_apply_sign(x + offset * size, dtype, size_t(length), sums + offset, lr, weight_decay);
  });
  bump_version(param);
}

}  // namespace pride::torch_plugin
