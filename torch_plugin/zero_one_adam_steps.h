// 0/1 Adam's fused frozen-variance steps (collectives/bits/compressed_adam.h) over a parameter group's
// CPU tensors: what pride.optim.ZeroOneAdam calls instead of its torch operations when every tensor
// qualifies (zero_one_adam_fused_supported).
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <vector>

#include "collectives/bits/compressed_adam.h"

namespace pride::torch_plugin {

// Whether the fused steps take these tensors: CPU, contiguous, parameters of one float dtype with
// gradients of the same dtype (or none), float32 state of the parameters' sizes.
bool zero_one_adam_fused_supported(const std::vector<at::Tensor>& params,
                                   const std::vector<std::optional<at::Tensor>>& grads,
                                   const std::vector<at::Tensor>& momenta, const std::vector<at::Tensor>& variances,
                                   const std::vector<at::Tensor>& accumulators,
                                   const std::vector<at::Tensor>& anchors);

// A local step of every tensor. With `scaled` (float32, the group's flat buffer of Σ numel elements)
// it is a synchronisation step: tensor i's acc·(sqrt(v) + eps) goes to its slice of `scaled`.
void zero_one_adam_local_step(const std::vector<at::Tensor>& params,
                              const std::vector<std::optional<at::Tensor>>& grads,
                              const std::vector<at::Tensor>& momenta, const std::vector<at::Tensor>& variances,
                              const std::vector<at::Tensor>& accumulators, const std::optional<at::Tensor>& scaled,
                              const bits::AdamLocalStep& step);

// The synchronisation's second half from `mean`, the compressed allreduce's result over `scaled`.
void zero_one_adam_sync(const at::Tensor& mean, const std::vector<at::Tensor>& params,
                        const std::vector<at::Tensor>& momenta, const std::vector<at::Tensor>& variances,
                        const std::vector<at::Tensor>& accumulators, const std::vector<at::Tensor>& anchors,
                        const bits::AdamSync& sync);

}  // namespace pride::torch_plugin
