#include "torch_plugin/pride_work.h"

#include <string_view>

namespace pride::torch_plugin {

PrideWork::PrideWork(int rank, c10d::OpType type, const char* profiling_title, std::vector<at::Tensor> outputs,
                     std::shared_ptr<DeviceCompletion> device)
    : c10d::Work(rank, type, profiling_title), outputs_(std::move(outputs)), device_(std::move(device)),
      future_(torch_compat::make_tensor_list_future(device_ ? std::vector<c10::Device>{device_->device()}
                                                            : std::vector<c10::Device>{})) {
  const std::string_view title = profiling_title != nullptr ? profiling_title : "collective";
  name_ = std::string(title.substr(title.rfind(':') == std::string_view::npos ? 0 : title.rfind(':') + 1));
}

void PrideWork::complete(std::exception_ptr error) {
  // The Future first: Work::wait() returning must imply the Future's value is visible.
  auto mark = [&] {
    if (error) {
      future_->setError(error);
    } else {
      future_->markCompleted(c10::IValue(outputs_));
    }
  };
  try {
    if (device_ && !error) {
      device_->run_on_stream(mark);  // the Future's events go on pride's stream, after the operation
    } else {
      mark();
    }
  } catch (...) {
    // Recording the Future's CUDA events (or a callback run inline) failed: the Work fails with that,
    // and the worker thread carries on.
    error = std::current_exception();
    future_->setErrorIfNeeded(error);
  }
  finish(error);
}

void PrideWork::synchronize() {
  c10d::Work::synchronize();
  if (device_) device_->block_current_stream();
}

bool PrideWork::wait(std::chrono::milliseconds timeout) {
  if (timeout != ::kNoTimeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    const bool ended = cv_.wait_for(lock, timeout, [this] { return completed_; });
    TORCH_CHECK(ended, "pride rank ", rank_, ": ", description_.empty() ? name_ : description_,
                " did not complete within wait()'s timeout of ", timeout.count(),
                " ms; it goes on, and a later wait() can still succeed");
  }
  return c10d::Work::wait(::kNoTimeout);  // completed: rethrows its error, then synchronize()
}

// A failed operation never reaches its end event: it is complete once the host side has failed.
bool PrideWork::isCompleted() {
  return c10d::Work::isCompleted() && (!device_ || !isSuccess() || device_->done());
}

}  // namespace pride::torch_plugin
