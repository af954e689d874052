// Backend: the communication interface every transport implements.
//
// A Backend is one rank's endpoint in a communicator of world_size() ranks.
// Collectives are called by every rank of the communicator in the same order
// with matching arguments; they block until this rank's part is done and, for
// reductions, give every rank bitwise identical results.
//
// The public methods check every size and rank once, here, and throw
// InvalidArgument naming the op, the rank and the sizes; implementations
// override the protected do_* methods and may assume valid arguments.
//
// Buffer rules (count = elements per rank, n = world_size()):
//   all_reduce      data: count, in place
//   broadcast       data: count on every rank, src's is sent
//   all_gather      send: count, recv: n * count (rank r's block at r * count)
//   reduce_scatter  send: n * count, recv: count (block r of the result)
//   gather          send: count, recv: n * count on dst (ignored elsewhere)
//   scatter         send: n * count on src (ignored elsewhere), recv: count
//   reduce          send: count, recv: count on dst (ignored elsewhere)
//   all_to_all      send: n * count, recv: n * count (send block m goes to
//                   rank m; recv block m came from rank m)
//   send / recv     point to point within this communicator: a recv takes
//                   only messages sent on the same communicator (never one a
//                   subgroup's endpoint sent), from src, with its tag; those
//                   arrive in the order they were sent. A send completes even
//                   when its peer receives only after a collective. dst may
//                   be this rank itself: the message waits for its own recv.
//                   A recv whose buffer is not the message's size throws
//                   InvalidArgument naming both, and takes the message (as an
//                   MPI receive that truncates): the next recv gets the next.
// In place: besides all_reduce, send and recv may overlap as "this rank's
// block" at no cost: all_gather's and gather's (on dst) send may be the
// caller's block of recv (recv + rank * count), reduce_scatter's recv the
// caller's block of send, scatter's recv on src its block of send, reduce's
// recv on dst its send. Any other overlap (all_to_all's in any way) copies
// send first: memory for a second buffer of send's size, for the call.
// Results are as with separate buffers either way.
//
// A group whose ranks called different collectives (CollectiveMismatch) stays
// unusable: every later collective on it throws the same mismatch, rather
// than exchanging data with ranks that disagree on what comes next.
//
// Thread safety: one thread at a time per Backend object for collectives.
// A collective (or new_group) called while another thread of this rank is
// inside one on the same object throws InvalidArgument rather than mixing
// the two calls' traffic. Different Backend objects may be used
// concurrently: the ranks of a mock world, and one rank's world and subgroup
// endpoints (a communication thread per group). send and recv may run on a
// thread of their own beside the collectives (the PyTorch backend does).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include "axonml/distributed/dtype.hpp"

namespace axonml::distributed {

class Backend {
 public:
  virtual ~Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  virtual std::string_view name() const = 0;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  template <Element T> void all_reduce(std::span<T> data, ReduceOp op);
  template <Element T> void broadcast(std::span<T> data, int src);
  template <Element T> void all_gather(std::span<const std::type_identity_t<T>> send, std::span<T> recv);
  template <Element T> void reduce_scatter(std::span<const std::type_identity_t<T>> send, std::span<T> recv, ReduceOp op);
  template <Element T> void gather(std::span<const std::type_identity_t<T>> send, std::span<T> recv, int dst);
  template <Element T> void scatter(std::span<const std::type_identity_t<T>> send, std::span<T> recv, int src);
  template <Element T> void reduce(std::span<const std::type_identity_t<T>> send, std::span<T> recv, int dst, ReduceOp op);
  template <Element T> void all_to_all(std::span<const std::type_identity_t<T>> send, std::span<T> recv);
  template <Element T> void send(std::span<T> data, int dst, int tag = 0);
  template <Element T> void recv(std::span<T> data, int src, int tag = 0);
  void barrier();

  // Collective over this communicator: every rank passes the same list of
  // distinct ranks (of this communicator). Returns the members' endpoint of
  // the new communicator, whose ranks are positions in `ranks`; returns
  // nullptr on ranks not in the list.
  std::shared_ptr<Backend> new_group(std::span<const int> ranks);

