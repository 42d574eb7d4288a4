// Whether a process on this host is still running. kill(pid, 0) is not enough: it succeeds on a
// zombie, a process that has exited but that its parent has not reaped yet, which is exactly what a
// rank killed under a launcher that has not called wait() yet looks like.
//
// ProcessWatch holds a pidfd (pidfd_open, Linux 5.3): it becomes readable when the process exits,
// zombie or not, and it names that one process, so a pid reused by a later process cannot pass for
// the peer. Where the kernel (or a seccomp filter) refuses pidfd_open, it falls back to
// /proc/<pid>/stat's state field ('Z' zombie, 'X' dead), read by process_state().
#pragma once

#include <sys/types.h>

namespace pride {

enum class ProcessState { kRunning, kZombie, kGone };

// From /proc/<pid>/stat (and kill(pid, 0) for a pid that no longer exists).
ProcessState process_state(pid_t pid);

class ProcessWatch {
 public:
  ProcessWatch() = default;
  explicit ProcessWatch(pid_t pid);  // pid 0: watches nothing, always kRunning
  ~ProcessWatch();
  ProcessWatch(ProcessWatch&& other) noexcept;
  ProcessWatch& operator=(ProcessWatch&& other) noexcept;
  ProcessWatch(const ProcessWatch&) = delete;
  ProcessWatch& operator=(const ProcessWatch&) = delete;

  pid_t pid() const { return pid_; }
  bool uses_pidfd() const { return pidfd_ >= 0; }
  // One poll of the pidfd (or one read of /proc): cheap enough for every liveness interval.
  ProcessState state() const;

 private:
  pid_t pid_ = 0;
  int pidfd_ = -1;
};

}  // namespace pride
