// Which of a group's ranks share a host, and which a machine, from the entry each rank publishes at
// start-up ("<cores> <pid> <pid namespace> <boot id> <hostname>"). A host is a hostname on one machine
// (one boot id): two machines that happen to share a hostname ("localhost" on cloud images) are two
// hosts, and a peer's pid is watched only where it is a pid of this machine. Several hostnames on one
// machine are several hosts (the netns testbed, PRIDE_HOSTNAME) that still share its cores.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace pride {

struct HostEntry {
  int cores = 1;
  long pid = 0;
  std::string pid_ns;
  std::string machine;  // the kernel's boot id: the same for every network namespace of one machine
  std::string host;
};

// The entry as published. Parsed with from_chars, not iostreams: the start-up path of the Python
// extension must not depend on locale facets (see bindings/exports.map). A malformed entry reads as
// one core, no pid, an unknown namespace and machine.
std::string format_host_entry(const HostEntry& entry);
HostEntry parse_host_entry(std::string_view text);

struct HostLayout {
  std::vector<int> node_of_rank;        // hosts numbered in the order of their lowest rank
  std::vector<long> local_pid_of_rank;  // a peer's pid where this rank can watch it (same host, machine
                                        // and pid namespace); 0 for the others and for this rank
  int num_nodes = 0;
  int local_rank = 0;                   // among the ranks of this rank's host
  int local_size = 0;
  int ranks_on_machine = 0;             // ranks whose machine is this rank's (0 when it is unknown)
  double ranks_per_core = 0.0;          // the most ranks per core of any host
};

// `entries[r]` is rank r's entry; `rank`'s own is the one this process published.
HostLayout lay_out_hosts(const std::vector<HostEntry>& entries, int rank);

}  // namespace pride
