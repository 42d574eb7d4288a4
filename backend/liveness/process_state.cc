#include "backend/liveness/process_state.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

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

}  // namespace pride
