#include "torch/comm_thread.hpp"

#include <ATen/core/ivalue.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "base/text.hpp"
#include "shm/wait.hpp"
#include "torch/interrupts.hpp"

namespace axonml::torch {

namespace {
// The future's value types, made once: List[Tensor], List[List[Tensor]].
const c10::TypePtr& tensor_list_type() {
  static const c10::TypePtr type = c10::ListType::create(c10::TensorType::get());
  return type;
}
const c10::TypePtr& tensor_lists_type() {
  static const c10::TypePtr type = c10::ListType::create(tensor_list_type());
  return type;
}
}  // namespace

AxonWork::AxonWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs, int source_rank)
    : c10d::Work(rank, type),
      outputs_(std::move(outputs)),
      fork_generation_(distributed::shm::WaitContext::current_fork_generation.load(std::memory_order_relaxed)),
      source_rank_(source_rank) {}

// The future first: DDP's reducer chains its callbacks on it, and wait()
// callers must find it complete once they return. A future asked for later
// is made complete (getFuture()).
void AxonWork::complete() {
  c10::intrusive_ptr<c10::ivalue::Future> future;
  {
    const std::lock_guard<std::mutex> lock(future_mutex_);
    outcome_known_ = true;
    if (interrupted_) note_interrupted_op_ended();
    future = future_;
  }
  if (future) future->markCompleted(future_value());  // its callbacks run here, without the lock
  finish();
}

void AxonWork::fail(std::exception_ptr error) {
  c10::intrusive_ptr<c10::ivalue::Future> future;
  {
    const std::lock_guard<std::mutex> lock(future_mutex_);
    outcome_known_ = true;
    if (interrupted_) note_interrupted_op_ended();
    error_ = error;
    future = future_;
  }
  if (future) future->setError(error);
  finish(error);
}

c10::intrusive_ptr<c10::ivalue::Future> AxonWork::getFuture() {
  if (program_calls_ && future_taken_after_.load(std::memory_order_relaxed) == kFutureNotTaken) {
    std::uint64_t not_taken = kFutureNotTaken;
    future_taken_after_.compare_exchange_strong(not_taken, program_calls_->load(std::memory_order_relaxed),
                                                std::memory_order_relaxed);
  }
  const std::lock_guard<std::mutex> lock(future_mutex_);
  if (!future_) {
    future_ = c10::make_intrusive<c10::ivalue::Future>(output_lists_ ? tensor_lists_type() : tensor_list_type());
    // An op that has ended: completed here, before any callback is chained.
    if (outcome_known_ && error_) future_->setError(error_);
    if (outcome_known_ && !error_) future_->markCompleted(future_value());
  }
  return future_;
}

c10::IValue AxonWork::future_value() const {
  return output_lists_ ? c10::IValue(*output_lists_) : c10::IValue(outputs_);
}

std::optional<std::uint64_t> AxonWork::future_taken_after() const {
  const std::uint64_t taken = future_taken_after_.load(std::memory_order_relaxed);
  if (taken == kFutureNotTaken) return std::nullopt;
  return taken;
}

namespace {
// The threads whose run token this thread holds, and beside each the Work
// whose op or callbacks run under it, innermost last.
thread_local std::vector<CommThread*> tokens_held;
thread_local std::vector<const AxonWork*> works_running;
}  // namespace

const std::vector<CommThread*>& CommThread::tokens_held_here() { return tokens_held; }

bool CommThread::token_held_here() const {
  return std::find(tokens_held.begin(), tokens_held.end(), this) != tokens_held.end();
}

