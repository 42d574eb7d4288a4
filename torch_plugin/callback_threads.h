// Where the Futures of pride's CPU operations are completed, so that their callbacks (Future.then,
// addCallback) run there and never on a group's worker thread. A callback may wait for another
// operation of the same group: torch's PowerSGD DDP hook waits, inside a callback, for the allreduce
// it has just issued. On the worker, which alone runs the group's operations, that wait never ended.
// Every posted task gets a thread of its own when the idle ones are fewer than the tasks waiting, so a
// callback that blocks holds up nothing posted after it; threads are made only then and kept for
// later tasks (one or two in steady use).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>

#include <sys/types.h>
#include <unistd.h>

namespace pride::torch_plugin {

class CallbackThreads {
 public:
  // The process's one instance. It is never destroyed: its threads may be running callbacks (Python's
  // among them) while the process exits, as torch's own pools may.
  static CallbackThreads& instance();

  // Runs `task` on a thread of these: an idle one, or a new one. Where no new thread can be started,
  // an existing one takes the task when it is free; with none at all, the task is dropped and the
  // error thrown (the caller reports it; the task never runs).
  void post(std::function<void()> task);

 private:
  CallbackThreads() : pid_(getpid()) {}
  void run();

  const pid_t pid_;  // the process whose threads these are

  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> tasks_;
  size_t idle_ = 0;
  size_t threads_ = 0;
};

}  // namespace pride::torch_plugin
