// The calls of axon-launch's endpoints (a ShmBackend world and its groups)
// against this process's exit.
//
// A World with static storage duration is destroyed among the static
// destructors at exit, and its arena unmapped: a thread still inside a call
// on it ran on in the destroyed backend (SIGSEGV on rank 0, 6 runs of 45; a
// review), where under mpirun the same program got an InvalidArgument
// (src/mpi/mpi_runtime.cpp; both exits take the steps of
// shm/exit_steps.hpp). So the first counted
// call registers an atexit function. It runs before the destructors of the
// statics made before that call (`static World w = World::init();`), and
// only while a call is in flight on another thread (with none it does
// nothing: a static destructor of the program's may still make its calls):
//   1. it gives the calls in flight a second to end (their peers may be
//      completing them);
//   2. from then on every call begun is refused: CallInFlight aborts the job
//      ("rank R is exiting ... while a thread of it still called OP in group
//      G"), so that the peers' waits throw PeerFailure saying so, and throws
//      InvalidArgument;
//   3. after a second more, a wait still running ends (ends_waits_at_exit():
//      detail::check_wait aborts the job naming what it waited for, and
//      throws the same InvalidArgument), within one sleep slice;
//   4. it waits until no call is in flight (AXON_TIMEOUT and a second at
//      most, then it exits with status 1), then until 50 ms pass with no call
//      begun (a second at most), so that a refused thread has left the
//      library before the static destructors run.
// And before all that, always: it keeps every counted endpoint alive
// (EndpointCalls::set_owner), so that the static destructors destroy none:
// a thread between calls as the exit began (nothing was in flight, so
// nothing was refused), or one that calls again after its refusal, meets a
// live endpoint (its call runs, or is refused) until the process ends.
// Not covered: endpoints whose owners are statics made at or after the
// first call, such as every static ProcessGroup made by new_group (itself a
// call): their destructors run before this.
//
// The counting is kept off the call's cost (a 4-byte all-reduce takes
// ~110 ns, where two atomic read-modify-writes a call took ~10 ns): each
// endpoint counts its collectives with plain stores, as only the thread
// holding its claim (Backend::ThreadClaim) makes them; a call stores its
// count and then reads the exit's state with no fence between, and the exit,
// which refuses calls and then reads the counts, makes every thread of the
// process pass a full memory barrier in between (membarrier(2)), so that it
// either sees a call's count or the call sees the refusal. Where membarrier
// is refused (an old kernel, a seccomp filter), the calls fence themselves.
// Sends and receives, which any threads may make at once, count with
// read-modify-writes.
//
// Thread safety: any threads. A process forked from a rank's does nothing
// at its exit (its counts are its parent's).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

namespace axonml::distributed::shm {

class WaitContext;

namespace detail {
// The exit's state, read by every counted call in one load: kRefusing once
// calls are refused (step 2); kFenceInCall where membarrier is unavailable.
inline constexpr std::uint32_t kRefusing = 1;
inline constexpr std::uint32_t kFenceInCall = 2;
extern std::atomic<std::uint32_t> exit_state;
// Whether the exit's function is registered (once per process, by the first
// counted call: after the World's constructor has returned, so that the
// World's destructor runs after it).
extern std::atomic<bool> exit_registered;
void register_exit(const WaitContext& waits);
// Aborts the job through `waits` while the call is still counted (the exit
// must not destroy the arena under the abort's writes), takes the call off
// `in_flight` (by a plain store when `counted_alone`), and throws the
// refusal.
[[noreturn, gnu::cold]] void refuse_call(std::atomic<std::uint32_t>& in_flight, bool counted_alone, const char* op,
                                         const WaitContext& waits, const std::string& group);
}  // namespace detail

// Marks `waits` (an axon-launch rank's) as guarded: its waits end at exit
// (step 3 above), and its endpoints count their calls. REQUIRES: called in
// the process that attached the rank, before its first call.
void guard_exit(WaitContext& waits);

// Whether the exit has given up on the calls in flight (step 3): a wait of
// a guarded rank then ends.
bool ends_waits_at_exit();

// One endpoint's calls in flight and begun, which the exit reads. Counts
// nothing until count_for_exit() (an unguarded endpoint's: MockBackend,
// MPI's node arenas, the PyTorch backend's; a call there costs one branch).
class EndpointCalls {
 public:
  EndpointCalls() = default;
  ~EndpointCalls();  // leaves the exit's list
  EndpointCalls(const EndpointCalls&) = delete;
  EndpointCalls& operator=(const EndpointCalls&) = delete;

