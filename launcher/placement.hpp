// Placement: which cores each rank may run on, like `mpirun --bind-to`.
//
// plan_placement() reads the machine's topology (hwloc) restricted to the
// launcher's own allowed CPUs (sched_getaffinity, so cgroups and `taskset`
// are respected) and decides, for every rank:
//
//   --bind core   rank r gets its own block of whole cores: the usable cores
//                 in topology order (so NUMA nodes and sockets stay
//                 contiguous) split into N nearly equal blocks. Needs
//                 N <= usable cores; otherwise the plan falls back to `none`
//                 with a one-line warning (it never oversubscribes a core).
//   --bind numa   rank r is bound to every usable CPU of one NUMA node; the
//                 ranks are split into blocks over the nodes that have
//                 usable cores (ranks r and r+1 share a node when they can).
//   --bind none   affinity is left as inherited.
//
// The default is `core` when N <= usable cores, else `none` (with the same
// warning as an explicit `core` that does not fit).
//
// Each rank also gets its share of compute threads: AXON_THREADS_PER_RANK
// (read by nn::ComputeThreads::fair_share) and OMP_NUM_THREADS, the number of
// whole cores it is bound to (for `none`: usable cores / N, at least 1).
// Each variable here is left alone when the user set it: not empty, and not
// the value an outer axon-launch set (listed in AXON_LAUNCH_SET). AXON_OVERSUBSCRIBED
// tells the ranks' waiting (shm/wait.hpp) whether they share cores: 0 for
// `core`, for `numa` when the node has a core per rank, for `none` when N <=
// usable cores. AXON_NUMA_NODE names the node of a rank bound within one
// node; the rank moves the arena pages only it writes there (shm/numa_place.hpp).
//
// Thread safety: single-threaded (the launcher, before and between forks).
#pragma once

#include <sched.h>

#include <optional>
#include <string>
#include <vector>

namespace axon_launch {

enum class BindPolicy { None, Core, Numa };

// "none", "core", "numa" -> the policy; anything else -> nullopt.
std::optional<BindPolicy> bind_policy_from(const std::string& text);
const char* to_string(BindPolicy policy);

struct RankPlacement {
  bool bound = false;           // false: inherit the launcher's affinity
  cpu_set_t cpus{};             // when bound: the CPUs (OS numbering) it may use
  std::string cpu_list;         // "0-3,8-11": the CPUs it will run on
  std::string numa_nodes;       // "0", "0-1", or "?" when the topology has none
  int threads = 1;              // AXON_THREADS_PER_RANK / OMP_NUM_THREADS
  bool shares_cores = false;    // AXON_OVERSUBSCRIBED: other ranks run on its cores too
};

struct Placement {
  BindPolicy policy = BindPolicy::None;  // what is applied (after any fallback)
  int usable_cores = 0;                  // whole cores with an allowed CPU
  std::string allowed;                   // the launcher's allowed CPUs, "0-15"
  std::string warning;                   // non-empty when a request fell back
  std::vector<RankPlacement> ranks;
};

// Plans where `world_size` ranks run. `requested` unset: the default (see
// above). Throws std::runtime_error when the topology cannot be read.
Placement plan_placement(std::optional<BindPolicy> requested, int world_size);

// One header line and one line per rank: "rank 3 -> cpus 6-7 -> NUMA node 0 (2 threads)".
std::string describe(const Placement& placement);

// In the child between fork and exec: binds the calling process and exports
// the thread counts. Async-signal-safe apart from getenv/setenv (safe after
// fork here: the launcher's other thread, the output writer, never touches
// the environment). Returns false, with
// errno set, when sched_setaffinity fails.
bool apply_placement(const RankPlacement& rank);

}  // namespace axon_launch
