// Lion Cub's fused CPU passes (collectives/bits/lion_cub.h) over one parameter's tensors: what
// pride.optim.lion_cub.int8_step calls instead of its torch operations when lion_cub_fused_supported says
// the tensors qualify. CUDA tensors keep the torch operations (they run on the device as they are).
// Each pass runs on torch's intra-op threads in chunks of 2^16 elements; Σ|c| adds the chunks' sums in
// chunk order, so its value does not depend on the number of threads.
#pragma once

#include <ATen/core/Tensor.h>

#include <utility>

namespace pride::torch_plugin {

// Whether the fused passes take these tensors: CPU, contiguous, one dtype (float32 or bfloat16; float16
// keeps torch's operations) and one size for the parameter, its gradient and its momentum.
bool lion_cub_fused_supported(const at::Tensor& param, const at::Tensor& grad, const at::Tensor& momentum);

// c (float32, the gradient's numel) ← β1·m + (1−β1)·g with NaN made 0; m ← β2·m + (1−β2)·g. Returns
// (Σ|c| in double, summed as above; max|c|).
std::pair<double, double> lion_cub_interpolate(const at::Tensor& grad, const at::Tensor& momentum, double beta1,
                                               double beta2, const at::Tensor& c);

// q (int8, c's numel) ← sign(c).
void lion_cub_signs(const at::Tensor& c, const at::Tensor& q);
// q ← clamp(round(c / scale · max_level/2), −max_level, max_level) in float32.
void lion_cub_levels(const at::Tensor& c, const at::Tensor& q, double scale, int64_t max_level);

// param ← param·(1 − lr·λ) − lr·sign(total), total an int8 tensor of the parameter's numel.
void lion_cub_apply_sign(const at::Tensor& param, const at::Tensor& total, double lr, double weight_decay);

}  // namespace pride::torch_plugin
