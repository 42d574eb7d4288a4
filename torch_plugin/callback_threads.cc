#include "torch_plugin/callback_threads.h"

#include <unistd.h>

#include <atomic>
#include <thread>
#include <utility>

namespace pride::torch_plugin {

CallbackThreads& CallbackThreads::instance() {
  // A process forked from one with threads here has none of them (fork copies only the calling thread),
  // though it inherits the count of idle ones, and perhaps a mutex some thread held: it starts afresh.
  // Never destroyed (callback_threads.h); one left behind by a fork is never used again.
  static std::atomic<CallbackThreads*> threads{new CallbackThreads()};
  CallbackThreads* current = threads.load();
  if (current->pid_ != getpid()) {
    static std::mutex replacing;
    std::lock_guard<std::mutex> lock(replacing);
    current = threads.load();
    if (current->pid_ != getpid()) threads.store(current = new CallbackThreads());
  }
  return *current;
}

void CallbackThreads::post(std::function<void()> task) {
  std::unique_lock<std::mutex> lock(mutex_);
  tasks_.push_back(std::move(task));
  if (tasks_.size() <= idle_) {
    ready_.notify_one();
    return;
  }
  const size_t position = tasks_.size() - 1;
  lock.unlock();
  try {
    std::thread([this] { run(); }).detach();
  } catch (...) {
    lock.lock();
    if (threads_ > 0) return;  // queued: a thread takes it when it is free
    // No thread takes anything: nothing has left the queue since, so the task is where it was put.
    tasks_.erase(tasks_.begin() + std::ptrdiff_t(position));
    throw;
  }
}

void CallbackThreads::run() {
  // Below no autograd or inference-mode guard: callbacks compute with the caller's defaults.
  std::unique_lock<std::mutex> lock(mutex_);
  ++threads_;  // before it takes a task: with none counted, nothing has left the queue (post)
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
