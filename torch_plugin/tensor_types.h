// Mapping torch's tensors, dtypes and reduce ops onto the engine's, and the argument checks that
// c10d backends perform (in torch's words where torch has them). Checks run on the calling thread,
// before anything is queued or sent, so a bad call leaves the group usable.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <ostream>
#include <string>
#include <vector>

#include "collectives/bits/kernels.h"
#include "collectives/engine/standard/collectives.h"

namespace pride::torch_plugin {

// Who is checking, for the messages' "pride <collective> (rank R): ...": the collective, and this
// rank where a group is known (the backend's methods pass it; the optimizers' free functions have none).
struct CallSite {
  const char* collective;
  int rank = -1;
  CallSite(const char* collective) : collective(collective) {}  // NOLINT: implicit, for the rank-less callers
  CallSite(const char* collective, int rank) : collective(collective), rank(rank) {}
};
std::ostream& operator<<(std::ostream& out, const CallSite& site);

ScalarType to_scalar_type(at::ScalarType type, CallSite site);  // throws ValueError on unsupported
// The collectives that only move bytes (broadcast, the gathers, scatter, the all-to-alls) take any dtype
// of whole bytes per element, the float8 ones among them, as Gloo does; throws TypeError otherwise.
void check_movable_dtype(at::ScalarType type, CallSite site);
bits::DType to_sign_dtype(at::ScalarType type, CallSite site);  // float32/bf16/fp16 only
ReduceOp to_reduce_op(const c10d::ReduceOp& op, ScalarType type, CallSite site);

// A dense CPU tensor (strided, on CPU). Non-contiguous tensors are accepted; the backend stages them.
void check_cpu_tensor(const at::Tensor& t, CallSite site);
void check_single_tensor(const std::vector<at::Tensor>& tensors, CallSite site);
void check_same_type_and_size(const at::Tensor& reference, const std::vector<at::Tensor>& tensors, CallSite site,
                              const char* what);
void check_root(int root, int size, CallSite site);

size_t nbytes(const at::Tensor& t);

}  // namespace pride::torch_plugin
