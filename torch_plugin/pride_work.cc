#include "torch_plugin/pride_work.h"

#include "torch_plugin/callback_threads.h"

#include <string_view>

namespace pride::torch_plugin {

PrideWork::PrideWork(int rank, c10d::OpType type, const char* profiling_title, std::vector<at::Tensor> outputs,
                     std::shared_ptr<DeviceCompletion> device)
    : c10d::Work(rank, type, profiling_title), outputs_(std::move(outputs)), device_(std::move(device)) {
  const std::string_view title = profiling_title != nullptr ? profiling_title : "collective";
  name_ = std::string(title.substr(title.rfind(':') == std::string_view::npos ? 0 : title.rfind(':') + 1));
}

c10::intrusive_ptr<c10::ivalue::Future> PrideWork::getFuture() {
  std::lock_guard<std::mutex> lock(future_mutex_);
  if (!future_) {
    future_ = device_ ? torch_compat::make_tensor_list_future({device_->device()})
                      : torch_compat::make_tensor_list_future();
    // Already ended: complete it here, before anyone can add a callback (so none runs under the lock).
    if (ended_) mark_future(*future_, end_error_);
  }
  return future_;
}

std::exception_ptr PrideWork::mark_future(c10::ivalue::Future& future, std::exception_ptr error) {
  try {
    if (error) {
      future.setError(error);
    } else if (device_) {
      // Its CUDA events go on a stream that waits for the operation's end event (device_completion.h).
      device_->run_after_end([&] { future.markCompleted(c10::IValue(outputs_)); });
    } else {
      future.markCompleted(c10::IValue(outputs_));
    }
  } catch (...) {
    // Recording the Future's CUDA events failed: the Future, and the Work if it has not ended, fail
    // with that.
    error = std::current_exception();
    future.setErrorIfNeeded(error);
  }
  return error;
}

void PrideWork::complete(std::exception_ptr error) {
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
  // a thread of CallbackThreads: the Future's callbacks run there, never on the worker, which alone runs
  // the group's operations (a callback may wait for one). CUDA operations too: the Future's events
  // then wait for this operation's end event on a stream of their own.
  auto hand_over = [work = c10::intrusive_ptr<PrideWork>::reclaim_copy(this), future, error] {
    work->finish(work->mark_future(*future, error));
  };
  try {
    CallbackThreads::instance().post(std::move(hand_over));
  } catch (...) {
    // No thread can run it (the system refused to start one, and none exists): fail the Future and the
    // Work with that, rather than leave wait() blocked and the exception loose on the worker. Not run
    // here: a callback that waits for a later operation would wait for this worker forever.
    const std::exception_ptr refused = std::current_exception();
    future->setErrorIfNeeded(refused);
    finish(refused);
  }
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
