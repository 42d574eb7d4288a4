// Mapping torch's tensors, dtypes and reduce ops onto the engine's, and the argument checks that
// c10d backends perform (in torch's words where torch has them). Checks run on the calling thread,
// before anything is queued or sent, so a bad call leaves the group usable.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <string>
#include <vector>

#include "collectives/bits/kernels.h"
#include "collectives/engine/standard/collectives.h"

namespace pride::torch_plugin {

ScalarType to_scalar_type(at::ScalarType type, const char* collective);  // throws ValueError on unsupported
bits::DType to_sign_dtype(at::ScalarType type, const char* collective);  // float32/bf16/fp16 only
ReduceOp to_reduce_op(const c10d::ReduceOp& op, ScalarType type, const char* collective);

// A dense CPU tensor (strided, on CPU). Non-contiguous tensors are accepted; the backend stages them.
void check_cpu_tensor(const at::Tensor& t, const char* collective);
void check_single_tensor(const std::vector<at::Tensor>& tensors, const char* collective);
void check_same_type_and_size(const at::Tensor& reference, const std::vector<at::Tensor>& tensors,
                              const char* collective, const char* what);
void check_root(int root, int size, const char* collective);

size_t nbytes(const at::Tensor& t);

}  // namespace pride::torch_plugin