  // Counts this endpoint's calls from here on, for the exit of a process
  // whose rank is guarded. REQUIRES: before the endpoint's first call.
  void count_for_exit();
  bool counted() const { return counted_; }
  // The object that owns this endpoint (its Backend), which the exit keeps
  // alive: from the exit's first step on, it is never destroyed, so that a
  // thread calling it after the exit's steps (between calls when the exit
  // began, or calling again after its refusal) meets a live endpoint, not
  // freed memory; the process's end reclaims it. REQUIRES: counted().
  void set_owner(std::weak_ptr<void> owner);
  // Whether a call of this endpoint is in flight, as its owner is being
  // destroyed on a thread that is not in one (a program's bug, or a static
  // group destroyed at exit under a thread's call: the owner then leaks
  // rather than free what that call uses). Costs a membarrier.
  bool in_flight_on_other_threads() const;

 private:
  friend class CallInFlight;
  friend struct EndpointCallsList;

  bool counted_ = false;
  // Collectives, begun and ended by the thread holding the endpoint's claim
  // only (one at a time; nested calls on it add one each): plain stores.
  std::atomic<std::uint32_t> collectives_in_flight_{0};
  std::atomic<std::uint32_t> collectives_begun_{0};
  // Sends and receives, by any threads at once.
  std::atomic<std::uint32_t> messages_in_flight_{0};
  std::atomic<std::uint32_t> messages_begun_{0};
  std::weak_ptr<void> owner_;  // under EndpointCallsList's mutex
  // The exit's list of counted endpoints (EndpointCallsList).
  EndpointCalls* prev_ = nullptr;
  EndpointCalls* next_ = nullptr;
};

// One call of an endpoint, counted from its start to its end.
class CallInFlight {
 public:
  enum class Kind {
    Collective,  // under the endpoint's claim (Backend::ThreadClaim)
    Message,     // send or recv: any threads
  };
  // Throws InvalidArgument "<op> on rank R in group G: this process is
  // exiting ..." once the exit refuses calls, after aborting the job
  // through `waits`. `group()` names the group ("[0, 1]"); called only then.
  template <class Group>
  CallInFlight(EndpointCalls& calls, Kind kind, const char* op, const WaitContext& waits, Group&& group) {
    if (!calls.counted_) return;
    if (!detail::exit_registered.load(std::memory_order_acquire)) [[unlikely]] detail::register_exit(waits);
    alone_ = kind == Kind::Collective;
    if (alone_) {
      in_flight_ = &calls.collectives_in_flight_;
      in_flight_->store(in_flight_->load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      calls.collectives_begun_.store(calls.collectives_begun_.load(std::memory_order_relaxed) + 1,
                                     std::memory_order_relaxed);
    } else {
      in_flight_ = &calls.messages_in_flight_;
      in_flight_->fetch_add(1, std::memory_order_relaxed);
      calls.messages_begun_.fetch_add(1, std::memory_order_relaxed);
    }
    // The count's store before the state's load, in program order; the
    // exit's membarrier orders them for the other threads (see above).
    std::atomic_signal_fence(std::memory_order_seq_cst);
    std::uint32_t state = detail::exit_state.load(std::memory_order_relaxed);
    if (state != 0) [[unlikely]] {
      if ((state & detail::kFenceInCall) != 0) {
        std::atomic_thread_fence(std::memory_order_seq_cst);
        state = detail::exit_state.load(std::memory_order_relaxed);
      }
      if ((state & detail::kRefusing) != 0) detail::refuse_call(*in_flight_, alone_, op, waits, group());
    }
  }
  ~CallInFlight() {
    if (in_flight_ == nullptr) return;
    if (alone_) {
      in_flight_->store(in_flight_->load(std::memory_order_relaxed) - 1, std::memory_order_release);
    } else {
      in_flight_->fetch_sub(1, std::memory_order_release);
    }
  }
  CallInFlight(const CallInFlight&) = delete;
  CallInFlight& operator=(const CallInFlight&) = delete;

 private:
  std::atomic<std::uint32_t>* in_flight_ = nullptr;
  bool alone_ = false;
};

}  // namespace axonml::distributed::shm
