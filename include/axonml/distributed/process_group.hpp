// ProcessGroup: a set of ranks that run collectives together.
//
// A group is built from a Backend (a communicator) and a list of its ranks.
// Creating a subgroup is collective over the parent: every rank of the parent
// calls with the same list, members and non-members alike (as in PyTorch).
// A subgroup communicates among its members only; on a non-member every
// collective throws InvalidArgument naming the rank and the group.
//
// rank() is the position in the group (-1 on a non-member), ranks() the
// members' ranks in the parent communicator, in the order given.
//
// Thread safety: as the underlying Backend: one thread at a time per group on
// each rank; different groups may be used from different threads at once,
// under mpirun too where MPI provides MPI_THREAD_MULTIPLE (see
// mpi_backend.hpp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "axonml/distributed/backend.hpp"
#include "axonml/distributed/tensor.hpp"

namespace axonml::distributed {

class ProcessGroup {
 public:
  // The group of every rank of `backend`.
  explicit ProcessGroup(std::shared_ptr<Backend> backend);
  // Collective over `backend`: the subgroup of `ranks` (distinct, in range).
  static ProcessGroup with_ranks(std::shared_ptr<Backend> backend, std::vector<int> ranks);
  // A world of one rank (MockBackend::single()).
  static ProcessGroup mock();

  // This rank's endpoint of the group's communicator. Throws on a non-member.
  Backend& backend() const;
  // The same for `op`: its InvalidArgument, on a non-member or a group
  // moved from, names op (the collectives in comm.hpp use it).
  Backend& member_backend(const char* op) const;
  const std::shared_ptr<Backend>& backend_ptr() const;
  // The communicator the group was carved from (ranks() refer to it).
  const std::shared_ptr<Backend>& parent() const { return parent_; }

  int rank() const;
  int world_size() const { return size(); }
  int size() const { return static_cast<int>(ranks_.size()); }
  const std::vector<int>& ranks() const { return ranks_; }
  bool contains(int rank) const;
  bool is_member() const { return communicator_ != nullptr; }

  // Collective over this group: a subgroup of it (ranks are group ranks).
  // Its shared memory goes back to the arena once every member has dropped
  // every copy of it.
  ProcessGroup new_group(std::vector<int> ranks) const;

  void barrier() const;
  void all_reduce_tensor(Tensor& tensor, ReduceOp op = ReduceOp::Sum) const;
  void broadcast_tensor(Tensor& tensor, int src = 0) const;
  // Shape [size(), ...tensor.shape()]: rank r's tensor at index r. Compares
  // element counts, not shapes (comm.hpp's all_gather()).
  Tensor all_gather_tensor(const Tensor& tensor) const;
  // Block rank() of the reduction of `tensor` split into size() equal blocks
  // (numel must divide evenly): shape [shape[0] / size(), ...] when dim 0
  // splits evenly, else the flat [numel / size()].
  Tensor reduce_scatter_tensor(const Tensor& tensor, ReduceOp op = ReduceOp::Sum) const;
  void send_tensor(const Tensor& tensor, int dst, int tag = 0) const;
  void recv_tensor(Tensor& tensor, int src, int tag = 0) const;

  // A tensor in memory the group's ranks share (the arena), so that
  // all-reducing it skips the copy into the transport when every rank passes
  // such a tensor. Zeroed; its memory goes back to the arena when the last
  // view of it is dropped (not after an all_reduce on it has thrown:
  // Backend::allocate_shared says why). Throws InvalidArgument naming the request and the
  // free space when the backend has no shared memory or no room (raise
  // axon-launch --arena-mb).
  Tensor alloc_shared(Shape shape) const;

  // "group [0, 2]" for messages: the members in the numbering of the
  // communicator the chain of groups started from (the job's ranks, for
  // groups made from a World). A subgroup of a subgroup adds its ranks in its
  // parent: "group [2, 1] (ranks [0, 1] of its parent group [2, 1, 0])".
  std::string describe() const;

 private:
  ProcessGroup(std::shared_ptr<Backend> parent, std::vector<int> ranks, std::shared_ptr<Backend> communicator,
               std::vector<int> parent_outer_ranks);

  std::vector<int> outer_ranks(const std::vector<int>& parent_ranks) const;
  bool is_nested() const;  // the parent is not the communicator the chain started from

  std::shared_ptr<Backend> parent_;
  std::vector<int> ranks_;
  std::shared_ptr<Backend> communicator_;  // null on non-members
  // For messages only: the rank of each member of parent_ in the
  // communicator the chain started from. Ranks a nested subgroup's messages
  // name would otherwise be its parent's, not the job's (a review).
  std::vector<int> parent_outer_ranks_;
};

}  // namespace axonml::distributed
