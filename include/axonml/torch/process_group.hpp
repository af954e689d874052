// ProcessGroupAxon: the axonml shared-memory runtime as a PyTorch (1.13)
// c10d process group, the backend "axon" of torch.distributed.
//
// Each process group (the default one and every new_group) builds its own
// arena through the c10d Store PyTorch passes in (StoreBackend: an anonymous
// memfd, nothing in /dev/shm), so it works under any launcher on one machine.
// Every op checks its arguments on the calling thread (InvalidArgument, a
// RuntimeError in Python) and returns a Work whose getFuture() completes with
// the output tensors; errors from the run (a dead peer, a timeout, ranks
// that disagree) surface from wait() and the future. Ops run in call order:
//   - a collective of at most AXON_TORCH_INLINE_BYTES bytes (default
//     kDefaultInlineBytes) runs on the calling thread itself when the group
//     has nothing queued or running and every peer has already entered it
//     or is about to run it on its own caller's thread (Backend::announce_next),
//     or does either within kInlinePatience, and its Work is complete when the
//     call returns: for a short op, handing it to another thread and back
//     costs more than the op. Otherwise it goes to the communication thread,
//     so an async op never blocks its caller waiting for peers;
//   - other collectives run on the group's communication thread, so that
//     async_op=True and DDP's bucket all-reduces overlap with what the caller
//     does next (AXON_TORCH_INLINE_BYTES=0 sends every collective there);
//   - an op issued from a callback of this group's op (a future's then(),
//     e.g. DDP's PowerSGD hook) runs at once on the thread running the callback;
//   - sends and receives each run on a thread of their own, so a posted
//     irecv holds up neither collectives nor sends.
//
// Reductions (SUM, AVG, PRODUCT, MIN, MAX) run in the runtime for float32,
// float64, bfloat16, float16, int32 and int64; other dtypes and the bitwise
// ops (BAND, BOR, BXOR, integer and bool tensors only) gather every rank's
// tensor and combine them locally in rank order. Data movement works for
// every dtype. Non-contiguous tensors go through a contiguous copy. CPU
// tensors only; recv from any source is not supported.
//
// Thread safety: as any c10d::ProcessGroup (ops may be called from any
// thread; they run in the order they were called).
#pragma once

#include "axonml/distributed/cxx20.hpp"

#include <sys/types.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace axonml::distributed {
class StoreBackend;
}

namespace axonml::torch {

class CommThread;

class ProcessGroupAxon final : public c10d::ProcessGroup {
 public:
  // Collective over the `size` processes sharing `store`; `timeout` bounds
  // every wait for a peer (0: AXON_TIMEOUT or 300 s). `global_ranks` are the
  // members' ranks in the job (PyTorch's global_ranks_in_group; empty: the
  // group is the whole job, as the default group is), for messages.
  //
  // While it sets up, the group also gives up (PeerFailure) when one of its
  // members has exited, as another axon group of this process (one that
  // watches it) saw: the set-up could only wait for the group's timeout.
  //
  // `shared_bytes` reserves room in the group's arena for place_in_arena()
  // (nullopt: AXON_TORCH_SHARED_MB, default 0); every rank's placed tensors
  // share it, and it is taken from memory when the group is made.
  //
  // `job_size`: the job's processes on this machine (the Python module
  // passes torch.distributed's world size under an axon default group, else
  // LOCAL_WORLD_SIZE where set, else the world size), which a subgroup needs
  // to tell whether its ranks' waits may spin: new_group([0, 1]) of eight
  // processes on two cores must yield at once, as the default group's do
  // (ad::StoreOptions::job_size). 0: `size`.
  ProcessGroupAxon(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                   std::chrono::milliseconds timeout, std::vector<int> global_ranks = {},
                   std::optional<std::size_t> shared_bytes = std::nullopt, int job_size = 0);
  ~ProcessGroupAxon() override;

