// The device side of an operation, as its Work sees it (CUDA today, see cuda_ordering.h). Kept free of
// CUDA headers so that the Work and the backend compile the same way with and without CUDA.
#pragma once

#include <c10/core/Device.h>

#include <functional>
#include <vector>

namespace pride::torch_plugin {

class DeviceCompletion {
 public:
  virtual ~DeviceCompletion() = default;
  // Caller's thread: its current stream waits for the operation's end, without blocking the host.
  virtual void block_current_stream() = 0;
  // Whether the device has finished the operation's work (false before the host side finished).
  virtual bool done() = 0;
  // Runs fn with pride's stream as the current stream of the device, so that a Future completed in fn
  // records its events there (c10::ivalue::Future's device semantics).
  virtual void run_on_stream(const std::function<void()>& fn) = 0;
  virtual c10::Device device() const = 0;
};

}  // namespace pride::torch_plugin
