// Everything in pride that depends on which torch release it is built against, in one place.
// Built and tested here against torch 2.14; the GPU machines run torch 2.11. Both have C++20 headers,
// c10d::Backend with the *_base/legacy collective names we override, and c10d::Work::finish();
// scripts/check_torch_compat.sh 2.11.0 compiles every torch-facing file against 2.11's headers.
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <string>
#include <vector>

namespace pride::torch_compat {

// A completed-later Future of a list of tensors, as c10d's Work::getFuture() promises. CPU tensors
// need no device list; CUDA ones name their (indexed) device, so that the Future records events on
// the stream current when it completes and waiting on it orders the waiter's stream after them.
inline c10::intrusive_ptr<c10::ivalue::Future> make_tensor_list_future(std::vector<c10::Device> devices = {}) {
  return c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()), std::move(devices));
}

}  // namespace pride::torch_compat
