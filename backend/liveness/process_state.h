// Whether a process on this host is still running. kill(pid, 0) is not enough: it succeeds on a
// zombie, a process that has exited but that its parent has not reaped yet, which is exactly what a
// rank killed under a launcher that has not called wait() yet looks like. /proc/<pid>/stat's state
// field tells them apart ('Z' zombie, 'X' dead).
#pragma once

#include <sys/types.h>

namespace pride {

enum class ProcessState { kRunning, kZombie, kGone };

ProcessState process_state(pid_t pid);

}  // namespace pride