bool AxonWork::wait(std::chrono::milliseconds timeout) {
  // What the rest returns for such an op, without its clocks and checks
  // (c10d::Work::wait's synchronize() does nothing on the CPU).
  if (completed_without_error()) return true;
  // A forked child's wait() waited forever (a review).
  TORCH_CHECK(!distributed::shm::WaitContext::forked_since(fork_generation_) || isCompleted(), "axon ", c10d::opTypeToString(opType_), " on rank ", rank_,
              ": this process (pid ", ::getpid(), ") was forked after the op was made, and the op completes only in "
              "the rank's process");
  // From a callback (or an op) running on a group's thread: an op queued
  // behind it runs here, or it never would.
  // Not for a wait with a timeout: the ops run here wait for their peers
  // as long as the group's timeout, not the caller's.
  if (!isCompleted() && timeout == kNoTimeout) {
    const std::vector<CommThread*> held = CommThread::tokens_held_here();  // a copy: running ops nests further
    for (auto it = held.rbegin(); it != held.rend(); ++it) {
      if ((*it)->run_queued_through(this)) break;
    }
  }
  // In pieces, so that Python's signal handlers run meanwhile
  // (torch/interrupts.hpp): what one raises leaves the op going on, as a
  // timeout does.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const auto piece = [&] {
    if (timeout == kNoTimeout) return std::chrono::steady_clock::duration(kInterruptCheckPeriod);
    return std::clamp<std::chrono::steady_clock::duration>(deadline - std::chrono::steady_clock::now(),
                                                            std::chrono::steady_clock::duration::zero(),
                                                            kInterruptCheckPeriod);
  };
  std::unique_lock<std::mutex> lock(mutex_);
  while (!cv_.wait_for(lock, piece(), [&] { return completed_; })) {
    if (timeout != kNoTimeout && std::chrono::steady_clock::now() >= deadline) {
      const double seconds = std::chrono::duration<double>(timeout).count();
      TORCH_CHECK(false, "Operation timed out! axon ", c10d::opTypeToString(opType_), " on rank ", rank_,
                  ": wait(timeout=", axonml::distributed::format_seconds(seconds),
                  " s) ended before the op completed; the op goes on, and completes or fails by the group's "
                  "timeout");
    }
    lock.unlock();
    try {
      check_interrupts();
    } catch (...) {
      // The op goes on; if the program ends before it does, its group is
      // aborted instead of waited for (ProcessGroupAxon::program_ends).
      const std::lock_guard<std::mutex> future_lock(future_mutex_);
      if (!outcome_known_ && !interrupted_) {
        interrupted_ = true;
        note_interrupted_op_pending();
      }
      throw;
    }
    lock.lock();
  }
  // An op that failed because a peer left on its own Ctrl-C: the handler
  // due here runs now, not while Python prints the failure.
  const bool failed = exception_ != nullptr;
  lock.unlock();
  if (failed) check_interrupts();
  return c10d::Work::wait(kNoTimeout);
}

CommThread::CommThread(std::function<void(const std::exception*)> on_outcome)
    : on_outcome_(std::move(on_outcome)), thread_([this] { loop(); }) {}

CommThread::~CommThread() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  ready_.notify_one();
  thread_.join();
}

std::uint64_t CommThread::accept_program_call_locked(AxonWork& work) {
  const std::uint64_t number = program_calls_->load(std::memory_order_relaxed) + 1;
  program_calls_->store(number, std::memory_order_relaxed);
  work.note_accepted(program_calls_);
  return number;
}

void CommThread::push(c10::intrusive_ptr<AxonWork> work, std::function<void()> run) {
  unfinished_.fetch_add(1, std::memory_order_relaxed);
  bool nested;
  bool at_once = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    nested = busy_ && owner_ == std::this_thread::get_id();
    if (!nested) {
      const std::uint64_t number = accept_program_call_locked(*work);
      queue_.push_back(Task{work, std::move(run), number});
    } else {
      // From one of this thread's ops or its future's callbacks: after the
      // program's calls made before that op's future was taken. (The op
      // runs under the innermost token of this thread held here.)
      work->note_accepted(program_calls_);
      const AxonWork* running = nullptr;
      for (std::size_t i = tokens_held.size(); i-- > 0;) {
        if (tokens_held[i] == this) {
          running = works_running[i];
          break;
        }
      }
      const std::optional<std::uint64_t> after = running ? running->future_taken_after() : std::nullopt;
      const auto before =
          after ? std::find_if(queue_.begin(), queue_.end(), [&](const Task& t) { return t.place > *after; })
                : queue_.begin();
      at_once = before == queue_.begin();
      if (!at_once) queue_.insert(before, Task{work, std::move(run), *after});
    }
  }
  if (at_once) {
    // Queued first, it would wait for the very thread that waits for it.
    run_and_complete(work, run);
  } else if (nested) {
    // Behind ops still queued: they run here first, then it, as it did
    // before it was placed (at once, nested). Left queued, a callback that
    // waits on its future (PowerSGD's hook does, on each of its
    // all_reduces) would wait for the very thread it blocks.
    run_queued_through(work.get());
  } else {
    ready_.notify_one();
  }
}

bool CommThread::idle() {
  std::lock_guard<std::mutex> lock(mutex_);
  return idle_locked();
}

void CommThread::wait_idle() {
  std::unique_lock<std::mutex> lock(mutex_);
  drained_.wait(lock, [&] { return idle_locked(); });
}

bool CommThread::take_if_idle(AxonWork& work, std::uint64_t& place) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!idle_locked() || stopping_) return false;
  busy_ = true;
  owner_ = std::this_thread::get_id();
  place = accept_program_call_locked(work);
  return true;
}

