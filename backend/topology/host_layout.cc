#include "backend/topology/host_layout.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <utility>

#include <fmt/format.h>

namespace pride {

std::string format_host_entry(const HostEntry& e) {
  return fmt::format("{} {} {} {} {}", e.cores, e.pid, e.pid_ns, e.machine, e.host);
}

HostEntry parse_host_entry(std::string_view text) {
  HostEntry e;
  auto next_field = [&text]() {
    const size_t start = text.find_first_not_of(' ');
    if (start == std::string_view::npos) return std::string_view{};
    text.remove_prefix(start);
    const size_t end = std::min(text.find(' '), text.size());
    std::string_view field = text.substr(0, end);
    text.remove_prefix(end);
    return field;
  };
  const std::string_view cores = next_field(), pid = next_field();
  std::from_chars(cores.data(), cores.data() + cores.size(), e.cores);
  std::from_chars(pid.data(), pid.data() + pid.size(), e.pid);
  e.pid_ns = std::string(next_field());
  e.machine = std::string(next_field());
  if (e.pid_ns.empty()) e.pid_ns = "unknown";
  if (e.machine.empty()) e.machine = "unknown";
  const size_t start = text.find_first_not_of(' ');
  e.host = start == std::string_view::npos ? std::string() : std::string(text.substr(start));
  return e;
}

HostLayout lay_out_hosts(const std::vector<HostEntry>& entries, int rank) {
  const HostEntry& me = entries.at(size_t(rank));
  const bool machine_known = me.machine != "unknown";
  // Without a boot id (no /proc) a hostname alone has to stand for a machine, as it did before boot ids.
  auto same_machine = [&](const HostEntry& e) { return machine_known ? e.machine == me.machine : e.machine == "unknown"; };
  auto host_key = [](const HostEntry& e) { return std::make_pair(e.host, e.machine); };
  HostLayout layout;
  layout.node_of_rank.assign(entries.size(), 0);
  layout.local_pid_of_rank.assign(entries.size(), 0);
  std::map<std::pair<std::string, std::string>, int> node_ids;
  std::map<int, std::pair<int, int>> ranks_and_cores;  // per node
  for (size_t r = 0; r < entries.size(); ++r) {
    const HostEntry& e = entries[r];
    const bool same_host = e.host == me.host && same_machine(e);
    if (machine_known && e.machine == me.machine) ++layout.ranks_on_machine;
    if (same_host && e.pid_ns == me.pid_ns && me.pid_ns != "unknown" && int(r) != rank) {
      layout.local_pid_of_rank[r] = e.pid;
    }
    const int node = node_ids.emplace(host_key(e), int(node_ids.size())).first->second;
    layout.node_of_rank[r] = node;
    auto& [ranks, cores] = ranks_and_cores[node];
    ++ranks;
    cores = std::max(1, e.cores);
    if (same_host) {
      if (int(r) < rank) ++layout.local_rank;
      ++layout.local_size;
    }
  }
  layout.num_nodes = int(node_ids.size());
  for (const auto& [node, rc] : ranks_and_cores) {
    layout.ranks_per_core = std::max(layout.ranks_per_core, double(rc.first) / rc.second);
  }
  return layout;
}

}  // namespace pride
