// MpiBackend: a world whose ranks are the processes mpirun started.
//
// Every collective starts with a call exchange over a communicator of its
// own (a duplicate of MPI_COMM_WORLD, or a split of it for new_group): each
// rank sends every other rank the call's descriptor (op, type, count, root,
// reduce op, call number), so ranks that call different collectives get the
// shared-memory backend's CollectiveMismatch showing both sides, not a hang.
// Messages of up to 4 KiB per peer travel inside that exchange (one round);
// larger ones then move with MPI's nonblocking collectives. Reductions are
// combined here, with the sources in rank order, by the same kernels as the
// shared-memory backend, so flat results equal its results bit for bit
// (bf16 / f16 reduced in f32 and rounded once; Average = Sum x 1/n).
//
// Nothing blocks inside MPI: every wait polls its requests and ends after
// AXON_TIMEOUT seconds (default 300) with a Timeout naming the op and the
// ranks that never arrived. send() copies the data and returns at once, so
// whatever completes with unlimited buffering completes. A failing MPI call
// throws PeerFailure naming the op, the rank and the sizes. A rank whose
// call exchange gives up tells its peers: one that comes late throws
// PeerFailure with that reason instead of finishing the call, and the group
// throws PeerFailure at every later collective. When a wait was
// given up with MPI still holding requests that cannot be cancelled, the
// process calls MPI_Abort at exit instead of MPI_Finalize (which would wait
// for them), and mpirun ends the job. At exit the processes meet in a
// barrier of their own before MPI_Finalize; after any wait given up (a peer
// that hangs alive never comes), that barrier gets AXON_TIMEOUT before the
// process exits with status 1 without finalizing, so that mpirun still ends
// the job.
//
// Hierarchical mode (the default when several ranks share a node): the ranks
// of each node share an arena in /dev/shm, so that all_reduce is a
// shared-memory reduce-scatter inside the node, an MPI all-reduce of each
// slice across the nodes and a shared-memory all-gather; broadcast and
// all_gather likewise cross the network once per node. Every node must hold
// the same number of ranks, else the world runs flat. Subgroups are flat.
// Messages of up to 4 KiB take the flat path. A larger float sum is then
// (node 0's ranks in order) + (node 1's ranks in order) + ..., which may
// differ from the flat rank-order sum when there are several nodes, as any
// other order of the operations may: mostly in the last bits, but by as
// much as the values cancel, overflow or underflow (1 + 1e20 - 1e20 + 1 is
// 1 in rank order and 0 by nodes of two); every rank still gets the very
// same bytes.
//
// Environment:
//   AXON_HIERARCHICAL=0   flat MPI only
//   AXON_NODE_ID=N        the node this rank counts as (one machine can
//                         pretend to be several); default: ranks that share
//                         memory (MPI_Comm_split_type(MPI_COMM_TYPE_SHARED))
//   AXON_TIMEOUT=S        seconds any wait may last (default 300)
//   AXON_CHECK_COLLECTIVES=0  no descriptor check (set it on every rank or
//                         none; it exists to measure the check's cost)
//
// MPI is initialized (MPI_THREAD_MULTIPLE asked) by the first backend unless
// the program already did, and then finalized at exit; a program that
// initialized MPI itself finalizes it itself. MPI_Init waits for every
// process of the job: after AXON_TIMEOUT (10 s at least) without it returning, the process
// says so and exits 1 (a process that ended before World::init() left the
// others waiting there for ever).
//
// Thread safety: as Backend's (one thread at a time per object for
// collectives; different objects, and send / recv, from threads of their
// own), where MPI provides MPI_THREAD_MULTIPLE (Open MPI does; a lower level
// is logged as a warning, and calls from different threads must then not
// overlap).
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
  // naming the variable when one is malformed. What World::init() calls
  // under mpirun: once per process, as a process is one rank; a second call
  // throws InvalidArgument on the caller, before anything collective.
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

 protected:
  void do_all_reduce(MutableBuffer data, ReduceOp op) override;
  void do_broadcast(MutableBuffer data, int src) override;
  void do_all_gather(ConstBuffer send, MutableBuffer recv) override;
  void do_reduce_scatter(ConstBuffer send, MutableBuffer recv, ReduceOp op) override;
  void do_gather(ConstBuffer send, MutableBuffer recv, int dst) override;
  void do_scatter(ConstBuffer send, MutableBuffer recv, int src) override;
  void do_reduce(ConstBuffer send, MutableBuffer recv, int dst, ReduceOp op) override;
  void do_all_to_all(ConstBuffer send, MutableBuffer recv) override;
  void do_barrier() override;
  void do_send(ConstBuffer data, int dst, int tag) override;
  void do_recv(MutableBuffer data, int src, int tag) override;
  std::shared_ptr<Backend> do_new_group(const std::vector<int>& ranks) override;
  void do_count_refused_collective() override;
  void do_mark_after_refused_thread() override;

 private:
  struct Impl;  // src/mpi/mpi_backend.cpp
  explicit MpiBackend(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace axonml::distributed
