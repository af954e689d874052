#include "placement.hpp"

#include <hwloc.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string_view>

#include "base/env.hpp"
#include "shm/numa_place.hpp"

namespace axon_launch {
namespace {

// RAII for the two hwloc handles this file uses.
struct TopologyDeleter {
  void operator()(hwloc_topology* t) const { hwloc_topology_destroy(t); }
};
using Topology = std::unique_ptr<hwloc_topology, TopologyDeleter>;
struct BitmapDeleter {
  void operator()(hwloc_bitmap_s* b) const { hwloc_bitmap_free(b); }
};
using Bitmap = std::unique_ptr<hwloc_bitmap_s, BitmapDeleter>;

Bitmap new_bitmap() {
  Bitmap b(hwloc_bitmap_alloc());
  if (!b) throw std::runtime_error("hwloc: out of memory");
  return b;
}

Bitmap copy_of(hwloc_const_bitmap_t from) {
  Bitmap b(hwloc_bitmap_dup(from));
  if (!b) throw std::runtime_error("hwloc: out of memory");
  return b;
}

std::string list_of(hwloc_const_bitmap_t set) {
  if (hwloc_bitmap_iszero(set)) return "-";
  char* text = nullptr;
  if (hwloc_bitmap_list_asprintf(&text, set) < 0 || text == nullptr) return "?";
  std::string s(text);
  std::free(text);
  return s;
}

Topology load_topology() {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) throw std::runtime_error("hwloc: cannot initialise a topology");
  Topology topology(raw);
  if (hwloc_topology_load(raw) != 0) {
    throw std::runtime_error(std::string("hwloc: cannot read the machine's topology: ") + std::strerror(errno));
  }
  return topology;
}

// The CPUs this launcher may run on (its affinity: cgroup cpuset and taskset).
Bitmap allowed_cpus() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (::sched_getaffinity(0, sizeof(mask), &mask) != 0) {
    throw std::runtime_error(std::string("sched_getaffinity failed: ") + std::strerror(errno));
  }
  Bitmap set = new_bitmap();
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &mask)) hwloc_bitmap_set(set.get(), static_cast<unsigned>(cpu));
  }
  return set;
}

// A whole core (or, on a topology without cores, one PU) restricted to the
// allowed CPUs, with the NUMA node that holds it.
struct UsableCore {
  Bitmap cpus;
  int numa_index;  // position in the node list, -1 when the topology has no NUMA nodes
};

struct Machine {
  std::vector<UsableCore> cores;              // in topology order
  std::vector<Bitmap> node_cpus;              // per NUMA node: its allowed CPUs
  std::vector<unsigned> node_os_index;        // per NUMA node: its OS number
};

Machine read_machine(hwloc_topology_t topology, hwloc_const_bitmap_t allowed) {
  Machine m;
  const int nodes = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_NUMANODE);
  for (int i = 0; i < nodes; ++i) {
    hwloc_obj_t node = hwloc_get_obj_by_type(topology, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i));
    Bitmap cpus = copy_of(node->cpuset);
    hwloc_bitmap_and(cpus.get(), cpus.get(), allowed);
    m.node_cpus.push_back(std::move(cpus));
    m.node_os_index.push_back(node->os_index);
  }
  const hwloc_obj_type_t unit =
      hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
  const int units = hwloc_get_nbobjs_by_type(topology, unit);
  for (int i = 0; i < units; ++i) {
    hwloc_obj_t obj = hwloc_get_obj_by_type(topology, unit, static_cast<unsigned>(i));
    Bitmap cpus = copy_of(obj->cpuset);
    hwloc_bitmap_and(cpus.get(), cpus.get(), allowed);
    if (hwloc_bitmap_iszero(cpus.get())) continue;
    int numa = -1;
    for (std::size_t n = 0; n < m.node_cpus.size(); ++n) {
      if (hwloc_bitmap_intersects(m.node_cpus[n].get(), cpus.get())) {
        numa = static_cast<int>(n);
        break;
      }
    }
    m.cores.push_back(UsableCore{std::move(cpus), numa});
  }
  return m;
}

