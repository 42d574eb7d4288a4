#include "backend/liveness/process_state.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

namespace pride {

ProcessState process_state(pid_t pid) {
  if (kill(pid, 0) == -1 && errno == ESRCH) return ProcessState::kGone;
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%ld/stat", static_cast<long>(pid));
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? ProcessState::kGone : ProcessState::kRunning;  // no /proc: trust kill()
  char buf[512];
  const ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return ProcessState::kRunning;
  buf[n] = '\0';
  // "pid (comm) S ...": comm may hold spaces and parentheses, so the state follows the last ')'.
  const char* paren = std::strrchr(buf, ')');
  if (paren == nullptr || paren[1] != ' ') return ProcessState::kRunning;
  const char state = paren[2];
  if (state == 'Z') return ProcessState::kZombie;
  if (state == 'X' || state == 'x') return ProcessState::kGone;
  return ProcessState::kRunning;
}

namespace {

int open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  // The raw system call: glibc has had a wrapper only since 2.36, and the kernel is what matters.
  const long fd = syscall(SYS_pidfd_open, pid, 0);
  if (fd >= 0) {
    fcntl(int(fd), F_SETFD, FD_CLOEXEC);  // pidfds are close-on-exec already; say so anyway
    return int(fd);
  }
#else
  (void)pid;
#endif
  return -1;  // ENOSYS (kernel before 5.3), EPERM (seccomp), ESRCH (already gone: /proc tells)
}

}  // namespace

ProcessWatch::ProcessWatch(pid_t pid) : pid_(pid), pidfd_(pid > 0 ? open_pidfd(pid) : -1) {}

ProcessWatch::~ProcessWatch() {
  if (pidfd_ >= 0) close(pidfd_);
}

ProcessWatch::ProcessWatch(ProcessWatch&& other) noexcept
    : pid_(std::exchange(other.pid_, 0)), pidfd_(std::exchange(other.pidfd_, -1)) {}

ProcessWatch& ProcessWatch::operator=(ProcessWatch&& other) noexcept {
  if (this != &other) {
    if (pidfd_ >= 0) close(pidfd_);
    pid_ = std::exchange(other.pid_, 0);
    pidfd_ = std::exchange(other.pidfd_, -1);
  }
  return *this;
}

ProcessState ProcessWatch::state() const {
  if (pid_ <= 0) return ProcessState::kRunning;
  if (pidfd_ < 0) return process_state(pid_);
  pollfd p{pidfd_, POLLIN, 0};
  const int ready = poll(&p, 1, 0);
  if (ready <= 0 || (p.revents & (POLLIN | POLLHUP)) == 0) return ProcessState::kRunning;
  // Exited. /proc only refines the message: a zombie still has its entry; a reaped process has none,
  // or its pid already belongs to another process, which the pidfd is not fooled by.
  return process_state(pid_) == ProcessState::kZombie ? ProcessState::kZombie : ProcessState::kGone;
}

}  // namespace pride
