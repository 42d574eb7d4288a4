// Peer liveness on one host (SPEC §6): a process that has exited is detected as gone even while it is a
// zombie (its parent has not reaped it yet), which kill(pid, 0) alone reports as alive.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "backend/liveness/process_state.h"

namespace pride {
namespace {

// Polls until `state()` reaches `want` (a child's exit is not instantaneous), at most two seconds.
template <class StateOf>
bool reaches_state(StateOf state, ProcessState want) {
  for (int i = 0; i < 200; ++i) {
    if (state() == want) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}
bool reaches(pid_t pid, ProcessState want) {
  return reaches_state([pid] { return process_state(pid); }, want);
}

// Whether this kernel lets this process open pidfds (Linux 5.3, and no seccomp filter refusing it).
bool kernel_has_pidfd() {
#ifdef SYS_pidfd_open
  const long fd = syscall(SYS_pidfd_open, getpid(), 0);
  if (fd < 0) return false;
  close(int(fd));
  return true;
#else
  return false;
#endif
}

// A child that exits when the returned pipe end is closed.
pid_t child_waiting_on(int* release_fd) {
  int pipefd[2];
  if (pipe(pipefd) != 0) return -1;
  const pid_t child = fork();
  if (child == 0) {
    char c;
    close(pipefd[1]);
    (void)!read(pipefd[0], &c, 1);
    _exit(0);
  }
  close(pipefd[0]);
  *release_fd = pipefd[1];
  return child;
}

TEST(ProcessState, RunningZombieAndGone) {
  EXPECT_EQ(process_state(getpid()), ProcessState::kRunning);
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // waits until told to exit
    char c;
    close(pipefd[1]);
    (void)!read(pipefd[0], &c, 1);
    _exit(0);
  }
  close(pipefd[0]);
  EXPECT_EQ(process_state(child), ProcessState::kRunning);
  EXPECT_EQ(kill(child, 0), 0);
  close(pipefd[1]);  // the child exits; not reaped yet: a zombie
  EXPECT_TRUE(reaches(child, ProcessState::kZombie));
  EXPECT_EQ(kill(child, 0), 0) << "kill(pid, 0) still succeeds on a zombie: the reason for process_state()";
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_EQ(process_state(child), ProcessState::kGone);
}

TEST(ProcessState, KilledChildIsDetectedBeforeReaping) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    pause();
    _exit(0);
  }
  ASSERT_EQ(kill(child, SIGKILL), 0);
  EXPECT_TRUE(reaches(child, ProcessState::kZombie));
  EXPECT_NE(process_state(child), ProcessState::kRunning);
  waitpid(child, nullptr, 0);
}

TEST(ProcessWatch, SeesTheExitWhileAZombieAndAfterReaping) {
  int release = -1;
  const pid_t child = child_waiting_on(&release);
  ASSERT_GT(child, 0);
  ProcessWatch watch(child);
  if (kernel_has_pidfd()) EXPECT_TRUE(watch.uses_pidfd()) << "the kernel has pidfd_open; the watch must use it";
  EXPECT_EQ(watch.state(), ProcessState::kRunning);
  close(release);
  EXPECT_TRUE(reaches_state([&] { return watch.state(); }, ProcessState::kZombie));
  EXPECT_EQ(kill(child, 0), 0) << "a zombie still answers kill(pid, 0)";
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  EXPECT_EQ(watch.state(), ProcessState::kGone);
}

TEST(ProcessWatch, SigkilledChildAndMovedWatch) {
  int release = -1;
  const pid_t child = child_waiting_on(&release);
  ASSERT_GT(child, 0);
  ProcessWatch first(child);
  ProcessWatch watch(std::move(first));  // the communicator keeps its watches in a vector
  EXPECT_EQ(first.state(), ProcessState::kRunning) << "a moved-from watch watches nothing";
  EXPECT_EQ(watch.pid(), child);
  EXPECT_EQ(watch.state(), ProcessState::kRunning);
  ASSERT_EQ(kill(child, SIGKILL), 0);
  EXPECT_TRUE(reaches_state([&] { return watch.state(); }, ProcessState::kZombie));
  close(release);
  waitpid(child, nullptr, 0);
}

TEST(ProcessWatch, NothingWatchedIsRunning) {
  EXPECT_EQ(ProcessWatch().state(), ProcessState::kRunning);
  EXPECT_EQ(ProcessWatch(getpid()).state(), ProcessState::kRunning);
}

}  // namespace
}  // namespace pride