  // The creator torch.distributed.Backend.register_backend expects.
  static c10::intrusive_ptr<c10d::ProcessGroup> create(const c10::intrusive_ptr<c10d::Store>& store,
                                                       int rank, int size,
                                                       std::chrono::milliseconds timeout,
                                                       std::vector<int> global_ranks = {},
                                                       std::optional<std::size_t> shared_bytes = std::nullopt,
                                                       int job_size = 0);

  const std::string getBackendName() const override { return "axon"; }

  // Lets every queued collective and send finish, cancels receives still
  // waiting for a message (their wait() raises; the group's shared memory
  // is marked failed, so peers' ops on it raise too), and returns when the
  // group's threads hold nothing of any op. The destructor does this; so
  // does finish_all_pending(). Call it without the GIL.
  void finish_pending();
  // finish_pending() on every live group of this process. The Python module
  // runs it at interpreter exit (atexit), while the threads can still take
  // the GIL to drop the Python objects of their last ops: afterwards that
  // would end the process ("terminate called") or hang it.
  static void finish_all_pending();
  // The program is ending (the Python module calls this at interpreter exit,
  // atexit): finish_all_pending(), then leave every live group for good, so
  // that a peer waiting for this rank there (a receive, a collective) fails
  // naming it, and release every peer already waiting in a collective (the
  // group is aborted for them); from now on a rank other than 0 does not
  // wait for the others as its default group goes (that wait keeps a later
  // init_process_group() off the old store, and nothing comes later now).
  // `uncaught_type` and `uncaught_text` name the exception the program ends
  // on ("KeyboardInterrupt", ""), empty when it ends normally: the peers
  // left waiting are told it. Call it without the GIL.
  static void program_ends(const std::string& uncaught_type = {}, const std::string& uncaught_text = {});
  // The job's processes that this process's live groups have seen exit: for
  // each, its global rank and "global rank 2 (pid 123) exited or was killed,
  // as this process's axon group of global ranks [0, 1, 2] saw". The Python
  // module's watch on PyTorch's store-based barrier at the end of
  // new_group() asks, so that a process that died before it came there does
  // not leave the others waiting out new_group's timeout.
  // Only groups of the current world count (see world_begins()): a group
  // the program still holds from a world it has destroyed numbers its
  // members as that world did.
  // With `with_left`, also the members of the current world's default group that have left
  // it for good (their program ended, or it called destroy_process_group()),
  // though their processes may still run: they come to no new group of this
  // world either.
  static std::vector<std::pair<int, std::string>> exited_processes(bool with_left = true);
  // The process to name when the c10d store failed under this process: under
  // env:// and tcp:// the store lives in global rank 0's process. Looks for
  // that process among exited_processes() for up to a second (a killed
  // process's sockets close a moment before a watch sees it exit: a review
  // saw a bare "Connection reset by peer"), calling `between_looks` before
  // each look; else any process of the job that exited (not one that only
  // left the default group: it may have finished its work). Empty when none.
  static std::optional<std::pair<int, std::string>> process_gone_with_the_store(
      const std::function<void()>& between_looks = {});
  // Records `reason` as the failure this process met outside its groups'
  // ops (the Python module's watch on PyTorch's store-based barrier: rank
  // 0's process, and the store with it, gone), as an op's PeerFailure is
  // recorded: when this rank then leaves its groups with peers waiting, they
  // are told that cause, not that this rank left (a review saw a survivor
  // blame its peer for rank 0's death).
  static void note_failure_elsewhere(const std::string& reason);
  // torch.distributed made a new world (the Python module calls this at the
  // store barrier that ends init_process_group): the groups made so far
  // belong to the old one, except `default_group` when it is an axon group.
  static void world_begins(const c10::intrusive_ptr<c10d::ProcessGroup>& default_group);

