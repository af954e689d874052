// The two-level layout of a world: nodes of equally many ranks, each node's
// ranks sharing an arena, and the algorithms that cross the network once per
// node instead of once per rank.
//
//   node     the ranks of this node, ordered by world rank (local ranks)
//   cross    local rank r of every node, ordered by node index; one per r
//
// all_reduce (nodes x L ranks):
//   1. pad the message to L equal blocks; shared-memory reduce-scatter inside
//      the node leaves local rank r with block r reduced over the node;
//   2. all-reduce of block r over `cross` (the same block of every node), in
//      node order (mpi/ordered.hpp);
//   3. shared-memory all-gather of the blocks inside the node.
// Every rank ends with the same bytes: step 2 gives all nodes the same block,
// step 3 copies it. A float sum is thus (node 0's ranks in order) + (node 1's
// ranks in order) + ..., which equals the flat rank-order sum only when the
// world is one node, and otherwise may differ from it in the last bits. Reductions arrive here in their working type (bf16/f16
// already widened); Average is applied by the caller.
// broadcast: the src's local rank of every node receives over `cross`, then
//   broadcasts inside its node.
// all_gather: an MPI all-gather over `cross` (block r of every node), then a
//   shared-memory all-gather of those, then the blocks are put in world order.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "axonml/distributed/arena_backend.hpp"
#include "axonml/distributed/mpi_backend.hpp"
#include "mpi/mpi_runtime.hpp"
#include "mpi/waiting.hpp"

namespace axonml::distributed::mpi {

class Hierarchy {
 public:
  // Collective over `world`. Returns nullptr when the world should run flat:
  // options.hierarchical is false, every node holds one rank, or nodes hold
  // different numbers of ranks. Throws InvalidArgument when AXON_NODE_ID puts
  // ranks that share no memory on one node, or is set on some ranks only.
  static std::unique_ptr<Hierarchy> build(const Comm& world, const MpiOptions& options);

  int nodes() const { return nodes_; }
  int local_size() const { return node_.size(); }
  ArenaBackend& arena() const { return *arena_; }

  // REQUIRES: type is F32, F64, I32 or I64; op is not Average.
  // Each waits for MPI as `wait` says.
  void all_reduce(std::byte* data, std::size_t count, DataType type, ReduceOp op, const WaitContext& wait);
  void broadcast(std::byte* data, std::size_t count, DataType type, int src, const WaitContext& wait);
  void all_gather(const std::byte* send, std::byte* recv, std::size_t count, DataType type,
                  const WaitContext& wait);

 private:
  Hierarchy() = default;

  Comm node_;
  Comm cross_;
  int world_rank_ = 0;
  int nodes_ = 1;
  int node_index_ = 0;
  // Position node * L + local rank -> world rank, and back.
  std::vector<int> world_rank_of_;
  std::vector<int> position_of_;
  std::shared_ptr<ArenaBackend> arena_;
  // Scratch kept between calls: big messages would otherwise pay for fresh
  // pages on every call.
  std::vector<std::byte> padded_, slice_, across_, all_, scratch_;
};

}  // namespace axonml::distributed::mpi
