#include "torch_plugin/pride_work.h"

#include "torch_plugin/callback_threads.h"

#include <string_view>

namespace pride::torch_plugin {

PrideWork::PrideWork(int rank, c10d::OpType type, const char* profiling_title, std::vector<at::Tensor> outputs,
                     std::shared_ptr<DeviceCompletion> device)
    : c10d::Work(rank, type, profiling_title), outputs_(std::move(outputs)), device_(std::move(device)) {
  if (device_) future_ = torch_compat::make_tensor_list_future({device_->device()});
  const std::string_view title = profiling_title != nullptr ? profiling_title : "collective";
  name_ = std::string(title.substr(title.rfind(':') == std::string_view::npos ? 0 : title.rfind(':') + 1));
}

c10::intrusive_ptr<c10::ivalue::Future> PrideWork::getFuture() {
  std::lock_guard<std::mutex> lock(future_mutex_);
  if (!future_) {
    future_ = torch_compat::make_tensor_list_future();
    // Already ended: complete it here, before anyone can add a callback (so none runs under the lock).
    if (ended_ && end_error_) future_->setError(end_error_);
    if (ended_ && !end_error_) future_->markCompleted(c10::IValue(outputs_));
  }
  return future_;
}

void PrideWork::complete(std::exception_ptr error) {
  if (!device_) {
    c10::intrusive_ptr<c10::ivalue::Future> future;
    {
      std::lock_guard<std::mutex> lock(future_mutex_);
      ended_ = true;
      end_error_ = error;
      future = future_;
    }
    if (!future) {
      finish(error);  // a getFuture() from now on returns a completed Future
      return;
    }
    // The Future first, then the Work (Work::wait() returning implies the Future's value is visible), on
    // a thread of CallbackThreads: the Future's callbacks run there.
    CallbackThreads::instance().post([work = c10::intrusive_ptr<PrideWork>::reclaim_copy(this), future, error] {
      std::exception_ptr failed = error;
      try {
        if (error) {
          future->setError(error);
        } else {
          future->markCompleted(c10::IValue(work->outputs_));
        }
      } catch (...) {
        failed = std::current_exception();
        future->setErrorIfNeeded(failed);
      }
      work->finish(failed);
    });
    return;
  }
  // CUDA: the Future first, its events recorded on pride's stream right after the operation, by the
  // worker (its callbacks run here too; docs/design.md).
  auto mark = [&] {
    if (error) {
      future_->setError(error);
    } else {
      future_->markCompleted(c10::IValue(outputs_));
    }
  };
  try {
    if (!error) {
      device_->run_on_stream(mark);
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
