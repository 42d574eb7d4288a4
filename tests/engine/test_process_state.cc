// Peer liveness on one host (SPEC §6): a process that has exited is detected as gone even while it is a
// zombie (its parent has not reaped it yet), which kill(pid, 0) alone reports as alive.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "backend/liveness/process_state.h"

namespace pride {
namespace {

// Polls until `pid` reaches `want` (a child's exit is not instantaneous), at most two seconds.
bool reaches(pid_t pid, ProcessState want) {
  for (int i = 0; i < 200; ++i) {
    if (process_state(pid) == want) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
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

}  // namespace
}  // namespace pride