  // For torch.distributed's default group (the Python module's creator
  // calls it on a group made without global_ranks): as the group goes, its
  // ranks close the store together (close_store_together()). Under env://
  // and tcp:// rank 0 hosts that store and takes it down with the group,
  // and the program may call init_process_group() again at once, which must
  // meet a new store, not the old one. Without it (a C++ program, which
  // holds its store itself) the destructor waits for no peer; a C++ program
  // that makes its next TCPStore at the same port may call it too. No effect
  // on a group made with global_ranks.
  void close_store_together_as_it_goes();

  // Collectives up to this many bytes run on the caller's thread when the
  // group is idle, unless AXON_TORCH_INLINE_BYTES says otherwise.
  static constexpr std::int64_t kDefaultInlineBytes = 256 << 10;
  // How long a caller waits for its peers to enter a short collective before
  // handing it to the communication thread: about the cost of that hand-off.
  static constexpr std::chrono::microseconds kInlinePatience{50};

  using Work = c10d::Work;
  using Tensors = std::vector<at::Tensor>;

  // Moves the memory of `tensor`'s storage into this group's shared memory
  // (every tensor and view of that storage follows), where an all_reduce of
  // more than the one-round limit and 8 KiB (16 KiB at n=2, 8 KiB from n=4)
  // reads the peers' tensors in place, and each rank writes its reduced
  // slice into every rank's tensor, instead of copying through the slots
  // (0.44-0.68x the time at most sizes from 64 KiB here; docs/benchmarks.md).
  // After an all_reduce on it fails, the tensor's contents are undefined (a
  // peer stopped mid-op may still write the one 32 KiB piece it was in, then
  // fails too) and its arena memory is never reused. Collective: every rank calls it, in the same order
  // as the group's other collectives, with a tensor whose storage has the
  // same size (else every rank throws InvalidArgument naming the sizes, and
  // nothing moves). Returns true on every rank when all moved (or had moved
  // before), else false on every rank and nothing moved: the arena lacks
  // room (the constructor's shared_bytes; a group made without any has none,
  // whatever spare pages its arena has), or a rank's storage is not
  // PyTorch's own CPU memory (a numpy array's, from_blob's), whose sharing a
  // move would end. Blocks until done. The
  // memory moved from is kept until the storage goes (a numpy array taken
  // before still points at valid memory, no longer the tensor's); an op of
  // another group still running on the tensor finishes there, and its
  // result is lost. The arena memory goes back when the storage goes away
  // (in this process only), and stays valid until then, also after the
  // group is destroyed.
  // DDP's buckets get there through axonml_torch.zero_copy_allreduce_hook.
  bool place_in_arena(const at::Tensor& tensor);
  // Whether `tensor`'s storage lies in this group's shared memory.
  bool in_arena(const at::Tensor& tensor) const;
  // Whether the group was made with room for place_in_arena() (the
  // constructor's shared_bytes): false, it places nothing.
  bool has_room_for_placing() const { return shared_room_; }
  // allreduce() of one tensor that first places it as place_in_arena() does,
  // in the same op: when every rank's tensor is (or can be moved) there, the
  // all-reduce reads them in place; when one rank's cannot, every rank
  // all-reduces a private buffer (a tensor already there through a private
  // copy), so ranks whose tensors lie in different places still meet in one
  // all-reduce. DDP's join() hands a joined rank fresh zero buckets while the
  // others' lie in the arena; zero_copy_allreduce_hook runs this. Collective,
  // asynchronous like allreduce(); a non-contiguous tensor, or one the
  // runtime has no kernel for, is never moved.
  c10::intrusive_ptr<Work> allreduce_in_arena(at::Tensor& tensor, const c10d::AllreduceOptions& opts = {});

