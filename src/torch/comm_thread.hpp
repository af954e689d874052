// CommThread: the one thread that runs a process group's operations, in the
// order they were queued, and the Work each of them completes.
//
// An op's Work completes (its future with the output tensors, or with the
// exception the op threw) when its function returns. The destructor runs
// what is queued, then joins.
//
// run_here_or_push() is the fast path for short ops: when nothing is queued
// or running and every peer is already waiting in the op (or arrives within
// a short patience), the caller runs the op itself, which saves the two
// cross-thread wake-ups (caller -> this thread -> the caller's wait()) that
// cost more than a small collective on a busy machine. When a peer is not
// there yet, the op goes to this thread as any other: a caller must never
// block in an async op until its peers arrive, since a peer may first need
// something from the caller (a send, an op on another group).
//
// Call order holds: an op runs on a caller's thread only when every op
// called before it has finished, and no op called after it starts before it
// ends. An op called from one of this group's ops or its future's callbacks
// (a callback that issues a collective, as DDP's PowerSGD hook does) takes
// its place right after the ops the program had called when it took that
// op's future (getFuture(), which then() needs): as if the callback had run
// then, which it does on a rank where the op was already complete (c10's
// then() runs the callback at once), provided then() follows getFuture()
// with no op called between (DDP and its hooks do so; the README tells users
// to). It then runs at once, nested, after
// those of them still queued, which run there first (queued, it would wait
// for the very thread that waits for it). It ran at once ahead of
// everything queued, and ranks whose callback ran on the calling thread ran
// it after those ops: same-shaped all_reduces were paired crosswise, wrong
// sums and no error (a review).
//
// Thread safety: every member from any thread.
#pragma once

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace axonml::torch {

class AxonWork final : public c10d::Work {
 public:
  // `source_rank`: a receive's src, which sourceRank() gives (as Gloo's
  // does); -1 for any other op, whose sourceRank() throws c10d's error.
  AxonWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs, int source_rank = -1);
  // An op whose future completes with one list of tensors per rank
  // (allgather_coalesced's List[List[Tensor]], as Gloo's), where result()
  // gives them all in one list. REQUIRES: before the op is run or queued.
  void complete_future_with_lists(std::vector<std::vector<at::Tensor>> output_lists) {
    output_lists_ = std::move(output_lists);
  }

  // Called once, on the communication thread.
  void complete();
  void fail(std::exception_ptr error);

  // With a timeout, a wait that ends first says which op on which rank
  // (c10d's own says only "Operation timed out!"; found by a review). The op
  // goes on: a later wait() can still see it complete. In a process forked
  // after the op was made, an op not yet complete never completes (its
  // thread stayed with the rank): the wait raises instead. On Python's main
  // thread, Python's signal handlers run while it waits, and what one raises
  // (Ctrl-C's KeyboardInterrupt) ends the wait as a timeout does.
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;

  // Whether the op has completed without an error: wait() would return true
  // at once. One lock, no clock: the common case of a short op that ran on
  // its caller's thread (a Python binding answers it without releasing the
  // GIL).
  bool completed_without_error() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return completed_ && !exception_;
  }

  std::vector<at::Tensor> result() override { return outputs_; }
  int sourceRank() const override { return source_rank_ >= 0 ? source_rank_ : c10d::Work::sourceRank(); }
  // The first call notes how many ops the program had called on the
  // CommThread by then: where its callbacks' ops take their place.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  // By CommThread, as it accepts the op: the count of the ops the program
  // has called on it (the ops not called from its own ops or callbacks).
  void note_accepted(std::shared_ptr<const std::atomic<std::uint64_t>> program_calls) {
    program_calls_ = std::move(program_calls);
  }
  // The count noted at the first getFuture(); none before.
  std::optional<std::uint64_t> future_taken_after() const;

 private:
  static constexpr std::uint64_t kFutureNotTaken = ~std::uint64_t{0};
  std::vector<at::Tensor> outputs_;
  std::optional<std::vector<std::vector<at::Tensor>>> output_lists_;  // complete_future_with_lists()
  // What the future completes with: output_lists_ when given, else outputs_.
  c10::IValue future_value() const;
  std::shared_ptr<const std::atomic<std::uint64_t>> program_calls_;
  std::atomic<std::uint64_t> future_taken_after_{kFutureNotTaken};
  std::uint64_t fork_generation_;  // shm::WaitContext's count of forks when made
  // Made by the first getFuture(): most ops' callers (dist.all_reduce)
  // never ask, and making one cost a tenth of this backend's own time in a
  // 4-byte all_reduce (perf). complete() and fail() fill it if it exists.
  std::mutex future_mutex_;
  bool outcome_known_ = false;      // complete() or fail() has run
  bool interrupted_ = false;        // a wait() ended by a signal handler before the op did
  std::exception_ptr error_;        // fail()'s
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  int source_rank_;
};

