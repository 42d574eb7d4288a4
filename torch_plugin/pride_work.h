// The Work handle of a pride operation: completed by the backend's worker thread, in issue order,
// with the operation's output tensors as its Future's value (or its error). An operation on CUDA
// tensors also has a DeviceCompletion: wait() and synchronize() then make the caller's current stream
// wait for the operation's end event (ProcessGroupNCCL's rule) instead of only the host.
#pragma once

#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "torch_plugin/device_completion.h"
#include "torch_plugin/torch_compat.h"

namespace pride::torch_plugin {

class PrideWork : public c10d::Work {
 public:
  PrideWork(int rank, c10d::OpType type, const char* profiling_title, std::vector<at::Tensor> outputs,
            std::shared_ptr<DeviceCompletion> device = nullptr);

  // c10d::Work::wait() waits for the host side, then calls synchronize(): that is where the caller's
  // stream is made to wait for the device side.
  void synchronize() override;
  bool isCompleted() override;
  // wait(timeout) as c10d's, with an error that names the rank and the operation (c10d's says only
  // "Operation timed out!"). The operation goes on: a later wait() can still succeed.
  bool wait(std::chrono::milliseconds timeout = ::kNoTimeout) override;

  // The Future is made when first asked for: the worker then completes it through CallbackThreads
  // (callback_threads.h), so that its callbacks never run on the worker, and a Work nobody asked the
  // Future of costs no handover (a later getFuture() returns it completed). An operation on CUDA
  // tensors gives a Future of its device, whose events wait for the operation's end event.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  std::vector<at::Tensor> result() override { return outputs_; }
  int sourceRank() const override { return source_rank_; }

  // Called once by the worker thread: marks the Work and its Future done (or failed).
  void complete(std::exception_ptr error = nullptr);
  void set_source_rank(int rank) { source_rank_ = rank; }
  std::vector<at::Tensor>& outputs() { return outputs_; }
  // What the caller called, for errors: the profiling title less its "pride:" ("all_to_all_single").
  const std::string& name() const { return name_; }
  // The operation in full where the name is not enough ("recv (tag 5) from rank 1"); set by its maker
  // before the Work leaves it.
  void set_description(std::string description) { description_ = std::move(description); }

 private:
  std::vector<at::Tensor> outputs_;
  std::shared_ptr<DeviceCompletion> device_;
  // Guards the Future's making and the host side's end (ended_, end_error_) against each other.
  std::mutex future_mutex_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  bool ended_ = false;
  std::exception_ptr end_error_;
  // Completes `future` with the outputs (after the device's end, for CUDA) or `error`; returns the error
  // the Work ends with (`error`, or the failure to complete the Future).
  std::exception_ptr mark_future(c10::ivalue::Future& future, std::exception_ptr error);
  int source_rank_ = -1;
  std::string name_;
  std::string description_;
};

}  // namespace pride::torch_plugin
