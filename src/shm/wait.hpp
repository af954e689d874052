// The one way this library waits for another rank.
//
// wait_until() polls a condition with a backoff that suits both a dedicated
// core and 8 ranks sharing 2 cores: a short spin with pause (a peer on
// another core usually answers within a microsecond), then sched_yield (hand
// the core to a rank that has work), then sleep on the doorbell's futex,
// which publishers ring. Every sleep is short enough that the abort flag, the
// launcher's death and the deadline are all noticed within ~50 ms (up to 1 s
// in oversubscribed worlds of more than 64 ranks: WaitContext::sleep_slice).
//
// A wait may also name the ranks it still needs (`needed`). Between sleeps it
// then checks them, when a launcher watches the job: a needed rank that has
// ended (RankControl::ended, written by the launcher) can never arrive, so
// the wait aborts the job naming it and throws PeerFailure, whatever the
// rank's exit status; and while a needed rank has not yet joined, the wait
// does not count towards the timeout (the launcher's start deadline bounds
// start-up), so a slow start is not mistaken for a hung peer; nor does the
// time the launcher held the job stopped (Ctrl-Z).
//
// Thread safety: any number of waiters and wakers, in threads or processes.
#pragma once

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "base/process_watch.hpp"
#include "base/rank_names.hpp"
#include "shm/arena_layout.hpp"
#include "shm/launcher_report.hpp"

namespace axonml::distributed::shm {

// A full (store-load) barrier. ThreadSanitizer rejects atomic_thread_fence, so
// its builds use a locked read-modify-write, a full barrier on x86 as well.
inline void full_barrier() {
#if defined(__SANITIZE_THREAD__)
  thread_local std::atomic<int> scratch{0};
  scratch.exchange(0, std::memory_order_seq_cst);
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
                std::chrono::nanoseconds timeout);
// Sleeps until either word changes from its expected value (futex_waitv,
// Linux 5.16+; on older kernels only the first word wakes it early).
void futex_wait_either(std::atomic<std::uint32_t>& first, std::uint32_t first_expected,
                       std::atomic<std::uint32_t>& second, std::uint32_t second_expected,
                       std::chrono::nanoseconds timeout);
void futex_wake_all(std::atomic<std::uint32_t>& word);
// FUTEX_WAKE system calls this process has made (all threads): lets tests
// check who wakes whom, e.g. that a round wakes its sleepers once.
std::uint64_t futex_wake_calls();

// ring() when the caller has already issued full_barrier() after making
// its condition true.
inline void ring_after_barrier(Doorbell& bell) {
  if (bell.sleepers.load(std::memory_order_relaxed) != 0) {
    bell.word.fetch_add(1, std::memory_order_relaxed);
    futex_wake_all(bell.word);
  }
}

// Wakes every sleeper of `bell`. Call after making a condition true (the
// condition's store may be relaxed or release: a fence here orders it before
// the check for sleepers).
inline void ring(Doorbell& bell) {
  full_barrier();
  ring_after_barrier(bell);
}

// WaitContext: what every wait of one rank needs besides its own condition:
// the deadline, how long to spin, and the checks that end a wait early (the
// job aborted, the launcher gone, a watched peer dead, a needed rank ended).
// One per rank, shared by its endpoints; not a guard (it owns no wait) and
// not only waiting (it also aborts the job).
class WaitContext {
 public:
  // `peer_pids[r]` is rank r's process id when the ranks were started by a
  // launcher that does not watch them (empty when one does: axon-launch
  // aborts the arena when a rank dies). Each peer is then watched
  // (ProcessWatch), so that a rank that dies fails every wait within one
  // sleep slice.
  // `names`: how messages name the world's ranks (a PyTorch subgroup's
  // arena names its members by their ranks in the job).
  // `job_size`: the processes of the job this world is part of, when that is
  // more than the world (a PyTorch subgroup's arena holds its members only,
  // while every process of the job competes for the cores); 0: the world is
  // the job. Whether ranks outnumber cores is judged by the larger of the two:
  // new_group([0, 1]) of eight processes on two cores is oversubscribed.
  WaitContext(ArenaHeader& header, int rank, std::chrono::milliseconds timeout,
            const std::vector<int>& peer_pids = {}, RankNames names = {}, int job_size = 0);
  ~WaitContext();
  WaitContext(const WaitContext&) = delete;
  WaitContext& operator=(const WaitContext&) = delete;