  // Hands this endpoint's collectives to thread `holder` until
  // release_collectives(): meanwhile a collective called from any other
  // thread of this rank throws InvalidArgument quoting `why` (a string that
  // outlives the hold). For an owner that lets a thread of its own run a
  // series of collectives while it goes on (GradientSynchronizer's Overlapped
  // buckets): a collective of the owner's slipped in between two of them
  // would run out of step with the other ranks, in a different order on
  // each. Throws InvalidArgument when another thread is inside a collective
  // here or holds it already; holding it again for the same thread keeps
  // the hold, and errors then quote the new `why`. Not collective.
  void hold_collectives_for(std::thread::id holder, const char* why);
  // Ends the hold for `holder`; does nothing when it is not held for it.
  void release_collectives(std::thread::id holder);

  // Counts, on this rank, a collective that was refused before it reached
  // the transport (its arguments failed a check), as if it had been made.
  // Why: the peers may be in that call, waiting; this rank's next call would
  // otherwise pair with it and every rank would get another step's data
  // with no error (found by a review). Counted, the next call is out of
  // step and every rank gets a CollectiveMismatch saying so; a call every
  // rank refused leaves them in step, and the group goes on. Every
  // collective entry point here does this for its own checks; a layer above
  // with checks of its own (the PyTorch backend) calls it. Not collective;
  // from the thread that makes this endpoint's collectives, in call order.
  void count_refused_collective() {
    const ThreadClaim claim(*this, "count_refused_collective");
    do_count_refused_collective();
  }

  // Marks the next collective this endpoint begins as step `step` (1-254)
  // of a layer built on the runtime, and part of what the ranks compare.
  // Why: a layer's own bookkeeping call (the PyTorch backend's comparison of
  // what its ranks asked for, before a reduction it combines itself) is an
  // ordinary all_gather or all_reduce to the runtime, and a peer's call of
  // the same op, type and size paired with it silently: that peer got the
  // layer's numbers as its data (found by a review). Marked, the two are a
  // CollectiveMismatch on both, whose message shows the step as "internal
  // step N" (with the name given to name_internal_step(), where the layer
  // gave one). The collective that begins next takes the mark and clears it;
  // a call refused before it began leaves it set, so callers clear it (0)
  // after the call. The MPI backend ignores it. Not collective; from the
  // thread that makes the collectives (refused, as a collective is, while
  // another thread is inside one here).
  void label_next_collective(std::uint8_t step) {
    if (step == 255) label_reserved(step);
    const ThreadClaim claim(*this, "label_next_collective", Refusal::NotACollective);
    do_label_next_collective(step);
  }

  // Marks the whole job failed: every rank's current and future waits throw
  // PeerFailure carrying `reason` (as MPI_Abort, without killing anyone).
  virtual void abort(const std::string& reason) = 0;

  // `bytes` of memory that every rank of this communicator can read, or
  // nullptr when the backend has none or no room is left. Not collective:
  // each rank allocates its own. Reductions of buffers that every rank placed
  // here skip the copy into the transport (zero copy); DDP buckets use it.
  // The memory goes back to the backend when the last copy of the returned
  // pointer is dropped; peers read and write it only inside collectives,
  // which return only when no peer touches it any more, so dropping it after
  // the last collective on it has returned is safe. After such a collective
  // throws instead, the buffer's contents are undefined (a peer may still be
  // writing them) and none of this rank's shared memory is given back any
  // more, so that no late write lands in a new buffer. Every rank must pass
  // its own buffer: ranks whose buffers overlap get InvalidArgument naming
  // them. Only the process that allocated it gives it back: a forked child
  // dropping its copies frees nothing.
  virtual std::shared_ptr<std::byte> allocate_shared(std::size_t bytes) {
    (void)bytes;
    return nullptr;
  }
  // What is left of the memory allocate_shared() draws from, for error
  // messages ("3 MiB free of the 64 MiB arena, ..."); empty when it has none.
  virtual std::string describe_shared_memory() const { return {}; }
  // Which group this endpoint is of, for messages: empty for the job's
  // world, else " in group [2, 1] (rank 2 of the job)", since rank() counts
  // within the group.
  virtual std::string describe_group() const { return {}; }