  // The options default as ProcessGroupGloo's do, so that code holding this
  // type (not c10d::ProcessGroup) can call pg->allreduce(tensors).
  c10::intrusive_ptr<Work> broadcast(Tensors& tensors,
                                     const c10d::BroadcastOptions& opts = c10d::BroadcastOptions()) override;
  c10::intrusive_ptr<Work> allreduce(Tensors& tensors,
                                     const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<Work> allreduce_coalesced(
      Tensors& tensors, const c10d::AllreduceCoalescedOptions& opts = c10d::AllreduceCoalescedOptions()) override;
  c10::intrusive_ptr<Work> reduce(Tensors& tensors, const c10d::ReduceOptions& opts = c10d::ReduceOptions()) override;
  c10::intrusive_ptr<Work> allgather(std::vector<Tensors>& outputs, Tensors& inputs,
                                     const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                           const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<Work> allgather_coalesced(std::vector<Tensors>& outputs, Tensors& inputs,
                                               const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<Work> gather(std::vector<Tensors>& outputs, Tensors& inputs,
                                  const c10d::GatherOptions& opts = c10d::GatherOptions()) override;
  c10::intrusive_ptr<Work> scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                                   const c10d::ScatterOptions& opts = c10d::ScatterOptions()) override;
  c10::intrusive_ptr<Work> reduce_scatter(
      Tensors& outputs, std::vector<Tensors>& inputs,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                         std::vector<int64_t>& output_splits,
                                         std::vector<int64_t>& input_splits,
                                         const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<Work> alltoall(Tensors& outputs, Tensors& inputs,
                                    const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<Work> barrier(const c10d::BarrierOptions& opts = c10d::BarrierOptions()) override;
  c10::intrusive_ptr<Work> send(Tensors& tensors, int dst, int tag) override;
  c10::intrusive_ptr<Work> recv(Tensors& tensors, int src, int tag) override;
  c10::intrusive_ptr<Work> recvAnysource(Tensors& tensors, int tag) override;

 private:
  // A collective whose data is `bytes`: runs on the caller's thread when it
  // is at most inline_bytes_, the group has no op queued or running and the
  // peers are there (see the class comment), else on thread_; the Work
  // completes with `outputs` once `run` returns, and its future with
  // `output_lists` when given (one list per rank: allgather_coalesced's).
  c10::intrusive_ptr<Work> collective(c10d::OpType type, Tensors outputs, std::int64_t bytes,
                                      std::function<void()> run,
                                      std::optional<std::vector<Tensors>> output_lists = std::nullopt);
  // A send or receive, always on `thread` (send_thread_ or recv_thread_):
  // run on the caller's thread, a receive whose send comes later would
  // block the caller that is to post it. A receive gives its src, which
  // the Work's sourceRank() returns.
  c10::intrusive_ptr<Work> point_to_point(CommThread& thread, c10d::OpType type, Tensors outputs,
                                          std::function<void()> run, int source_rank = -1);

  // Counts, in call order on thread_, a collective this rank refused before
  // collective() (its arguments failed a check here): see
  // distributed::Backend::count_refused_collective. Nothing here throws.
  void count_refused_collective() noexcept;
  class RefusalCount;  // every collective entry point holds one (see its definition)

  // Throws when a process another live group watches has exited (see the
  // constructor); called while this group sets up.
  void give_up_if_a_process_exited() const;
  // The job rank of the member a set-up failure's `reason` says went (in
  // give_up_if_a_process_exited()'s words), for axon-launch's summary; -1
  // when it names none or this process is not axon-launch's rank.
  int member_gone_in(const std::string& reason) const;
  static std::vector<std::pair<int, std::string>> left_default_group_locked();
  // "[0, 2, 3]": the group's members as ranks of the job.
  std::string describe_global_ranks() const;
  // Where an op's errors say it happened: "axon allreduce on rank 1 of 2
  // (global rank 2) ...". Made once per group and op and shared by the ops
  // that need it: building the text, and the two copies an op made of it,
  // took a fifth of this backend's own time in a 4-byte all_reduce (perf).
  // Converts to the text where a check takes it.
  class OpSite {
   public:
    explicit OpSite(std::shared_ptr<const std::string> text) : text_(std::move(text)) {}
    operator const std::string&() const { return *text_; }  // NOLINT: as the text itself
    const std::string& text() const { return *text_; }

   private:
    std::shared_ptr<const std::string> text_;
  };
  OpSite where_of(const char* op) const;
  OpSite make_op_site(const char* op) const;

  // The default group's last use of the store, as it goes: every rank
  // counts itself in, and rank 0 (which hosts the store under env:// and
  // tcp://, so takes it down with the group) waits a little for the others.
  void close_store_together();
  // For a group this rank is leaving for good, with every op of its own
  // finished: members already in a collective this rank never called would
  // wait for it until its process exits (or their timeout), so the group is
  // aborted for them, naming this rank. Nothing here throws.
  void release_ranks_left_waiting() noexcept;
  // Marks this rank gone from the group's arena (ArenaBackend::
  // leave_for_good()), once every op of its own has finished: a peer's
  // recv of a message it never sent, or a collective it never called, then
  // fails at once instead of when its process exits. Nothing here throws.
  void leave_for_good() noexcept;
  // release_ranks_left_waiting() on every live group.
  static void release_ranks_left_waiting_everywhere() noexcept;

  std::shared_ptr<distributed::StoreBackend> backend_;
  // The runtime's fork count when this group was made. A child forked from
  // this process (os.fork, a DataLoader worker) inherits the object but
  // neither its threads nor the rank's part: its destructor and the
  // program's end there touch nothing shared (a child's sys.exit aborted the
  // parent's group; a review).
  std::uint64_t fork_generation_;
  pid_t owner_pid_;  // the process that made the group (the rank)
  bool in_forked_child() const;
  // Throws InvalidArgument in a forked child, naming the op, both processes
  // and what the child may do: an op queued there would wait forever for a
  // group thread the child does not have. The op's name is c10d's for `type`.
  void refuse_in_forked_child(c10d::OpType type) const;
  void refuse_in_forked_child(const std::string& op) const;
  // The group's three communication threads; throws Error naming the limit.
  void start_threads();
  std::vector<int> global_ranks_;  // by group rank
  // where_of()'s texts of this backend's ops, made by the constructor.
  std::vector<std::pair<std::string, OpSite>> op_sites_;
  // This group among every group this process makes (1, 2, ...): what an
  // op of another group failed with is told apart from this group's own.
  std::uint64_t serial_;
  std::uint64_t world_;  // the world it belongs to (world_begins())
  bool subgroup_ = true;           // made with global_ranks (new_group), not the default group
  // Kept by a group made without global_ranks: see close_store_together().
  c10::intrusive_ptr<c10d::Store> default_group_store_;
  bool closes_store_together_ = false;  // close_store_together_as_it_goes()
  std::chrono::milliseconds timeout_;
  std::unique_ptr<CommThread> thread_;
  // Collectives up to this many bytes run on the caller's thread when the
  // group is idle (AXON_TORCH_INLINE_BYTES; default kDefaultInlineBytes).
  std::int64_t inline_bytes_;
  // Whether the arena has room for place_in_arena() (as rank 0 made it: the same on every
  // rank). Then an all_reduce the runtime might read in place first agrees
  // whether every rank's tensor lies there: a placed tensor on one rank and
  // a private one on another (a copy, a tensor share_memory_() moved out)
  // meet as private ones instead of as a collective mismatch.
  bool shared_room_ = false;
  // Point-to-point runs beside the collectives, sends and receives each in
  // call order on a thread of their own, so that a posted irecv never holds
  // up a collective or a send (batch_isend_irecv rings, irecv before a
  // collective). The arena's point-to-point layer is shared by a rank's
  // threads and locks what it shares.
  std::unique_ptr<CommThread> send_thread_;
  std::unique_ptr<CommThread> recv_thread_;
};

}  // namespace axonml::torch
