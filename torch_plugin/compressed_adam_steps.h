// 1-bit Adam's and 0/1 Adam's fused frozen-variance steps (collectives/bits/compressed_adam.h) over a
// parameter group's tensors: what pride.optim.OneBitAdam and ZeroOneAdam call instead of their torch
// operations when every tensor qualifies (compressed_adam_fused_supported), on the CPU or a GPU. A
// group's tensors are processed in order, tensor i at its offset in the group's flat float32 buffer (the compressed
// allreduce's input and result).
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <vector>

#include "collectives/bits/compressed_adam.h"

namespace pride::torch_plugin {

using Tensors = std::vector<at::Tensor>;
using MaybeTensors = std::vector<std::optional<at::Tensor>>;

// Whether the fused steps take these tensors: all on one device (CPU, or a GPU where pride is built with
// CUDA: the same arithmetic's CUDA kernels on the current stream), contiguous, parameters of one float
// dtype with gradients of the same dtype (or none), every list in `states` float32 tensors of the
// parameters' sizes.
bool compressed_adam_fused_supported(const Tensors& params, const MaybeTensors& grads,
                                     const std::vector<Tensors>& states);

// 0/1 Adam's local step of every tensor. With `scaled` (the group's flat buffer) it is a
// synchronisation step: tensor i's acc·(sqrt(v) + eps) goes to its slice of `scaled`.
void zero_one_adam_local_step(const Tensors& params, const MaybeTensors& grads, const Tensors& momenta,
                              const Tensors& variances, const Tensors& accumulators,
                              const std::optional<at::Tensor>& scaled, const bits::AdamLocalStep& step);

// 0/1 Adam's synchronisation, second half, from `mean`: the compressed allreduce's result over `scaled`.
void zero_one_adam_sync(const at::Tensor& mean, const Tensors& params, const Tensors& momenta, const Tensors& variances,
                        const Tensors& accumulators, const Tensors& anchors, const bits::AdamSync& sync);

// 1-bit Adam's compressed step, first half: every tensor's momentum, also into its slice of `out`.
void onebit_adam_momentum(const Tensors& params, const MaybeTensors& grads, const Tensors& momenta,
                          const at::Tensor& out, double beta1);

// 1-bit Adam's compressed step, second half, from `mean`: the momenta and the parameters.
void onebit_adam_apply(const at::Tensor& mean, const Tensors& params, const Tensors& momenta, const Tensors& variances,
                       const bits::AdamApply& apply);

}  // namespace pride::torch_plugin