  // Whether every other rank of this communicator has already entered the
  // collective this endpoint calls next, so that the call will not wait for
  // anyone to arrive. A hint for callers that choose where to run a
  // collective (the PyTorch backend runs a short one on the caller's thread
  // only then); false when the transport cannot tell. Not synchronized with
  // collectives this endpoint runs meanwhile: ask between them.
  virtual bool peers_arrived() const { return false; }
  // peers_arrived(), polled for as long as this endpoint's waits spin before
  // they first yield the core (a few microseconds with a core per rank, not
  // at all when ranks outnumber cores; AXON_SPIN_POLLS), but never longer
  // than `at_most`: a peer that is a moment behind is seen without a system
  // call. Where the transport cannot tell, false.
  virtual bool peers_arrived_within_spin(std::chrono::nanoseconds /*at_most*/) const { return peers_arrived(); }
  // Tells the peers that this endpoint will call its next collective now,
  // with nothing else to do before it, so that their peers_arrived() counts
  // it as arrived: two ranks that reach a collective together then both see
  // the other there at once. Call it only when that holds (the call will be
  // made whatever the answer to peers_arrived()). Does nothing where the
  // transport cannot tell.
  virtual void announce_next() {}

  // Shorthands so that std::vector and span<float> arguments need no spelling out.
  void all_reduce(std::vector<float>& data, ReduceOp op) { all_reduce(std::span<float>(data), op); }
  void broadcast(std::vector<float>& data, int src) { broadcast(std::span<float>(data), src); }

 protected:
  Backend() = default;

  // The raw views the implementations see: bytes plus the element type.
  struct ConstBuffer {
    const std::byte* data;
    std::size_t count;
    DataType type;
  };
  struct MutableBuffer {
    std::byte* data;
    std::size_t count;
    DataType type;
  };

  virtual void do_all_reduce(MutableBuffer data, ReduceOp op) = 0;
  virtual void do_broadcast(MutableBuffer data, int src) = 0;
  virtual void do_all_gather(ConstBuffer send, MutableBuffer recv) = 0;
  virtual void do_reduce_scatter(ConstBuffer send, MutableBuffer recv, ReduceOp op) = 0;
  virtual void do_gather(ConstBuffer send, MutableBuffer recv, int dst) = 0;
  virtual void do_scatter(ConstBuffer send, MutableBuffer recv, int src) = 0;
  virtual void do_reduce(ConstBuffer send, MutableBuffer recv, int dst, ReduceOp op) = 0;
  virtual void do_all_to_all(ConstBuffer send, MutableBuffer recv) = 0;
  virtual void do_barrier() = 0;
  virtual void do_send(ConstBuffer data, int dst, int tag) = 0;
  virtual void do_recv(MutableBuffer data, int src, int tag) = 0;
  // REQUIRES: ranks valid and distinct (Backend::new_group checked them), in
  // the caller's order, not sorted.
  virtual std::shared_ptr<Backend> do_new_group(const std::vector<int>& ranks) = 0;
  // count_refused_collective(): advances the transport's call count where
  // it has one (the number its mismatch check compares).
  virtual void do_count_refused_collective() {}
  // Marks the transport's next collective so that its check fails on every
  // member, naming this rank's refusal of a second thread (held_by_another_thread).
  virtual void do_mark_after_refused_thread() {}
  // label_next_collective(): marks the transport's next descriptor.
  virtual void do_label_next_collective(std::uint8_t step) { (void)step; }