bool CommThread::run_here_or_push(const c10::intrusive_ptr<AxonWork>& work, std::function<void()> run,
                                  const std::function<void()>& committed,
                                  const std::function<bool(std::chrono::nanoseconds)>& peers_ready,
                                  std::chrono::microseconds patience) {
  std::uint64_t place = 0;
  if (!take_if_idle(*work, place)) {
    push(work, std::move(run));
    return false;
  }
  unfinished_.fetch_add(1, std::memory_order_relaxed);
  // Whatever the peers do, the op runs now: on this thread, or first in the
  // queue of an idle thread.
  committed();
  // The first look may spin a moment, for at most half the patience (a long
  // AXON_SPIN_POLLS held async callers for tens of ms; a review); then
  // yielding between looks: with more ranks than cores the peer we wait for
  // may need this core to arrive. (A caller that had spun the whole patience
  // and then handed the op over was preempted by this thread, which then
  // spun in the op on the same core: 600 us at AXON_SPIN_POLLS=16384, bound,
  // against 130 with the yields.)
  const auto deadline = std::chrono::steady_clock::now() + patience;
  bool ready = peers_ready(patience / 2);
  while (!ready && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
    ready = peers_ready(std::chrono::nanoseconds::zero());
  }
  if (ready) {
    run_task(work, std::move(run));
    return true;
  }
  {
    // Ops queued while we held the token were called after this one.
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_front(Task{work, std::move(run), place});
    busy_ = false;
    owner_ = {};
  }
  ready_.notify_one();
  return false;
}

void CommThread::run_and_complete(const c10::intrusive_ptr<AxonWork>& work, const std::function<void()>& run) {
  // This thread holds the run token while the op and its future's callbacks
  // run (they run in complete() or fail()).
  tokens_held.push_back(this);
  works_running.push_back(work.get());
  struct Release {
    ~Release() {
      tokens_held.pop_back();
      works_running.pop_back();
    }
  } release;
  // Run here by a Python wait or not, an op's own waits and its future's
  // callbacks (libtorch's, DDP's) are none of Python's (torch/interrupts.hpp).
  const InterruptibleWaits not_python(false);
  std::exception_ptr error;
  try {
    // A collective is no autograd op: like Gloo, which writes through data
    // pointers, it may write the result back into a non-contiguous view of a
    // leaf that requires grad (a transposed parameter) or of an inference
    // tensor, which copy_() refuses above the autograd and inplace-or-view
    // layers (found by two reviews). The callbacks that complete() runs
    // below keep the thread's own dispatch state.
    const at::AutoDispatchBelowADInplaceOrView below_autograd;
    run();
    if (on_outcome_) on_outcome_(nullptr);
  } catch (const std::exception& e) {
    error = std::current_exception();
    if (on_outcome_) on_outcome_(&e);
  } catch (...) {
    error = std::current_exception();
  }
  // Before the Work completes: its waiter may next ask whether anything is
  // still pending (has_unfinished_ops()).
  unfinished_.fetch_sub(1, std::memory_order_release);
  if (error) {
    work->fail(error);
  } else {
    work->complete();
  }
}

bool CommThread::run_queued_through(const AxonWork* work) {
  for (bool first = true;; first = false) {
    Task task;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto found = std::find_if(queue_.begin(), queue_.end(), [&](const Task& t) { return t.work.get() == work; });
      if (found == queue_.end()) return !first;  // run already, by the last task taken here
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    const bool last = task.work.get() == work;
    run_and_complete(task.work, task.run);
    if (last) return true;
  }
}

void CommThread::run_queued_here() {
  for (;;) {
    Task task;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    run_and_complete(task.work, task.run);
  }
}

void CommThread::run_task(c10::intrusive_ptr<AxonWork> work, std::function<void()> run) {
  run_and_complete(work, run);
  // Drop the op (its tensors, its closure) before handing the token back, so
  // that an idle thread holds nothing of it (see idle()).
  run = nullptr;
  work.reset();
  bool queued;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    busy_ = false;
    owner_ = {};
    queued = !queue_.empty();
  }
  // Ops called while this one ran wait for the communication thread.
  if (queued) {
    ready_.notify_one();
  } else {
    drained_.notify_all();
  }
}

void CommThread::loop() {
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      ready_.wait(lock, [&] { return (stopping_ && !busy_) || (!busy_ && !queue_.empty()); });
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      owner_ = std::this_thread::get_id();
    }
    run_task(std::move(task.work), std::move(task.run));
  }
}

}  // namespace axonml::torch