std::string nodes_of(const Machine& m, hwloc_const_bitmap_t cpus) {
  Bitmap os_nodes = new_bitmap();
  for (std::size_t n = 0; n < m.node_cpus.size(); ++n) {
    if (hwloc_bitmap_intersects(m.node_cpus[n].get(), cpus)) hwloc_bitmap_set(os_nodes.get(), m.node_os_index[n]);
  }
  return hwloc_bitmap_iszero(os_nodes.get()) ? "?" : list_of(os_nodes.get());
}

void bind_to(RankPlacement& rank, const Machine& m, hwloc_const_bitmap_t cpus) {
  rank.bound = true;
  CPU_ZERO(&rank.cpus);
  for (int cpu = hwloc_bitmap_first(cpus); cpu >= 0; cpu = hwloc_bitmap_next(cpus, cpu)) {
    if (cpu < CPU_SETSIZE) CPU_SET(cpu, &rank.cpus);
  }
  rank.cpu_list = list_of(cpus);
  rank.numa_nodes = nodes_of(m, cpus);
}

// The first core of rank r's block when C cores are split among n ranks.
std::size_t first_core(int r, int n, std::size_t cores) {
  return static_cast<std::size_t>(r) * cores / static_cast<std::size_t>(n);
}

}  // namespace

std::optional<BindPolicy> bind_policy_from(const std::string& text) {
  if (text == "none") return BindPolicy::None;
  if (text == "core") return BindPolicy::Core;
  if (text == "numa") return BindPolicy::Numa;
  return std::nullopt;
}

const char* to_string(BindPolicy policy) {
  switch (policy) {
    case BindPolicy::None: return "none";
    case BindPolicy::Core: return "core";
    case BindPolicy::Numa: return "numa";
  }
  return "?";
}

Placement plan_placement(std::optional<BindPolicy> requested, int world_size) {
  const Topology topology = load_topology();
  const Bitmap allowed = allowed_cpus();
  const Machine m = read_machine(topology.get(), allowed.get());

  Placement plan;
  plan.usable_cores = static_cast<int>(m.cores.size());
  plan.allowed = list_of(allowed.get());
  const auto cores = m.cores.size();
  const auto n = static_cast<std::size_t>(world_size);
  plan.policy = requested.value_or(BindPolicy::Core);
  if (plan.policy == BindPolicy::Core && n > cores) {
    plan.warning = "axon-launch: warning: " + std::to_string(world_size) + " ranks but only " +
                   std::to_string(cores) + " usable core(s) in the allowed CPUs " + plan.allowed +
                   "; not binding ranks to cores (--bind none)";
    plan.policy = BindPolicy::None;
  }
  if (plan.policy == BindPolicy::Numa && (m.node_cpus.empty() || cores == 0)) {
    plan.warning = "axon-launch: warning: the topology shows no NUMA node with an allowed CPU; not binding (--bind none)";
    plan.policy = BindPolicy::None;
  }

  plan.ranks.resize(n);
  for (int r = 0; r < world_size; ++r) {
    RankPlacement& rank = plan.ranks[static_cast<std::size_t>(r)];
    switch (plan.policy) {
      case BindPolicy::None: {
        rank.cpu_list = plan.allowed;
        rank.numa_nodes = nodes_of(m, allowed.get());
        rank.threads = static_cast<int>(std::max<std::size_t>(1, cores / n));
        rank.shares_cores = n > cores;
        break;
      }
      case BindPolicy::Core: {
        Bitmap cpus = new_bitmap();
        const std::size_t begin = first_core(r, world_size, cores), end = first_core(r + 1, world_size, cores);
        for (std::size_t c = begin; c < end; ++c) hwloc_bitmap_or(cpus.get(), cpus.get(), m.cores[c].cpus.get());
        bind_to(rank, m, cpus.get());
        rank.threads = static_cast<int>(end - begin);
        break;
      }
      case BindPolicy::Numa: {
        // Ranks follow the cores (spread like `core` would, wrapping when
        // they outnumber them), then take that core's whole node.
        const std::size_t core = cores ? first_core(r, world_size, cores) % cores : 0;
        const int node = cores ? std::max(0, m.cores[core].numa_index) : 0;
        const auto& node_cpus = m.node_cpus[static_cast<std::size_t>(node)];
        std::size_t node_cores = 0, node_ranks = 0;
        for (const auto& c : m.cores) node_cores += c.numa_index == node;
        for (int other = 0; other < world_size; ++other) {
          const std::size_t oc = cores ? first_core(other, world_size, cores) % cores : 0;
          node_ranks += (cores ? std::max(0, m.cores[oc].numa_index) : 0) == node;
        }
        bind_to(rank, m, node_cpus.get());
        rank.threads = static_cast<int>(std::max<std::size_t>(1, node_cores / std::max<std::size_t>(1, node_ranks)));
        rank.shares_cores = node_ranks > node_cores;
        break;
      }
    }
  }
  return plan;
}

