// ArenaBackend: the shared-memory implementation of Backend.
//
// All ranks of a world share one arena (see src/shm/arena_layout.hpp and
// docs/arena.md) and run the same lock-free round protocol over it. The two
// ways to get one are its subclasses: MockBackend, whose ranks are threads of
// one process sharing a heap arena, and ShmBackend, whose ranks are the
// processes axon-launch starts, sharing the arena it creates (a memfd they
// inherit).
//
// Thread safety: one thread at a time per object for collectives; see
// Backend. send() and recv() may also be called from other threads while the
// object runs a collective or other sends and receives: they touch only the
// rank's point-to-point layer, which every endpoint of the rank shares and
// which locks what it shares (the PyTorch backend sends and receives on
// threads of their own).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "axonml/distributed/backend.hpp"

namespace axonml::distributed {

// A watched peer whose process has gone (ArenaBackend::exited_peers).
struct ExitedPeer {
  int rank;  // in the world the arena was made for
  int pid;
};

class ArenaBackend : public Backend {
 public:
  ~ArenaBackend() override;

  std::string_view name() const override { return name_; }
  int rank() const override;
  int world_size() const override;
  void abort(const std::string& reason) override;
  // From the arena's free space (whole pages, zeroed); nullptr when no free
  // block is large enough. Goes back to the arena with its last pointer.
  std::shared_ptr<std::byte> allocate_shared(std::size_t bytes) override;
  std::string describe_shared_memory() const override;
  bool peers_arrived() const override;
  bool peers_arrived_within_spin(std::chrono::nanoseconds at_most) const override;
  void announce_next() override;

  // The bytes of one member's slot: messages larger than this are chunked.
  std::size_t slot_bytes() const;
  // Whether [p, p + bytes) lies in this rank's mapping of the arena (as an
  // allocate_shared() buffer does): an all_reduce of more than the one-round
  // size and 8 KiB there reads the peers' buffers in place.
  bool contains(const void* p, std::size_t bytes) const;
  // The whole arena's size, the same on every rank.
  std::size_t arena_bytes() const;
  std::string describe_group() const override;
  // The peers this rank watches by process (ranks that met through a store:
  // StoreBackend) whose processes have exited, without waiting or touching
  // the arena; empty under axon-launch, which watches the ranks itself. Lets
  // a caller waiting elsewhere for the same processes (setting up another
  // group through a store) give up when one has gone.
  std::vector<ExitedPeer> exited_peers() const;
  // The peers (numbered as rank() is) that have left this arena for good
  // (leave_for_good(): PyTorch's destroy_process_group, or the end of the
  // program), though their processes may still run.
  std::vector<int> left_peers() const;
  // Why `peer` (numbered as rank() is) left, as its leave_for_good(why)
  // said; empty when it has not left or said nothing.
  std::string left_reason(int peer) const;
  // The ranks of this group (numbered as rank() is) that have entered a
  // collective this rank has not, and wait for it. A rank that leaves the
  // group for good with such ranks (PyTorch's destroy_process_group, or the
  // end of its program) aborts the group for them: otherwise they would wait
  // until its process exits, or for their timeout.
  std::vector<int> ranks_waiting_for_this_rank() const;
  // Says that this rank takes part in nothing more through this arena (this
  // group and any group made from it): from then on a peer's wait that still
  // needs this rank (a collective it never called, a recv of a message it
  // never sent) fails within 50 ms with PeerFailure naming it as having left,
  // instead of when its process exits or at the timeout. What it sent or
  // published before stays readable. REQUIRES: every op of this rank on the
  // arena has returned. Its later ops on any group of the arena (this one,
  // its parent, siblings, subgroups) throw InvalidArgument. Does nothing in
  // a child forked after the rank joined. `why`, when given, is how a peer
  // that comes to wait for this rank later explains it ("rank 1 left the
  // group (its program ended on an uncaught ValueError: ...)"); the arena's
  // first leave_for_good() says it, cut to 191 bytes.
  void leave_for_good(std::string_view why = {});

 protected:
  // The shared state (src/backends/arena_backend_impl.hpp); the backends
  // built on this one (shm, mock, MPI's node arenas) make theirs.
  struct Impl;

  ArenaBackend(std::string name, std::unique_ptr<Impl> impl);

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
  void do_label_next_collective(std::uint8_t step) override;
  void do_mark_after_refused_thread() override;

 private:
  std::string name_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace axonml::distributed