  // Throws PeerFailure when the job was aborted, the launcher is gone, or a
  // watched peer has exited (which also aborts the job, naming that rank).
  void check_alive() const;
  // The watched peers (world ranks) whose processes have exited, and their
  // pids; touches nothing shared.
  std::vector<std::pair<int, int>> exited_peers() const;
  // The peers (world ranks) that left the arena for good (mark_left()).
  std::vector<int> left_peers() const;
  // Marks the job aborted (first caller wins) and wakes everyone; does
  // nothing in a forked child (in_forked_child()).
  void abort(int rank, const std::string& reason) const;
  bool aborted() const;

  // The first of `ranks` (world ranks) that has ended, or -1. Only a job with
  // a launcher publishes ends; a rank that left the arena for good
  // (mark_left()) counts as ended under any launcher.
  int first_ended(const std::vector<int>& ranks) const;
  // Says that this rank takes part in nothing more through this arena. Call
  // after its last publication: a peer that then still waits for it fails,
  // and says why it left when `why` is given (cut to kLeftReasonBytes - 1
  // bytes; the first mark_left() of the rank's says it).
  void mark_left(std::string_view why = {}) const;
  // Whether this rank's ops must be refused (ArenaChannel::begin,
  // point-to-point): it called mark_left(), and its peers may have gone; or
  // this process is a child forked after the rank joined, and the rank's
  // own process still runs its part. why_refused() says which.
  // One comparison on every op's path: mark_left() sets the generation
  // expected to one no process reaches.
  bool refuses_ops() const {
    return ops_generation_.load(std::memory_order_relaxed) !=
           current_fork_generation.load(std::memory_order_relaxed);
  }
  std::string why_refused() const;
  // Whether this process is a child forked after this WaitContext was made:
  // it must change nothing the rank shares with its peers (mark_left, abort,
  // giving group areas back), as its own end would otherwise end the rank's
  // part for its parent (found by a review: a Python child's sys.exit left
  // the rank's groups under the parent).
  bool in_forked_child() const { return forked_since(fork_generation_); }
  // Whether this process is a child forked after current_fork_generation
  // was `generation` (what every object a child inherits and must not use
  // as its own compares: groups, their ops).
  static bool forked_since(std::uint64_t generation) {
    return generation != current_fork_generation.load(std::memory_order_relaxed);
  }
  // Counts the fork()s of this process's ancestry since the program started
  // (a pthread_atfork handler bumps it in each child).
  static std::atomic<std::uint64_t> current_fork_generation;
  // Whether every rank of the job has joined (always true without a
  // launcher). Not only the ranks waited for: one waiting for a peer that
  // itself waits for a rank still starting is start-up too (a recv ring
  // timed out on rank 1 while rank 2 was late, found by a review).
  bool all_joined() const;
  // Aborts the job blaming `peer`, which ended while this rank waited for it
  // (`what`), and throws PeerFailure naming both.
  [[noreturn]] void peer_ended(int peer, const std::string& what) const;

  // This rank's note of what it waits for (RankControl::note_*), which a
  // peer timing out while waiting for it quotes. publish_wait_note() returns
  // false, writing nothing, when another thread of this rank holds the note
  // (one note a rank: with a thread per group, the first long wait's); the
  // thread it returned true to rewrites it with `owned` and calls
  // clear_wait_note() when its wait ends.
  bool publish_wait_note(const std::string& text, bool owned = false) const;
  void clear_wait_note() const;
  // Rank `rank`'s note; empty when it has none (or it changed as it was read).
  std::string wait_note_of(int rank) const;
  // Why `rank` (a world rank) left the arena for good, as its mark_left()
  // said; empty when it has not left or said nothing.
  std::string left_reason_of(int rank) const;

  // Marks this rank's waits as ones that end when this process's exit
  // gives up on the calls still in flight (shm/exit_guard.hpp: guard_exit(),
  // for axon-launch's ranks). REQUIRES: before the first wait.
  void end_waits_at_exit() { ends_at_exit_ = true; }
  bool waits_end_at_exit() const { return ends_at_exit_; }

