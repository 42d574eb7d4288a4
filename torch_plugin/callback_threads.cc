#include "torch_plugin/callback_threads.h"

#include <thread>
#include <utility>

namespace pride::torch_plugin {

CallbackThreads& CallbackThreads::instance() {
  static CallbackThreads* threads = new CallbackThreads();  // never destroyed (callback_threads.h)
  return *threads;
}

void CallbackThreads::post(std::function<void()> task) {
  std::unique_lock<std::mutex> lock(mutex_);
  tasks_.push_back(std::move(task));
  if (tasks_.size() > idle_) {
    lock.unlock();
    std::thread([this] { run(); }).detach();
  } else {
    ready_.notify_one();
  }
}

void CallbackThreads::run() {
  // Below no autograd or inference-mode guard: callbacks compute with the caller's defaults.
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (tasks_.empty()) {
      ++idle_;
      ready_.wait(lock, [this] { return !tasks_.empty(); });
      --idle_;
    }
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    try {
      task();  // completes a Future; its callbacks' errors go to their own Futures (c10::ivalue::Future)
    } catch (...) {
      // A task catches what it can report; nothing else may end the thread (std::terminate).
    }
    task = nullptr;
    lock.lock();
  }
}

}  // namespace pride::torch_plugin
