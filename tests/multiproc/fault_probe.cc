// fault_probe: one rank of a small job that misbehaves on purpose, for run_multiproc.py's fault tests
// (SPEC §6). Bootstraps like the perf tools (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, PRIDE_TIMEOUT)
// and runs --iters sign-allreduces of --numel floats; the --victim rank deviates as --scenario says:
//
//   ok      nobody deviates (checks the harness itself)
//   silent  the victim never calls: it sleeps until the driver kills it
//   die     the victim raise(SIGKILL)s itself after --die-after collectives, between two of them
//   loop    nobody deviates, but the job runs until the driver kills the victim from outside
//   numel   the victim calls with numel + 1
//   mode    the victim calls with mode "mean" instead of "vote"
//
// Exit codes: 0 when every collective completed, 1 when one raised (the message, naming this rank,
// goes to stderr), 2 for bad arguments or a failed bootstrap.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <csignal>
#include <exception>
#include <thread>
#include <vector>

#include "backend/common/settings.h"
#include "backend/store/c10d_store.h"
#include "collectives/engine/sign/sign_allreduce.h"

namespace {

struct Args {
  std::string scenario = "ok";
  int victim = 1;
  int iters = 3;
  int die_after = 2;
  size_t numel = 1 << 20;
};

int run_collectives(pride::Communicator& comm, const Args& a) {
  const bool victim = comm.rank() == a.victim;
  if (victim && a.scenario == "silent") {
    // Alive and connected, but never calls: the others must time out, not wait forever.
    std::this_thread::sleep_for(std::chrono::hours(1));
    return 0;
  }
  size_t numel = a.numel + (victim && a.scenario == "numel" ? 1 : 0);
  pride::SignOptions options;
  options.mode = victim && a.scenario == "mode" ? pride::SignMode::kMean : pride::SignMode::kVote;
  std::vector<float> x(numel);
  int iters = a.scenario == "loop" ? 1 << 30 : a.iters;
  for (int i = 0; i < iters; ++i) {
    if (victim && a.scenario == "die" && i == a.die_after) {
      fmt::print(stderr, "fault_probe rank {}: SIGKILL before collective {}\n", comm.rank(), i);
      std::raise(SIGKILL);
    }
    for (size_t j = 0; j < numel; ++j) x[j] = float((j + size_t(comm.rank()) + size_t(i)) % 3) - 1.0f;
    pride::sign_allreduce(comm, x.data(), pride::bits::DType::kFloat32, numel, options);
    if (i == 0) fmt::print(stderr, "fault_probe rank {}: first collective done\n", comm.rank());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fault_probe: a rank that misbehaves on purpose (see run_multiproc.py)"};
  Args a;
  app.add_option("--scenario", a.scenario)->check(CLI::IsMember({"ok", "silent", "die", "loop", "numel", "mode"}));
  app.add_option("--victim", a.victim);
  app.add_option("--iters", a.iters);
  app.add_option("--die-after", a.die_after);
  app.add_option("--numel", a.numel);
  CLI11_PARSE(app, argc, argv);

  int rank = -1;
  std::unique_ptr<pride::Communicator> comm;
  try {
    pride::LaunchEnv env = pride::read_launch_env();
    rank = env.rank;
    auto store = pride::make_prefix_store("probe", pride::connect_store(env, pride::Settings::get().timeout));
    comm = std::make_unique<pride::Communicator>(store, env.rank, env.world_size, pride::Communicator::Options{});
    fmt::print(stderr, "fault_probe rank {}: connected\n", rank);
  } catch (const std::exception& e) {
    fmt::print(stderr, "fault_probe rank {}: bootstrap failed: {}\n", rank, e.what());
    return 2;
  }
  try {
    int rc = run_collectives(*comm, a);
    comm->close(std::chrono::seconds(5));  // goodbyes, so that no rank takes another's close for a failure
    fmt::print(stderr, "fault_probe rank {}: all collectives completed\n", rank);
    return rc;
  } catch (const std::exception& e) {
    fmt::print(stderr, "fault_probe rank {}: collective failed: {}\n", rank, e.what());
    return 1;
  }
}