  std::chrono::milliseconds timeout() const { return timeout_; }
  // What a Timeout's message says the deadline came from: "AXON_TIMEOUT"
  // (axon-launch --timeout sets it) unless the creator names another
  // source before the first wait.
  const std::string& timeout_source() const { return timeout_source_; }
  void name_timeout(std::string source) { timeout_source_ = std::move(source); }
  int rank() const { return rank_; }
  const RankNames& names() const { return names_; }
  ArenaHeader& header() const { return header_; }
  // Polls before the first yield: none when the job has more ranks than
  // this process may use cores (spinning would only delay the rank that has
  // the work), a few microseconds' worth otherwise. AXON_SPIN_POLLS overrides.
  // After the polls, sched_yield: as cheap as a poll when the core is free.
  int spin_polls() const { return spin_polls_; }
  // How long to keep polling with sched_yield before sleeping on the futex.
  // Oversubscribed: 200 us (a yield hands the core to a rank with work; the
  // futex frees it for good). Otherwise 2 ms: each rank has a core of its
  // own, idle while it waits, and sleeping is what makes ranks slow at
  // scale: waking a sleeper costs tens to hundreds of microseconds (a futex
  // wake per sleeper, an idle core leaving its C-state), longer than the
  // yield phase once the late rank is itself one that slept, so every round
  // then sleeps again (see docs/scaling.md).
  std::chrono::microseconds yield_phase() const { return yield_phase_; }
  // Whether the job's ranks (job_size, when larger than the world) outnumber
  // the cores they may use.
  bool oversubscribed() const { return oversubscribed_; }
  // How long a sleeping wait sleeps before it looks again for what no bell
  // announces (an abort, a peer that ended, the launcher gone, the
  // deadline): 50 ms, or when oversubscribed 50 ms x world size / 64, at
  // most 1 s. Every look costs a scan of the group's ranks and mailboxes, so
  // with a fixed 50 ms, 700 of 1024 ranks asleep on 2 cores looked 14,000
  // times a second and starved the ranks still starting: axon-launch -n
  // 1024 took 42-65 s instead of 4 (docs/scaling.md).
  std::chrono::milliseconds sleep_slice() const { return sleep_slice_; }

 private:
  RankControl& control(int rank) const;
  static void write_wait_note(RankControl& mine, const std::string& text);

  ArenaHeader& header_;
  void check_peers() const;

  int rank_;
  RankNames names_;
  std::chrono::milliseconds timeout_;
  std::string timeout_source_ = "AXON_TIMEOUT";
  bool ends_at_exit_ = false;
  bool oversubscribed_;
  // Once every rank has joined, always (no flag resets): all_joined() then
  // costs one load, not a scan of the world's flags (1024 ranks at start-up).
  mutable std::atomic<bool> everyone_joined_{false};
  // current_fork_generation when made, and the process that made it.
  std::uint64_t fork_generation_ = current_fork_generation.load(std::memory_order_relaxed);
  int owner_pid_ = ::getpid();
  // fork_generation_, or kLeft once mark_left() ran: refuses_ops() compares
  // it with the process's generation.
  static constexpr std::uint64_t kLeft = ~std::uint64_t{0};
  mutable std::atomic<std::uint64_t> ops_generation_{fork_generation_};
  int spin_polls_;
  std::chrono::microseconds yield_phase_;
  std::chrono::milliseconds sleep_slice_;
  std::vector<ProcessWatch> peers_;  // by rank; empty watches for this rank and unknown pids
};

// Whether `ranks` ranks outnumber the cores they run on: AXON_OVERSUBSCRIBED
// when set (axon-launch sets it, knowing how it bound the ranks: with --bind
// core each rank's affinity is its own core, so counting our own CPUs would
// say "oversubscribed" for every bound job); else yes where mpirun says so
// (OMPI_MCA_mpi_oversubscribe=1; its 0 counts slots, which a hostfile may
// give more of than there are cores); else more ranks than CPUs this process
// may use, or under mpirun its parent (mpirun binds each rank to a core of
// its own by default, but not its daemon).
bool ranks_outnumber_cores(int ranks);

// Marks the job aborted (the first caller wins; later reasons are dropped),
// blaming `rank` (-1: nobody in particular) with `reason`, and wakes the
// sleepers of the abort bell. Every rank's next wait check throws
// PeerFailure with the reason. The launcher calls it when a rank dies.
void abort_job(ArenaHeader& header, int rank, const std::string& reason);

// Whether the job's abort blames `rank` for exiting with status 0 while
// others still needed it: a waiter's reason (WaitContext::peer_ended, under a
// launcher) or the launcher's own ("exited (status 0) before joining"), both
// "rank R exited (status 0) ...". abort_rank alone cannot tell: it also names
// a rank that timed out and aborted the job itself.
bool abort_blames_clean_exit_of(const ArenaHeader& header, int rank);

// The timeout ranks use unless told otherwise: AXON_TIMEOUT seconds, or 300.
std::chrono::milliseconds default_timeout();
// The same at exit, where nothing may throw (std::terminate): a malformed
// AXON_TIMEOUT was reported where it was first read, and counts as 300 s.
std::chrono::milliseconds default_timeout_at_exit() noexcept;

// How a rank that ended with waitpid `status` ended, for messages: "exited
// (status 3)", "was killed by signal 9", or "ended".
std::string describe_end(int status);

namespace detail {
// Called between sleeps; throws when the wait must end (also when this
// process's exit ends the waits of its guarded rank: shm/exit_guard.hpp).
// `describe` says what
// is being waited for ("all_reduce call #3 in group [0, 1]: waiting for rank 1").
void check_wait(const WaitContext& waits, std::chrono::steady_clock::time_point started,
                const std::function<std::string()>& describe, const std::vector<int>& needed = {});

// A wait's note (WaitContext::publish_wait_note), published once the wait
// has lasted half its timeout and cleared when it ends, however it ends.
class WaitNote {
 public:
  explicit WaitNote(const WaitContext& waits) : waits_(waits) {}
  ~WaitNote() {
    if (published_) waits_.clear_wait_note();
  }
  WaitNote(const WaitNote&) = delete;
  WaitNote& operator=(const WaitNote&) = delete;
  // Rewritten every time (a sleep slice apart), so that it names the ranks
  // still missing, not those missing when it was first written.
  void publish_when_long(std::chrono::steady_clock::time_point started,
                         const std::function<std::string()>& describe) {
    if (waited_since(started) < waits_.timeout() / 2) return;
    if (!published_ && tried_) return;  // another thread of the rank holds the note
    tried_ = true;
    published_ = waits_.publish_wait_note(note_of(describe()), published_);
  }
  // "waiting for rank(s) 1 in broadcast(f32, 7, root 0) call #0 in group
  // [1, 2]" from describe()'s "broadcast(...) call #0 in group [1, 2]:
  // waiting for rank(s) 1 (round 1)": whom first, where the note's 191
  // characters cut long group lists short.
  static std::string note_of(const std::string& description);

