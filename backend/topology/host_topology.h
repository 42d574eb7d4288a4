// What this host offers the ranks placed on it, read through hwloc: cores, hardware threads, NUMA
// nodes. The cost model uses it to tell when a group's ranks outnumber the cores they share.
#pragma once

#include <string>

namespace pride {

struct HostTopology {
  int cores = 1;          // physical cores this process may run on
  int hardware_threads = 1;
  int numa_nodes = 1;
  std::string describe() const;  // "2 cores, 2 hardware threads, 1 NUMA node"
};

// Read once per process (hwloc's discovery takes milliseconds); falls back to one core when hwloc
// is disabled at build time or fails.
const HostTopology& host_topology();

}  // namespace pride
