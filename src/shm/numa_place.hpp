// Putting a rank's own part of the arena on its NUMA node.
//
// axon-launch reserves every page of the arena (a memfd, i.e. shmem) with
// posix_fallocate, so all of them are allocated at start, on the launcher's
// NUMA node: the ranks' first touch places nothing. On a two-socket server
// half the ranks would then write their slots across the link and every
// reader would cross it again. move_to_numa_node() migrates the whole pages of a range that only
// the caller has touched (its slots, its shared buffers) to `node`, and sets
// that node as the range's preferred policy, so each slot is written locally
// and crosses the link at most once, to its readers.
//
// The node comes from AXON_NUMA_NODE, which axon-launch exports when it binds
// a rank within one node (--bind core or numa); without it nothing moves.
//
// Thread safety: any thread; the kernel serializes the migration.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

namespace axonml::distributed::shm {

// The NUMA nodes this process may place memory on (its cpuset's), in
// order; {0} when the kernel has no NUMA support.
std::vector<int> allowed_numa_nodes();
// Whether `node` is one of them.
bool numa_node_allowed(int node);

// AXON_NUMA_NODE, read once: the node this rank is bound to, or nullopt.
// Throws InvalidArgument, naming the nodes it may use, when the process
// cannot place memory on that node.
std::optional<int> bound_numa_node();

// Faults in and migrates the whole pages within [begin, begin + bytes) to
// `node` (pages other processes have mapped stay where they are). Returns the
// number of pages now on `node` (0 when the kernel has no NUMA support).
// Best effort: never throws.
std::size_t move_to_numa_node(void* begin, std::size_t bytes, int node);

// move_to_numa_node() to bound_numa_node(), when there is one.
void place_on_bound_node(void* begin, std::size_t bytes);

}  // namespace axonml::distributed::shm