 private:
  const WaitContext& waits_;
  bool tried_ = false;
  bool published_ = false;
};

// A spin-wait hint (PAUSE); inline, as it sits in every poll loop.
inline void pause_cpu() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}
void yield_cpu();
// sched_yield calls this thread has made in waits, for tests.
std::uint64_t yield_calls();

// A yield that returns after kLostCoreYield ran another thread on this
// core, one with work of its own (another program, a DataLoader worker, the
// rank's own compute thread beside its communication thread): the scheduler
// gave it the rest of its slice, up to a 4 ms tick here. Waking from the
// futex costs less than that, and comes back at once when the peer rings (a
// woken sleeper preempts a thread that has been running), where a yielder
// waits for the other thread's slice to end. Yielding through every round
// of a collective beside two busy processes on this 2-core machine made
// small collectives at n=2 take 4 ms and a 64 MiB all-reduce 0.3-1.3 s
// (25-54 ms without the yields), slower than Gloo beside the same load.
// So once this thread's yields have lost the core (two of them, below), its
// waits replace the yield phase for kLostCoreMemory by polling for
// kPollInsteadOfYield, about what a sleep and a wake cost here (a peer
// running on another core answers within it; sleeping at once cost 30-50 us
// a round where the peer was there, with one busy process beside two
// ranks), then sleep. That pays two lost slices per period while the load
// lasts; after it, yields are tried again. A wait whose yield lost the core
// sleeps at once, whether or not it counts.
// Only two such yields within kLostCoreConfirmation count, and only over
// 1 ms: yields on this virtual machine return late now and then without a
// busy thread (quiet, per second 11-28 times after over 50 us, 0.1-0.4 after
// over 500 us; beside a rank that computes, about once a second after over
// 1 ms), while a yield to a busy thread returned after over 2 ms every time,
// and every round of a wait meets it again. Each false alarm turned the
// yields off for 100 ms, and a peer 0.1-1 ms late then cost a sleep and a
// wake (4 B all_reduce 2-10 us beyond the skew, not 0.6-2; a review).
inline constexpr std::chrono::microseconds kLostCoreYield{1000};
inline constexpr std::chrono::milliseconds kLostCoreConfirmation{20};
inline constexpr std::chrono::microseconds kPollInsteadOfYield{50};
inline constexpr std::chrono::milliseconds kLostCoreMemory{100};
// Whether this thread's yields lost the core (a second costly yield within
// kLostCoreConfirmation of the one before) within kLostCoreMemory before `now`.
bool yields_lose_the_core(std::chrono::steady_clock::time_point now);
// Notes a yield that lost the core at `when`.
void remember_costly_yield(std::chrono::steady_clock::time_point when);
}  // namespace detail

