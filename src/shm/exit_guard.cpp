#include "shm/exit_guard.hpp"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cassert>
#include <cstddef>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "axonml/distributed/error.hpp"
#include "shm/exit_steps.hpp"
#include "shm/wait.hpp"

namespace axonml::distributed::shm {

namespace detail {
std::atomic<std::uint32_t> exit_state{0};
std::atomic<bool> exit_registered{false};
}  // namespace detail

// The endpoints whose calls are counted, for the exit to read. Made once and
// never destroyed: an endpoint destroyed at exit (a static World's) still
// leaves it.
struct EndpointCallsList {
  std::mutex mutex;
  EndpointCalls* first = nullptr;

  static EndpointCallsList& instance() {
    static auto* list = new EndpointCallsList;
    return *list;
  }
  void add(EndpointCalls& calls) {
    const std::lock_guard lock(mutex);
    calls.next_ = first;
    if (first != nullptr) first->prev_ = &calls;
    first = &calls;
  }
  void remove(EndpointCalls& calls) {
    const std::lock_guard lock(mutex);
    (calls.prev_ != nullptr ? calls.prev_->next_ : first) = calls.next_;
    if (calls.next_ != nullptr) calls.next_->prev_ = calls.prev_;
  }
  // Calls in flight, and calls begun (wrapping), over every counted endpoint.
  std::uint32_t in_flight() {
    return sum(&EndpointCalls::collectives_in_flight_, &EndpointCalls::messages_in_flight_);
  }
  std::uint32_t begun() { return sum(&EndpointCalls::collectives_begun_, &EndpointCalls::messages_begun_); }
  using Count = std::atomic<std::uint32_t> EndpointCalls::*;
  std::uint32_t sum(Count collectives, Count messages) {
    const std::lock_guard lock(mutex);
    std::uint32_t total = 0;
    for (EndpointCalls* c = first; c != nullptr; c = c->next_) {
      total += (c->*collectives).load(std::memory_order_acquire) + (c->*messages).load(std::memory_order_acquire);
    }
    return total;
  }
  // Keeps the owner of every counted endpoint alive for the rest of the
  // process (EndpointCalls::set_owner). Reachable from `pinned`, never
  // destroyed: not a leak to LeakSanitizer, and no destructor of its runs.
  // The room is made before the list is locked: an owner whose other
  // references went meanwhile must not be destroyed under the lock (its
  // endpoint's destructor takes it), as it would be by a push_back that
  // throws.
  void keep_owners_alive() {
    static auto* pinned = new std::vector<std::shared_ptr<void>>;
    for (std::size_t endpoints = 0;;) {
      pinned->reserve(pinned->size() + endpoints);
      const std::lock_guard lock(mutex);
      endpoints = 0;
      for (EndpointCalls* c = first; c != nullptr; c = c->next_) ++endpoints;
      if (pinned->capacity() - pinned->size() < endpoints) continue;  // more came: make room again
      for (EndpointCalls* c = first; c != nullptr; c = c->next_) {
        // An owner being destroyed on another thread (expired) is left to it.
        if (auto owner = c->owner_.lock()) pinned->push_back(std::move(owner));
      }
      return;
    }
  }
};

EndpointCalls::~EndpointCalls() {
  if (counted_) EndpointCallsList::instance().remove(*this);
}

void EndpointCalls::set_owner(std::weak_ptr<void> owner) {
  assert(counted_);
  auto& list = EndpointCallsList::instance();
  const std::lock_guard lock(list.mutex);
  owner_ = std::move(owner);
}

void EndpointCalls::count_for_exit() {
  assert(!counted_);
  counted_ = true;
  EndpointCallsList::instance().add(*this);
}

namespace {

// Set by the exit once calls in flight outlasted their two seconds: the
// waits of guarded ranks end then (detail::check_wait).
std::atomic<bool> ending_waits{false};
// WaitContext::current_fork_generation in the process that attached the
// guarded rank: a child forked from it inherits the counts of its parent's
// threads, which never end in the child.
std::atomic<std::uint64_t> guarded_generation{0};
// The job's rank of the guarded endpoint, for the exit's log lines.
std::atomic<int> guarded_rank{-1};
// Whether this process registered for MEMBARRIER_CMD_PRIVATE_EXPEDITED
// (by the first counted call; read by the exit, or a group's deleter, on
// other threads).
std::atomic<bool> expedited_membarrier{false};

std::uint32_t in_flight() { return EndpointCallsList::instance().in_flight(); }
std::uint32_t begun() { return EndpointCallsList::instance().begun(); }

int membarrier(int command) { return static_cast<int>(::syscall(SYS_membarrier, command, 0U, 0)); }

// Makes every running thread of the process pass a full memory barrier, so
// that a count a call stored before this is seen by the loads after it,
// and a call that loads the exit's state after it sees what was set before.
void every_thread_passes_a_barrier() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (expedited_membarrier.load() && membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return;
  // The calls fence themselves where membarrier is unavailable.
  if ((detail::exit_state.load() & detail::kFenceInCall) != 0) return;
  // Registered, yet refused now: the slower global form (every CPU).
  (void)membarrier(MEMBARRIER_CMD_GLOBAL);
}

// From here every call begun is refused, and every call the counts miss
// (its count's store not yet visible) sees the refusal.
void refuse_calls() {
  detail::exit_state.fetch_or(detail::kRefusing);
  every_thread_passes_a_barrier();
}

// The exit's steps (shm/exit_steps.hpp) over this process's counted
// endpoints.
ExitSteps exit_steps() {
  ExitSteps steps;
  steps.backend = "ShmBackend";
  steps.goes_on_to = "the static destructors";
  steps.status_1_means = "before the static destructors";
  steps.rank = guarded_rank.load();
  steps.in_flight = [] { return std::uint64_t{in_flight()}; };
  steps.begun = [] { return std::uint64_t{begun()}; };
  steps.refuse_calls = refuse_calls;
  // A wait still running ends within a sleep slice (detail::check_wait),
  // aborting the job with what it waited for.
  steps.give_up_waits = [] { ending_waits.store(true); };
  return steps;
}

// The atexit function (register_exit): runs before the destructors of the
// statics made before the first counted call.
void exit_before_static_destructors() {
  if (WaitContext::forked_since(guarded_generation.load())) return;
  EndpointCallsList::instance().keep_owners_alive();
  if (in_flight() == 0) return;
  const ExitSteps steps = exit_steps();
  refuse_calls_then_wait_for_those_in_flight(steps);
  wait_until_calls_stop(steps);
}

}  // namespace

bool EndpointCalls::in_flight_on_other_threads() const {
  if (!detail::exit_registered.load(std::memory_order_acquire)) return false;  // no counted call yet
  every_thread_passes_a_barrier();
  return collectives_in_flight_.load(std::memory_order_acquire) + messages_in_flight_.load(std::memory_order_acquire) != 0;
}

namespace detail {

void register_exit(const WaitContext& waits) {
  static std::mutex mutex;
  const std::lock_guard lock(mutex);
  if (exit_registered.load(std::memory_order_relaxed)) return;
  guarded_rank.store(waits.names().job_rank(waits.rank()));
  expedited_membarrier.store(membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0);
  const int supported = membarrier(MEMBARRIER_CMD_QUERY);
  if (!expedited_membarrier.load() && (supported < 0 || (supported & MEMBARRIER_CMD_GLOBAL) == 0)) {
    exit_state.fetch_or(kFenceInCall);  // before exit_registered: a call that sees one sees both
  }
  if (std::atexit(exit_before_static_destructors) == 0) exit_registered.store(true, std::memory_order_release);
}

void refuse_call(std::atomic<std::uint32_t>& in_flight, bool counted_alone, const char* op, const WaitContext& waits,
                 const std::string& group) {
  const std::string rank = waits.names().rank(waits.rank());
  waits.abort(waits.rank(), rank + " is exiting (its main returned, or exit() was called) while a thread of it "
                                   "still called " + op + " in group " + group);
  std::string refusal = std::string(op) + " on " + rank + " in group " + group +
                        ": this process is exiting (its main returned, or exit() was called) and its World is "
                        "about to be destroyed, but a thread still calls this library; join every thread that "
                        "uses the library before main returns";
  if (counted_alone) {
    in_flight.store(in_flight.load(std::memory_order_relaxed) - 1, std::memory_order_release);
  } else {
    in_flight.fetch_sub(1, std::memory_order_release);
  }
  throw InvalidArgument(refusal);
}

}  // namespace detail

void guard_exit(WaitContext& waits) {
  guarded_generation.store(WaitContext::current_fork_generation.load(std::memory_order_relaxed));
  waits.end_waits_at_exit();
}

bool ends_waits_at_exit() { return ending_waits.load(std::memory_order_relaxed); }

}  // namespace axonml::distributed::shm
