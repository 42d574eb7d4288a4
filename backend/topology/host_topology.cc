#include "backend/topology/host_topology.h"

#include <fmt/format.h>

#include <thread>

#ifdef PRIDE_HAVE_HWLOC
#include <hwloc.h>
#endif

#include "backend/common/log.h"

namespace pride {
namespace {

HostTopology discover() {
  HostTopology t;
  t.hardware_threads = std::max(1u, std::thread::hardware_concurrency());
  t.cores = t.hardware_threads;
#ifdef PRIDE_HAVE_HWLOC
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0) return t;
  // Only the resources this process is allowed to use (cgroups, taskset), as a scheduler sees them.
  hwloc_topology_set_flags(topo, HWLOC_TOPOLOGY_FLAG_RESTRICT_TO_CPUBINDING);
  if (hwloc_topology_load(topo) == 0) {
    auto count = [&](hwloc_obj_type_t type) { return hwloc_get_nbobjs_by_type(topo, type); };
    t.cores = std::max(1, count(HWLOC_OBJ_CORE));
    t.hardware_threads = std::max(1, count(HWLOC_OBJ_PU));
    t.numa_nodes = std::max(1, count(HWLOC_OBJ_NUMANODE));
  } else {
    log().debug("hwloc could not load the topology; assuming {} cores", t.cores);
  }
  hwloc_topology_destroy(topo);
#endif
  return t;
}

}  // namespace

std::string HostTopology::describe() const {
  return fmt::format("{} cores, {} hardware threads, {} NUMA node{}", cores, hardware_threads, numa_nodes,
                     numa_nodes == 1 ? "" : "s");
}

const HostTopology& host_topology() {
  static const HostTopology topology = discover();
  return topology;
}

}  // namespace pride