// What a wait needs nothing of: no peers to check.
struct NoPeers {
  std::vector<int> operator()() const { return {}; }
};

// Returns once ready() is true. Throws PeerFailure on abort, a vanished
// launcher or an ended rank among needed() (the world ranks the wait still
// needs; called only between sleeps), and Timeout after waits.timeout() of
// waiting with every needed rank joined, each naming describe(). A Timeout
// also aborts the job (the arena): a rank that gave up an op has left it
// half done, so peers fail at their next wait instead of finishing it.
// Sleeps on `bell`, and also on `second` when given: a wait whose ready()
// makes progress on two kinds of traffic (a collective that also drains
// point-to-point mailboxes) is woken by either.
template <class Ready, class Describe, class Needed = NoPeers>
void wait_until(Ready&& ready, Doorbell& bell, const WaitContext& waits, Describe&& describe,
                Needed&& needed = Needed{}, Doorbell* second = nullptr) {
  if (ready()) return;
  for (int i = 0, polls = waits.spin_polls(); i < polls; ++i) {
    detail::pause_cpu();
    if (ready()) return;
  }
  auto started = std::chrono::steady_clock::now();
  // Where ranks outnumber cores a yield is meant to hand the core to a peer
  // rank with work, and a long one is that peer's turn: 8 ranks on 2 cores
  // that slept instead took 50x longer per collective (700 us, not 13).
  const bool core_of_its_own = !waits.oversubscribed();
  if (!core_of_its_own || !detail::yields_lose_the_core(started)) {
    for (auto before = started; before - started < waits.yield_phase();) {
      detail::yield_cpu();
      const auto after = std::chrono::steady_clock::now();  // the yield alone, not ready()'s work
      const bool lost_the_core = core_of_its_own && after - before > detail::kLostCoreYield;
      if (lost_the_core) detail::remember_costly_yield(after);
      if (ready()) return;
      if (lost_the_core) break;
      before = std::chrono::steady_clock::now();
    }
  } else {
    // Instead of the yields: poll for about what a sleep and a wake cost,
    // which a peer running on another core usually answers within.
    for (int i = 1;; ++i) {
      detail::pause_cpu();
      if (ready()) return;
      if (i % 16 == 0 && std::chrono::steady_clock::now() - started > detail::kPollInsteadOfYield) break;
    }
  }
  const std::function<std::string()> describe_fn = std::forward<Describe>(describe);
  detail::WaitNote note(waits);
  for (;;) {
    const std::uint32_t seen = bell.word.load(std::memory_order_relaxed);
    const std::uint32_t second_seen = second ? second->word.load(std::memory_order_relaxed) : 0;
    bell.sleepers.fetch_add(1, std::memory_order_relaxed);
    if (second) second->sleepers.fetch_add(1, std::memory_order_relaxed);
    auto awake = [&] {
      bell.sleepers.fetch_sub(1, std::memory_order_relaxed);
      if (second) second->sleepers.fetch_sub(1, std::memory_order_relaxed);
    };
    full_barrier();
    if (ready()) {
      awake();
      return;
    }
    if (second) {
      futex_wait_either(bell.word, seen, second->word, second_seen, waits.sleep_slice());
    } else {
      futex_wait(bell.word, seen, waits.sleep_slice());
    }
    awake();
    if (ready()) return;
    waits.check_alive();
    std::vector<int> peers;
    if constexpr (!std::is_same_v<std::decay_t<Needed>, NoPeers>) {
      peers = needed();
      if (const int peer = waits.first_ended(peers); peer >= 0) {
        // Its last publication happened before it ended: look once more.
        if (ready()) return;
        waits.peer_ended(peer, describe_fn());
      }
    }
    if (!waits.all_joined()) started = std::chrono::steady_clock::now();
    note.publish_when_long(started, describe_fn);
    detail::check_wait(waits, started, describe_fn, peers);
  }
}

}  // namespace axonml::distributed::shm
