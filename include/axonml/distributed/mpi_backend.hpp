// MpiBackend: a world whose ranks are the processes mpirun started.
//
// Every Backend operation maps onto MPI (MPI_Allreduce, MPI_Bcast, ...) over
// a communicator of its own (a duplicate of MPI_COMM_WORLD, or a split of it
// for new_group), with errors returned, not fatal: a failing MPI call throws
// PeerFailure naming the op, the rank and the sizes. bf16 and f16 are widened
// to f32, reduced in f32 and rounded once; Average is Sum followed by one
// multiplication by 1/n (integers divide), as in every other backend.
//
// Hierarchical mode (the default when several ranks share a node): the ranks
// of each node share an arena in /dev/shm, so that all_reduce is a
// shared-memory reduce-scatter inside the node, an MPI all-reduce of each
// slice across the nodes and a shared-memory all-gather; broadcast and
// all_gather likewise cross the network once per node. Every node must hold
// the same number of ranks, else the world runs flat. Subgroups are flat.
//
// Environment:
//   AXON_HIERARCHICAL=0   flat MPI only
//   AXON_NODE_ID=N        the node this rank counts as (one machine can
//                         pretend to be several); default: ranks that share
//                         memory (MPI_Comm_split_type(MPI_COMM_TYPE_SHARED))
//
// MPI is initialized (MPI_THREAD_SERIALIZED or better) by the first backend
// unless the program already did, and then finalized at exit.
//
// Thread safety: one thread at a time per object; see Backend. Calls from
// different threads must not overlap (MPI_THREAD_SERIALIZED).
#pragma once

#include <memory>
#include <string>

#include "axonml/distributed/backend.hpp"

namespace axonml::distributed {

struct MpiOptions {
  // false: flat MPI for every op.
  bool hierarchical = true;
  // >= 0: this rank's node, instead of the ranks it shares memory with.
  int node_id = -1;
};

class MpiBackend final : public Backend {
 public:
  // This process's endpoint of MPI_COMM_WORLD; collective over it.
  static std::shared_ptr<MpiBackend> create(MpiOptions options);
  // Options from AXON_HIERARCHICAL and AXON_NODE_ID; throws InvalidArgument
  // naming the variable when one is malformed.
  static std::shared_ptr<MpiBackend> from_environment();

  ~MpiBackend() override;

  std::string_view name() const override;
  int rank() const override;
  int world_size() const override;
  void abort(const std::string& reason) override;

  // Whether all_reduce, broadcast and all_gather go through the node arenas.
  bool hierarchical() const;
  // The nodes the world spans when hierarchical(); 1 when flat.
  int nodes() const;

  struct Impl;

 protected:
  void do_all_reduce(MutableBuffer data, ReduceOp op) override;
  void do_broadcast(MutableBuffer data, int src) override;
  void do_all_gather(ConstBuffer send, MutableBuffer recv) override;
  void do_reduce_scatter(ConstBuffer send, MutableBuffer recv, ReduceOp op) override;
  void do_gather(ConstBuffer send, MutableBuffer recv, int dst) override;
  void do_scatter(ConstBuffer send, MutableBuffer recv, int src) override;
  void do_reduce(ConstBuffer send, MutableBuffer recv, int dst, ReduceOp op) override;
  void do_barrier() override;
  void do_send(ConstBuffer data, int dst, int tag) override;
  void do_recv(MutableBuffer data, int src, int tag) override;
  std::shared_ptr<Backend> do_new_group(const std::vector<int>& ranks) override;

 private:
  explicit MpiBackend(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace axonml::distributed
