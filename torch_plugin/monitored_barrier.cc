// torch.distributed.monitored_barrier on pride, with Gloo's protocol and messages: every rank but 0
// checks in with rank 0 and waits for its answer; rank 0 waits for each other rank within the
// timeout and names the ones that did not arrive (the first, or all of them with wait_all_ranks).
// A failure here only fails the call: the group is not aborted, so the ranks that did arrive report
// what they saw (rank 0 names the missing rank, the others that rank 0 did not answer).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <vector>

#include "backend/common/error.h"
#include "torch_plugin/pride_backend.h"

namespace pride::torch_plugin {
namespace {

// Above every tag torch can pass to send/recv (an int), inside the p2p tag space.
constexpr uint64_t kMonitoredBarrierTag = uint64_t(1) << 40;

// Progresses until `request` completes or `deadline` passes; false on the deadline (the request is
// then cancelled by its destruction) or a failure.
bool wait_until(Communicator& comm, RequestPtr& request, Clock::time_point deadline) {
  while (request->pending()) {
    if (Clock::now() >= deadline) return false;
    if (!comm.progress_p2p()) comm.transport().wait_for_activity(std::chrono::milliseconds(1));
  }
  return request->state() == Request::State::kDone;
}

}  // namespace

void PrideBackend::monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) {
  const auto timeout = opts.timeout.count() > 0 ? opts.timeout : std::chrono::milliseconds(0);
  const uint64_t tag = kMonitoredBarrierTag | (monitored_barriers_++ & 0xffffff);
  const int rank = getRank(), size = getSize();
  auto work = run_on_worker("pride:monitored_barrier", {}, [=](Communicator& comm) {
    const auto start = Clock::now(), deadline = start + timeout;
    uint8_t token = 1;
    if (rank != 0) {
      RequestPtr arrive = comm.p2p_send(0, tag, &token, 1);
      RequestPtr answer = comm.p2p_recv(0, tag, &token, 1);
      if (!wait_until(comm, arrive, deadline) || !wait_until(comm, answer, deadline)) {
        throw PeerError(fmt::format("Rank {} successfully reached monitoredBarrier, but received errors while waiting "
                                    "for send/recv from rank 0. Please check rank 0 logs for faulty rank.",
                                    rank));
      }
      return;
    }
    std::vector<uint8_t> tokens(static_cast<size_t>(size), 0);
    std::vector<RequestPtr> arrivals(static_cast<size_t>(size));
    for (int p = 1; p < size; ++p) arrivals[size_t(p)] = comm.p2p_recv(p, tag, &tokens[size_t(p)], 1);
    std::vector<int> missing;
    for (int p = 1; p < size; ++p) {
      if (missing.empty() && Clock::now() >= deadline) {  // nothing left to wait with
        throw TimeoutError(fmt::format("Rank 0 timed out in monitoredBarrier after {} ms.", timeout.count()));
      }
      if (wait_until(comm, arrivals[size_t(p)], deadline)) continue;
      missing.push_back(p);
      if (!waitAllRanks) break;
    }
    if (missing.size() == 1) {
      throw PeerError(fmt::format("Rank {} failed to pass monitoredBarrier in {} ms", missing[0], timeout.count()));
    }
    if (!missing.empty()) {
      throw PeerError(fmt::format("Ranks {} failed to pass monitoredBarrier in {} ms", fmt::join(missing, ", "),
                                  timeout.count()));
    }
    std::vector<RequestPtr> answers;
    for (int p = 1; p < size; ++p) answers.push_back(comm.p2p_send(p, tag, &token, 1));
    for (auto& a : answers) wait_until(comm, a, Clock::now() + timeout);  // a rank gone now finds out itself
  });
  work->wait();
}

}  // namespace pride::torch_plugin
