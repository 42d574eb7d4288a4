// Which ranks share a host and a machine (backend/topology/host_layout.h), from the entries ranks
// publish at start-up. The oracle is the layout written out by hand for each scenario.
#include "backend/topology/host_layout.h"

#include <gtest/gtest.h>

#include <vector>

namespace pride {
namespace {

HostEntry entry(const char* host, const char* machine, long pid, const char* pid_ns = "pid:[4026531836]",
                int cores = 8) {
  return HostEntry{cores, pid, pid_ns, machine, host};
}

TEST(HostLayout, EntriesRoundTripThroughTheirText) {
  const HostEntry e = entry("node-a.example", "0b6f2c1e-1111-2222-3333-444455556666", 4242, "pid:[4026531836]", 96);
  const HostEntry back = parse_host_entry(format_host_entry(e));
  EXPECT_EQ(back.cores, 96);
  EXPECT_EQ(back.pid, 4242);
  EXPECT_EQ(back.pid_ns, e.pid_ns);
  EXPECT_EQ(back.machine, e.machine);
  EXPECT_EQ(back.host, e.host);
  EXPECT_EQ(parse_host_entry("my host with spaces").host, "");  // malformed: no fields where numbers go
  const HostEntry junk = parse_host_entry("");
  EXPECT_EQ(junk.cores, 1);
  EXPECT_EQ(junk.pid, 0);
  EXPECT_EQ(junk.pid_ns, "unknown");
  EXPECT_EQ(junk.machine, "unknown");
}

TEST(HostLayout, TwoMachinesWithOneHostnameAreTwoHostsAndTheirPidsAreNotWatched) {
  // Cloud images that all call themselves "localhost", every process in the initial pid namespace (whose
  // name is the same number on every machine): a peer's pid there is not a pid of this machine.
  const std::vector<HostEntry> entries = {entry("localhost", "machine-1", 100), entry("localhost", "machine-1", 101),
                                          entry("localhost", "machine-2", 100), entry("localhost", "machine-2", 102)};
  const HostLayout l = lay_out_hosts(entries, 1);
  EXPECT_EQ(l.num_nodes, 2);
  EXPECT_EQ(l.node_of_rank, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(l.local_rank, 1);
  EXPECT_EQ(l.local_size, 2);
  EXPECT_EQ(l.ranks_on_machine, 2);
  EXPECT_EQ(l.local_pid_of_rank, (std::vector<long>{100, 0, 0, 0}));
  const HostLayout third = lay_out_hosts(entries, 2);
  EXPECT_EQ(third.local_rank, 0);
  EXPECT_EQ(third.local_pid_of_rank, (std::vector<long>{0, 0, 0, 102}));
}

TEST(HostLayout, HostnamesOfOneMachineAreHostsThatShareItsCores) {
  // The netns testbed: one machine, a hostname per simulated host, ranks in pid namespaces of their own or not.
  const std::vector<HostEntry> entries = {entry("h0", "m", 10, "ns-a", 2), entry("h1", "m", 11, "ns-a", 2),
                                          entry("h0", "m", 12, "ns-a", 2), entry("h1", "m", 13, "ns-b", 2),
                                          entry("h1", "m", 14, "ns-a", 2)};
  const HostLayout l = lay_out_hosts(entries, 1);
  EXPECT_EQ(l.num_nodes, 2);
  EXPECT_EQ(l.node_of_rank, (std::vector<int>{0, 1, 0, 1, 1}));
  EXPECT_EQ(l.local_rank, 0);
  EXPECT_EQ(l.local_size, 3);
  EXPECT_EQ(l.ranks_on_machine, 5);
  EXPECT_EQ(l.local_pid_of_rank, (std::vector<long>{0, 0, 0, 0, 14}));  // rank 3's namespace is another
  EXPECT_DOUBLE_EQ(l.ranks_per_core, 1.5);                               // h1: 3 ranks on 2 cores
}

TEST(HostLayout, WithoutABootIdAHostnameStandsForItsMachine) {
  const std::vector<HostEntry> entries = {entry("a", "unknown", 1), entry("a", "unknown", 2), entry("b", "unknown", 3),
                                          entry("a", "m", 4)};
  const HostLayout l = lay_out_hosts(entries, 0);
  EXPECT_EQ(l.node_of_rank, (std::vector<int>{0, 0, 1, 2}));
  EXPECT_EQ(l.local_size, 2);
  EXPECT_EQ(l.ranks_on_machine, 0);  // unknown: no rank is known to share this one
  EXPECT_EQ(l.local_pid_of_rank, (std::vector<long>{0, 2, 0, 0}));
}

}  // namespace
}  // namespace pride