 private:
  // The argument checks, one per op; each throws InvalidArgument.
  void check_root(std::string_view op, int root, std::string_view role) const;
  void check_size(std::string_view op, std::string_view what, std::size_t actual,
                  std::size_t expected, std::string_view why) const;
  void check_peer(std::string_view op, int peer, std::string_view role) const;
  // `actual` elements must split into world_size() equal blocks.
  void check_blocks(std::string_view op, std::string_view what, std::size_t actual) const;
  void check_tag(std::string_view op, int tag) const;
  // Throws when `count` elements of `element_bytes` could not exist (their
  // byte count overflows), naming the op and the count. Inline: it is on the
  // way into every collective, and the comparison is against a constant.
  void check_count(std::string_view op, std::string_view what, std::size_t count,
                   std::size_t element_bytes) const {
    if (count > static_cast<std::size_t>(std::numeric_limits<std::ptrdiff_t>::max()) / element_bytes) [[unlikely]] {
      count_overflows(op, what, count, element_bytes);
    }
  }
  [[noreturn]] void count_overflows(std::string_view op, std::string_view what, std::size_t count,
                                    std::size_t element_bytes) const;
  // Throws when a buffer of `count` elements has no memory (a span made from
  // a null pointer and a size): the op would crash reading or writing it.
  void check_data(std::string_view op, std::string_view what, const void* data, std::size_t count) const {
    if (data == nullptr && count != 0) [[unlikely]] null_data(op, what, count);
  }
  [[noreturn]] void null_data(std::string_view op, std::string_view what, std::size_t count) const;
  // `send`, or a copy of it made in `copy` when its bytes overlap recv's
  // other than as `in_place` (the one in-place form the op allows, which the
  // caller compared): the op then gives what separate buffers give. A
  // partial overlap gave wrong results in silence (a review), and refusing
  // it on the root alone left the others in the op and the group out of
  // step (a diff review). Inline: a few compares on the way into the op.
  template <Element T>
  static std::span<const T> apart_from(std::span<const T> send, std::span<const T> recv, bool in_place,
                                       std::vector<T>& copy) {
    const auto* s = reinterpret_cast<const std::byte*>(send.data());
    const auto* r = reinterpret_cast<const std::byte*>(recv.data());
    if (in_place || send.empty() || recv.empty() || s >= r + recv.size_bytes() || r >= s + send.size_bytes()) {
      return send;
    }
    copy.assign(send.begin(), send.end());
    return copy;
  }
  // "all_reduce on rank 1 of 2", and the group when it is not the world.
  std::string where(std::string_view op) const;
  // Throws when `reduce_op` is none of ReduceOp's values (a cast from a bad
  // integer): the kernels would fall through to some reduction, and not
  // necessarily the same one on every transport (found by a review: ranks
  // ended with different results). Inline for the same reason as above.
  void check_reduce_op(std::string_view op, ReduceOp reduce_op) const {
    if (static_cast<std::uint8_t>(reduce_op) > static_cast<std::uint8_t>(ReduceOp::Average)) [[unlikely]] {
      reduce_op_invalid(op, reduce_op);
    }
  }
  [[noreturn]] void reduce_op_invalid(std::string_view op, ReduceOp reduce_op) const;
  // count x world_size(), or InvalidArgument when that overflows.
  std::size_t times_world_size(std::string_view op, std::string_view what, std::size_t count,
                               std::size_t element_bytes) const;

  // Whether a call refused because another thread has the endpoint is a
  // collective (whose refusal has consequences: held_by_another_thread).
  enum class Refusal { Collective, NotACollective };

  // One thread at a time: every collective entry point claims the endpoint
  // for its thread for the length of the call. A thread that already holds
  // it (a collective built from others on the same thread, or the holder of
  // hold_collectives_for()) passes; any other throws, naming `op`. A
  // refused collective is not the end of it (held_by_another_thread), and
  // since the refused thread may not touch the transport while another is
  // in it, what follows from the refusal waits for the next thread to claim
  // the endpoint afresh.
  class [[nodiscard]] ThreadClaim {
   public:
    ThreadClaim(Backend& backend, std::string_view op, Refusal refusal = Refusal::Collective) : backend_(backend) {
      const std::thread::id me = std::this_thread::get_id();
      std::thread::id holder{};
      if (backend.holder_.compare_exchange_strong(holder, me, std::memory_order_acquire,
                                                  std::memory_order_relaxed)) [[likely]] {
        claimed_ = true;
        if (backend.refusals_pending_.load(std::memory_order_relaxed) != 0) [[unlikely]] {
          backend.act_on_refusals();
        }
      } else if (holder != me) [[unlikely]] {
        backend.held_by_another_thread(op, refusal);
      }
    }
    ~ThreadClaim() {
      if (claimed_) backend_.holder_.store(std::thread::id{}, std::memory_order_release);
    }
    ThreadClaim(const ThreadClaim&) = delete;
    ThreadClaim& operator=(const ThreadClaim&) = delete;

