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
  // Runs fn, on the calling thread, with a current stream of the device that waits for the operation's
  // end (and for nothing queued on pride's stream after it): a Future completed in fn records its
  // events there (c10::ivalue::Future's device semantics), so its callbacks and waiters see the
  // operation's results, whichever thread completes it and however far pride's stream has got since.
  virtual void run_after_end(const std::function<void()>& fn) = 0;
  virtual c10::Device device() const = 0;
};

}  // namespace pride::torch_plugin