std::string describe(const Placement& plan) {
  std::string s = "axon-launch: placement --bind " + std::string(to_string(plan.policy)) + ": " +
                  std::to_string(plan.ranks.size()) + (plan.ranks.size() == 1 ? " rank, " : " ranks, ") +
                  std::to_string(plan.usable_cores) +
                  " usable core(s) in allowed CPUs " + plan.allowed + "\n";
  for (std::size_t r = 0; r < plan.ranks.size(); ++r) {
    const RankPlacement& rank = plan.ranks[r];
    s += "axon-launch:   rank " + std::to_string(r) + " -> cpus " + rank.cpu_list +
         (rank.bound ? "" : " (not bound)") + " -> NUMA node " + rank.numa_nodes + " (" +
         std::to_string(rank.threads) + (rank.threads == 1 ? " thread)\n" : " threads)\n");
  }
  return s;
}

namespace {

// Whether the user set `name`: not to the empty string (which counts as
// unset, README), and not to the value an outer axon-launch gave it (this
// launcher runs inside one of its ranks), which that one listed in
// AXON_LAUNCH_SET. Both were taken for the user's: a nested job's four ranks
// on the outer rank's one core ran "not oversubscribed", at half speed (a
// review).
bool set_by_user(const char* name) {
  const auto value = axonml::distributed::env::text(name);  // empty: none
  if (!value) return false;
  const char* outer = std::getenv("AXON_LAUNCH_SET");
  if (outer == nullptr) return true;
  const std::string entry = std::string(name) + "=" + *value;
  std::string_view words(outer);  // "NAME=VALUE NAME=VALUE "
  while (!words.empty()) {
    const std::size_t end = std::min(words.find(' '), words.size());
    if (words.substr(0, end) == entry) return false;
    words.remove_prefix(std::min(end + 1, words.size()));
  }
  return true;
}

}  // namespace

bool apply_placement(const RankPlacement& rank) {
  const std::string threads = std::to_string(rank.threads);
  std::string launcher_set;  // this rank's AXON_LAUNCH_SET
  // A value the user set wins.
  auto set_default = [&](const char* name, const std::string& value) {
    if (set_by_user(name)) return;
    ::setenv(name, value.c_str(), 1);
    launcher_set += std::string(name) + "=" + value + " ";
  };
  set_default("AXON_THREADS_PER_RANK", threads);
  set_default("OMP_NUM_THREADS", threads);
  set_default("AXON_OVERSUBSCRIBED", rank.shares_cores ? "1" : "0");
  // One node: the rank moves the arena pages only it writes there
  // (shm/numa_place.hpp). Not a node the rank may not place memory on (a
  // topology from HWLOC_SYNTHETIC or HWLOC_XMLFILE): the rank would refuse it.
  if (rank.bound && rank.numa_nodes.find_first_not_of("0123456789") == std::string::npos &&
      axonml::distributed::shm::numa_node_allowed(std::stoi(rank.numa_nodes))) {
    set_default("AXON_NUMA_NODE", rank.numa_nodes);
  } else if (!set_by_user("AXON_NUMA_NODE")) {
    ::unsetenv("AXON_NUMA_NODE");  // an outer launcher's node, not this rank's
  }
  ::setenv("AXON_LAUNCH_SET", launcher_set.c_str(), 1);
  if (rank.bound) return ::sched_setaffinity(0, sizeof(rank.cpus), &rank.cpus) == 0;
  return true;
}

}  // namespace axon_launch