   private:
    Backend& backend_;
    bool claimed_ = false;
  };
  // Throws InvalidArgument for `op`. A collective refused while the endpoint
  // was held for another thread (hold_collectives_for: the owner's call
  // slipped into a series the holder runs) counts as made, as one refused
  // for its arguments does, and the ranks that let it through see this one
  // out of step. One refused while another thread was inside a collective
  // marks this rank's next collective on the group so that it fails on
  // every member: two threads were calling at once, so the calls that got
  // through, here and on the peers, may have paired one thread's call with
  // the other's, and nothing in the calls tells them apart. Only counted,
  // ranks that refused alike (a steady alternation does) stayed in step and
  // went on pairing the threads' data crosswise with no error (a review:
  // 300 wrong sums of 300 at n=4).
  [[noreturn]] void held_by_another_thread(std::string_view op, Refusal refusal);
  // InvalidArgument: step 255 marks a call after a refused second thread.
  [[noreturn]] void label_reserved(std::uint8_t step) const;
  // What held_by_another_thread() left pending; by a thread that has just
  // claimed the endpoint.
  void act_on_refusals();
  // refusals_pending_: collectives refused under a hold, in the low bits,
  // and this flag for one refused while another thread was inside one.
  static constexpr std::uint32_t kRefusedBesideACall = 1u << 31;

  // Runs a collective's argument checks; when one throws, the call is
  // counted as refused (count_refused_collective) before the error goes on.
  // The try costs nothing on the way through.
  template <class Checks> void check_collective(Checks&& checks) {
    try {
      checks();
    } catch (...) {
      count_refused_collective();
      throw;
    }
  }

  // The thread inside a collective here or holding the endpoint; none when free.
  std::atomic<std::thread::id> holder_{};
  // Refusals not yet acted on (act_on_refusals, kRefusedBesideACall).
  std::atomic<std::uint32_t> refusals_pending_{0};
  // new_group's first mismatch as the transport threw it, and as new_group
  // told it (with this rank's list): a later call on the broken group gets
  // the transport's same text, and must be told the same, not that text with
  // the later call's list (a review). Touched under a ThreadClaim only.
  std::string new_group_mismatch_thrown_;
  std::string new_group_mismatch_told_;
  // Why it is held (hold_collectives_for), or nullptr while a collective
  // merely runs; read only to word the error.
  std::atomic<const char*> hold_reason_{nullptr};