class CommThread {
 public:
  // `on_outcome` is told how every op ended, on the thread that ran it,
  // before its Work completes: nullptr when it returned, else what it
  // threw. It must not throw.
  explicit CommThread(std::function<void(const std::exception*)> on_outcome = {});
  ~CommThread();
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  // Queues `run` behind every op queued before it; called from the thread
  // that holds the run token (one of this thread's ops, or its future's
  // callbacks), it places it after the ops the program had called when it
  // took that op's future (see above), and runs it at once, nested, after
  // those of them still queued.
  void push(c10::intrusive_ptr<AxonWork> work, std::function<void()> run);

  // Whether no op is queued or running. Once idle, this thread holds
  // nothing of any op (no tensor, no callback): Python objects among them
  // need the GIL to go away, which the interpreter's end no longer grants.
  bool idle();
  // Blocks until idle(). Call it without holding the GIL: the ops it waits
  // for may need it.
  void wait_idle();
  // Whether an op is queued, or runs and has not returned yet. Unlike
  // idle(), false from the moment the last op has returned, before its Work
  // completes: the thread may still be dropping that op's objects then (which
  // can wait for the GIL), and a caller whose wait() has returned must not
  // see its op as still pending.
  bool has_unfinished_ops() const { return unfinished_.load(std::memory_order_acquire) != 0; }

  // Runs `run` on the calling thread and completes `work`, and returns true,
  // when no op is queued or running and `peers_ready` holds now or within
  // `patience`; otherwise queues it (ahead of ops called after it) and
  // returns false. `peers_ready(at_most)` may poll for up to `at_most`: the
  // first look is given half the patience (a peer a moment behind is then
  // seen without a system call), later looks, between which the caller
  // yields its core, nothing. `committed()` is called first when nothing is
  // queued or running: the op will then run at once, here or on this thread.
  bool run_here_or_push(const c10::intrusive_ptr<AxonWork>& work, std::function<void()> run,
                        const std::function<void()>& committed,
                        const std::function<bool(std::chrono::nanoseconds)>& peers_ready,
                        std::chrono::microseconds patience);
  // For AxonWork::wait() on a thread that runs one of this thread's ops or
  // its future's callbacks (and so holds the run token): when `work` is
  // queued here, runs the queue up to and including it, in order, nested,
  // and returns true. Queued, it would wait for the very thread that waits
  // for it (a callback of one all_reduce that waited on the next hung every
  // rank; a review).
  bool run_queued_through(const AxonWork* work);
  // The threads whose run token the calling thread holds, innermost last.
  static const std::vector<CommThread*>& tokens_held_here();
  // Whether the calling thread holds this thread's run token: it runs one of
  // its ops or their callbacks, so it must not wait for this thread to go
  // idle, nor destroy it (that joins the thread, perhaps itself).
  bool token_held_here() const;
  // For the holder of the run token: runs every op queued, in order, nested.
  // Afterwards this thread is idle but for the op the caller is in.
  void run_queued_here();

 private:
  struct Task {
    c10::intrusive_ptr<AxonWork> work;
    std::function<void()> run;
    // The count of program calls it comes after: its own number for a
    // program call, the count its placing future noted for a callback's.
    // Non-decreasing along the queue.
    std::uint64_t place = 0;
  };
  void loop();
  bool idle_locked() const { return !busy_ && queue_.empty(); }  // REQUIRES: mutex_ held
  // Counts a call of the program and hands `work` the count; returns it.
  std::uint64_t accept_program_call_locked(AxonWork& work);  // REQUIRES: mutex_ held
  // Takes the run token when idle (nothing queued or running), accepting
  // `work` as a program call (its number in `place`).
  bool take_if_idle(AxonWork& work, std::uint64_t& place);
  // Runs `run`, completes or fails `work` with what it threw (so the
  // future's callbacks run here, still holding the token), then hands the
  // token back. Called by the token's holder, outside the mutex.
  void run_task(c10::intrusive_ptr<AxonWork> work, std::function<void()> run);
  void run_and_complete(const c10::intrusive_ptr<AxonWork>& work, const std::function<void()>& run);

  std::mutex mutex_;
  std::condition_variable ready_;
  std::condition_variable drained_;  // notified when the token comes back with the queue empty
  std::deque<Task> queue_;
  bool stopping_ = false;
  bool busy_ = false;     // the run token: an op runs, on this thread or on a caller's
  std::thread::id owner_;  // the thread holding it, while busy_
  std::atomic<int> unfinished_{0};  // ops accepted whose run() has not returned
  // Ops called on this thread by the program (not from its ops or their
  // callbacks); shared with the Works, whose getFuture() reads it.
  std::shared_ptr<std::atomic<std::uint64_t>> program_calls_ = std::make_shared<std::atomic<std::uint64_t>>(0);
  std::function<void(const std::exception*)> on_outcome_;
  std::thread thread_;  // last: it starts in the constructor and reads the members above
};

}  // namespace axonml::torch
