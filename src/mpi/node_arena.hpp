// A shared-memory arena for the ranks of one node, set up over MPI.
//
// Collective over `node` (ranks that share memory): local rank 0 creates a
// /dev/shm object under a fresh name (mode 0600, its pages reserved so that a
// full /dev/shm is an error here rather than a SIGBUS later), formats it for
// node.size() ranks and broadcasts the name; the others map it and check its
// header; after a barrier the creator removes the name, so from then on the
// memory lives only in the ranks' mappings and no crash can leak it.
#pragma once

#include <memory>
#include <vector>

#include "axonml/distributed/arena_backend.hpp"
#include "mpi/mpi_runtime.hpp"

namespace axonml::distributed::mpi {

// This rank's endpoint of its node's arena (ranks = local ranks of `node`),
// whose messages name node rank l by world_rank_of_node_rank[l].
// Throws Error on every rank of the node when the arena cannot be made.
// REQUIRES: world_rank_of_node_rank.size() == node.size().
std::shared_ptr<ArenaBackend> attach_node_arena(const Comm& node, int world_rank,
                                                std::vector<int> world_rank_of_node_rank);

}  // namespace axonml::distributed::mpi