  template <Element T> static ConstBuffer view(std::span<const T> s) {
    return {reinterpret_cast<const std::byte*>(s.data()), s.size(), data_type_v<T>};
  }
  template <Element T> static MutableBuffer view(std::span<T> s) {
    return {reinterpret_cast<std::byte*>(s.data()), s.size(), data_type_v<T>};
  }
};

// ---- Implementation of the typed entry points -------------------------------

template <Element T> void Backend::all_reduce(std::span<T> data, ReduceOp op) {
  const ThreadClaim claim(*this, "all_reduce");
  check_collective([&] {
    check_reduce_op("all_reduce", op);
    check_count("all_reduce", "data", data.size(), sizeof(T));
    check_data("all_reduce", "data", data.data(), data.size());
  });
  do_all_reduce(view(data), op);
}

template <Element T> void Backend::broadcast(std::span<T> data, int src) {
  const ThreadClaim claim(*this, "broadcast");
  check_collective([&] {
    check_root("broadcast", src, "src");
    check_count("broadcast", "data", data.size(), sizeof(T));
    check_data("broadcast", "data", data.data(), data.size());
  });
  do_broadcast(view(data), src);
}

template <Element T> void Backend::all_gather(std::span<const std::type_identity_t<T>> send, std::span<T> recv) {
  const ThreadClaim claim(*this, "all_gather");
  check_collective([&] {
    const std::size_t expected = times_world_size("all_gather", "send", send.size(), sizeof(T));
    check_size("all_gather", "recv", recv.size(), expected, "send count x world size");
    check_data("all_gather", "send", send.data(), send.size());
    check_data("all_gather", "recv", recv.data(), recv.size());
  });
  std::vector<T> copy;
  const auto apart = apart_from<T>(send, recv, send.data() == recv.data() + static_cast<std::size_t>(rank()) * send.size(), copy);
  do_all_gather(view(apart), view(recv));
}

template <Element T>
void Backend::reduce_scatter(std::span<const std::type_identity_t<T>> send, std::span<T> recv, ReduceOp op) {
  const ThreadClaim claim(*this, "reduce_scatter");
  check_collective([&] {
    check_reduce_op("reduce_scatter", op);
    const std::size_t expected = times_world_size("reduce_scatter", "recv", recv.size(), sizeof(T));
    check_size("reduce_scatter", "send", send.size(), expected, "recv count x world size");
    check_data("reduce_scatter", "send", send.data(), send.size());
    check_data("reduce_scatter", "recv", recv.data(), recv.size());
  });
  std::vector<T> copy;
  const auto apart = apart_from<T>(send, recv, recv.data() == send.data() + static_cast<std::size_t>(rank()) * recv.size(), copy);
  do_reduce_scatter(view(apart), view(recv), op);
}

template <Element T> void Backend::gather(std::span<const std::type_identity_t<T>> send, std::span<T> recv, int dst) {
  const ThreadClaim claim(*this, "gather");
  check_collective([&] {
    check_root("gather", dst, "dst");
    const std::size_t expected = times_world_size("gather", "send", send.size(), sizeof(T));
    if (rank() == dst) check_size("gather", "recv", recv.size(), expected, "send count x world size on dst");
    check_data("gather", "send", send.data(), send.size());
    if (rank() == dst) check_data("gather", "recv", recv.data(), recv.size());
  });
  std::vector<T> copy;
  const auto apart = rank() != dst ? send
                                   : apart_from<T>(send, recv, send.data() == recv.data() + static_cast<std::size_t>(rank()) * send.size(), copy);
  do_gather(view(apart), view(recv), dst);
}

template <Element T> void Backend::scatter(std::span<const std::type_identity_t<T>> send, std::span<T> recv, int src) {
  const ThreadClaim claim(*this, "scatter");
  check_collective([&] {
    check_root("scatter", src, "src");
    const std::size_t expected = times_world_size("scatter", "recv", recv.size(), sizeof(T));
    if (rank() == src) check_size("scatter", "send", send.size(), expected, "recv count x world size on src");
    if (rank() == src) check_data("scatter", "send", send.data(), send.size());
    check_data("scatter", "recv", recv.data(), recv.size());
  });
  std::vector<T> copy;
  const auto apart = rank() != src ? send
                                   : apart_from<T>(send, recv, recv.data() == send.data() + static_cast<std::size_t>(rank()) * recv.size(), copy);
  do_scatter(view(apart), view(recv), src);
}

template <Element T>
void Backend::reduce(std::span<const std::type_identity_t<T>> send, std::span<T> recv, int dst, ReduceOp op) {
  const ThreadClaim claim(*this, "reduce");
  check_collective([&] {
    check_reduce_op("reduce", op);
    check_root("reduce", dst, "dst");
    check_count("reduce", "send", send.size(), sizeof(T));
    if (rank() == dst) check_size("reduce", "recv", recv.size(), send.size(), "send count on dst");
    check_data("reduce", "send", send.data(), send.size());
    if (rank() == dst) check_data("reduce", "recv", recv.data(), recv.size());
  });
  std::vector<T> copy;
  const auto apart = rank() != dst ? send : apart_from<T>(send, recv, send.data() == recv.data(), copy);
  do_reduce(view(apart), view(recv), dst, op);
}

template <Element T>
void Backend::all_to_all(std::span<const std::type_identity_t<T>> send, std::span<T> recv) {
  const ThreadClaim claim(*this, "all_to_all");
  check_collective([&] {
    check_count("all_to_all", "send", send.size(), sizeof(T));
    check_blocks("all_to_all", "send", send.size());
    check_size("all_to_all", "recv", recv.size(), send.size(), "send count");
    check_data("all_to_all", "send", send.data(), send.size());
    check_data("all_to_all", "recv", recv.data(), recv.size());
  });
  do_all_to_all(view(send), view(recv));
}

template <Element T> void Backend::send(std::span<T> data, int dst, int tag) {
  check_peer("send", dst, "dst");
  check_tag("send", tag);
  check_count("send", "data", data.size(), sizeof(T));
  check_data("send", "data", data.data(), data.size());
  do_send(view(std::span<const T>(data)), dst, tag);
}

template <Element T> void Backend::recv(std::span<T> data, int src, int tag) {
  check_peer("recv", src, "src");
  check_tag("recv", tag);
  check_count("recv", "data", data.size(), sizeof(T));
  check_data("recv", "data", data.data(), data.size());
  do_recv(view(data), src, tag);
}

}  // namespace axonml::distributed
