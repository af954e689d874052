#include "shm/wait.hpp"
#include "shm/arena_view.hpp"
#include "shm/exit_guard.hpp"
#include "shm/launcher_report.hpp"

#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "axonml/distributed/error.hpp"
#include "base/env.hpp"
#include "base/log.hpp"
#include "base/text.hpp"


namespace axonml::distributed::shm {

void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
                std::chrono::nanoseconds timeout) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1'000'000'000);
  ts.tv_nsec = static_cast<long>(timeout.count() % 1'000'000'000);
  // Not FUTEX_PRIVATE: the word may live in memory shared between processes.
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wait_either(std::atomic<std::uint32_t>& first, std::uint32_t first_expected,
                       std::atomic<std::uint32_t>& second, std::uint32_t second_expected,
                       std::chrono::nanoseconds timeout) {
#if defined(SYS_futex_waitv)
  // Shared (not FUTEX_PRIVATE_FLAG) 32-bit words; the timeout is absolute.
  futex_waitv waiters[2]{};
  waiters[0] = {first_expected, reinterpret_cast<std::uintptr_t>(&first), FUTEX_32, 0};
  waiters[1] = {second_expected, reinterpret_cast<std::uintptr_t>(&second), FUTEX_32, 0};
  timespec deadline{};
  clock_gettime(CLOCK_MONOTONIC, &deadline);
  const long long ns = deadline.tv_nsec + static_cast<long long>(timeout.count());
  deadline.tv_sec += static_cast<time_t>(ns / 1'000'000'000);
  deadline.tv_nsec = static_cast<long>(ns % 1'000'000'000);
  if (syscall(SYS_futex_waitv, waiters, 2, 0, &deadline, CLOCK_MONOTONIC) == 0 || errno != ENOSYS) return;
#endif
  (void)second;
  (void)second_expected;
  futex_wait(first, first_expected, timeout);
}

namespace {
std::atomic<std::uint64_t> g_wake_calls{0};
}  // namespace

std::uint64_t futex_wake_calls() { return g_wake_calls.load(std::memory_order_relaxed); }

void futex_wake_all(std::atomic<std::uint32_t>& word) {
  g_wake_calls.fetch_add(1, std::memory_order_relaxed);
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

namespace {

int cpus_of(pid_t pid) {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  return sched_getaffinity(pid, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
}

// Whether Open MPI's mpirun started this process.
bool under_mpirun() { return std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE") != nullptr; }

// The CPUs this process may use; under mpirun those its parent may use where
// that is more: mpirun binds each rank to a core of its own by default (not
// when it oversubscribes), and not its daemon. A process that pinned itself
// beside a peer stays counted as it is.
int cores_this_process_may_use() {
  const int own = cpus_of(0);
  return under_mpirun() ? std::max(own, cpus_of(::getppid())) : own;
}

// mpirun's own verdict, where it gave one: only its "1" is trusted, as its
// "0" counts slots (a hostfile's slots=4 on 2 cores says 0).
bool mpirun_says_oversubscribed() {
  const char* placed = std::getenv("OMPI_MCA_mpi_oversubscribe");
  return placed != nullptr && std::string_view(placed) == "1";
}

// What ranks_outnumber_cores(ranks) went by, for the debug line of a new
// WaitContext: "AXON_OVERSUBSCRIBED=1", or "8 ranks, 2 CPUs this process may use".
std::string why_oversubscribed_or_not(int ranks) {
  if (const auto told = env::flag("AXON_OVERSUBSCRIBED")) {
    return std::string("AXON_OVERSUBSCRIBED=") + (*told ? "1" : "0");
  }
  if (mpirun_says_oversubscribed()) return "OMPI_MCA_mpi_oversubscribe=1";
  return std::to_string(ranks) + " ranks, " + std::to_string(cores_this_process_may_use()) +
         (under_mpirun() ? " CPUs this process or its parent (mpirun) may use" : " CPUs this process may use");
}

}  // namespace

bool ranks_outnumber_cores(int ranks) {
  if (const auto told = env::flag("AXON_OVERSUBSCRIBED")) return *told;
  if (mpirun_says_oversubscribed()) return true;
  return ranks > cores_this_process_may_use();
}

namespace {

int choose_spin_polls(bool oversubscribed) {
  static const std::optional<long long> requested = env::integer("AXON_SPIN_POLLS", 0, 1 << 20);
  if (requested) return static_cast<int>(*requested);
  // Short even with a core per rank: the scheduler may still put two ranks
  // on one core, and then every poll delays the peer. 1024 polls cost ~31 us
  // per round in such runs (2 ranks, 4 B all-reduce); 64 cost nothing
  // measurable in the others (0.41 us either way).
  return oversubscribed ? 0 : 64;
}

}  // namespace

std::atomic<std::uint64_t> WaitContext::current_fork_generation{0};

namespace {

// A child forked after a rank joined shares its arena and its place in every
// group, and ran as that rank for its peers while the parent got a
// CollectiveMismatch with two identical sides (found by a review); the
// handler lets each WaitContext tell its own process from a child.
const bool fork_handler_installed = [] {
  ::pthread_atfork(nullptr, nullptr, [] {
    WaitContext::current_fork_generation.fetch_add(1, std::memory_order_relaxed);
  });
  return true;
}();

}  // namespace

WaitContext::WaitContext(ArenaHeader& header, int rank, std::chrono::milliseconds timeout,
                     const std::vector<int>& peer_pids, RankNames names, int job_size)
    : header_(header),
      rank_(rank),
      names_(std::move(names)),
      timeout_(timeout),
      oversubscribed_(ranks_outnumber_cores(std::max(static_cast<int>(header.world_size), job_size))),
      spin_polls_(choose_spin_polls(oversubscribed_)),
      yield_phase_(oversubscribed_ ? std::chrono::microseconds(200) : std::chrono::microseconds(2000)),
      sleep_slice_(oversubscribed_ ? std::clamp(std::chrono::milliseconds(50 * static_cast<int>(header.world_size) / 64),
                                                std::chrono::milliseconds(50), std::chrono::milliseconds(1000))
                                   : std::chrono::milliseconds(50)),
      peers_(peer_pids.size()) {
  for (std::size_t r = 0; r < peer_pids.size(); ++r) {
    if (static_cast<int>(r) == rank_ || peer_pids[r] <= 0) continue;
    peers_[r] = ProcessWatch(peer_pids[r], names_.rank(rank_) + ": " + names_.rank(static_cast<int>(r)));
  }
  // A slow job's first question is often whether its ranks spin or sleep.
  if (log::enabled(log::Level::Debug)) {
    const int world = static_cast<int>(header.world_size);
    const int counted = std::max(world, job_size);
    log::debug(names_.job_rank(rank_), "waits of a world of {} ranks{}: {} ({}): {} polls, then sched_yield for {} us{}, "
               "then sleeps of {} ms; {} barrier (the arena's maker chose)", world,
               job_size > world ? " in a job of " + std::to_string(job_size) : "",
               oversubscribed_ ? "oversubscribed" : "a core per rank", why_oversubscribed_or_not(counted), spin_polls_,
               yield_phase_.count(),
               oversubscribed_ ? std::string()
                               : fmt::format(" (polls for {} us instead for {} ms after a yield lost the core "
                                             "to another thread for over {} us)",
                                             detail::kPollInsteadOfYield.count(), detail::kLostCoreMemory.count(),
                                             detail::kLostCoreYield.count()),
               sleep_slice_.count(), header.flat_barrier != 0 ? "flat" : "dissemination");
  }
}

WaitContext::~WaitContext() = default;

std::vector<std::pair<int, int>> WaitContext::exited_peers() const {
  std::vector<std::pair<int, int>> exited;
  for (std::size_t r = 0; r < peers_.size(); ++r) {
    if (peers_[r].exited()) exited.emplace_back(static_cast<int>(r), peers_[r].pid());
  }
  return exited;
}

// Every peer found gone is named: which of several went first cannot be
// told from here, and naming only the lowest blamed, under
// torch.multiprocessing, rank 0 that spawn had killed after rank 3 failed.
//
// A peer that left the arena for good (mark_left) before it exited is not
// named: a wait that still needs it learns so from first_ended(), and one
// that does not (two other ranks' send and recv) has no reason to fail.
// Found by a review: a PyTorch rank that took no part and ended its program
// made the others' large send fail, "rank 2 exited ... while its peers still
// needed it".
void WaitContext::check_peers() const {
  auto exited = exited_peers();
  std::erase_if(exited, [&](const std::pair<int, int>& peer) {
    return control(peer.first).left.load(std::memory_order_acquire) != 0;
  });
  if (exited.empty()) return;
  // Pids while the list is short; past that the ranks alone, in runs: an
  // abort's reason keeps about 1 000 characters, and 64 ranks with their
  // pids filled it.
  std::string listed;
  if (exited.size() <= kRanksListedOneByOne) {
    for (const auto& [r, pid] : exited) {
      listed += (listed.empty() ? "" : ", ") + std::to_string(names_.job_rank(r)) + " (pid " + std::to_string(pid) + ")";
    }
  } else {
    listed = joined_ranks(exited | std::views::transform([&](const auto& peer) { return names_.job_rank(peer.first); }));
  }
  const std::string reason =
      exited.size() == 1 ? "rank " + listed + " exited or was killed while its peers still needed it"
                         : "ranks " + listed + " exited or were killed while their peers still needed them";
  abort(exited.front().first, reason);
  throw PeerFailure(names_.rank(rank_) + ": job aborted: " + reason);
}

bool WaitContext::aborted() const {
  return header_.abort_state.load(std::memory_order_acquire) !=
         static_cast<std::uint32_t>(AbortState::None);
}

void WaitContext::check_alive() const {
  if (aborted()) {
    // Give a writer that claimed the flag a moment to finish its reason.
    for (int i = 0; i < 1000 && header_.abort_state.load(std::memory_order_acquire) !=
                                    static_cast<std::uint32_t>(AbortState::Set);
         ++i) {
      detail::yield_cpu();
    }
    std::string reason(header_.abort_reason, strnlen(header_.abort_reason, sizeof(header_.abort_reason)));
    throw PeerFailure(names_.rank(rank_) + ": job aborted: " + reason);
  }
  check_peers();
  // The launcher is normally our parent; a wrapper in between (sh -c, time,
  // a debugger) makes it a grandparent, so ask the kernel before concluding.
  if (header_.launcher_pid != 0 && getppid() != header_.launcher_pid &&
      ::kill(header_.launcher_pid, 0) != 0 && errno == ESRCH) {
    throw PeerFailure(names_.rank(rank_) + ": the launcher (pid " +
                      std::to_string(header_.launcher_pid) + ") has gone away");
  }
}

RankControl& WaitContext::control(int rank) const {
  return ArenaView(header_).rank_control(rank);
}

std::vector<int> WaitContext::left_peers() const {
  std::vector<int> left;
  for (int r = 0; r < static_cast<int>(header_.world_size); ++r) {
    if (r != rank_ && control(r).left.load(std::memory_order_acquire) != 0) left.push_back(r);
  }
  return left;
}

int WaitContext::first_ended(const std::vector<int>& ranks) const {
  const bool launched = header_.launcher_pid != 0;
  for (int r : ranks) {
    if (launched && control(r).ended.load(std::memory_order_acquire) != 0) return r;
    if (control(r).left.load(std::memory_order_acquire) != 0) return r;
  }
  return -1;
}

std::string WaitContext::why_refused() const {
  if (in_forked_child()) {
    (void)fork_handler_installed;
    return "this process (pid " + std::to_string(::getpid()) + ") was forked from " + names_.rank(rank_) +
           "'s process (pid " + std::to_string(owner_pid_) +
           ") after it joined; only the process that joined takes part in the job's ops (a forked child "
           "may read shared tensors, and must not call collectives)";
  }
  return "this rank has left for good (leave_for_good()) and takes part in nothing more";
}

void WaitContext::mark_left(std::string_view why) const {
  if (in_forked_child()) return;  // the rank's own process has not left
  RankControl& mine = control(rank_);
  // The reason is written once, before `left`: a peer that sees `left`
  // reads it with no lock. Two threads of this rank leaving at once take
  // turns, and the second says nothing new. Never destroyed: a PyTorch
  // group may leave after the statics are gone, at exit.
  static auto* leaving = new std::mutex;
  const std::lock_guard lock(*leaving);
  if (mine.left.load(std::memory_order_relaxed) == 0 && !why.empty()) {
    std::uint64_t words[kLeftReasonBytes / sizeof(std::uint64_t)]{};
    std::memcpy(words, why.data(), std::min(why.size(), sizeof(words) - 1));
    for (std::size_t w = 0; w < std::size(words); ++w) mine.left_words[w].store(words[w], std::memory_order_relaxed);
  }
  // No bell: a sleeping peer looks between sleep slices (50 ms or more), soon
  // enough, and ringing would mean knowing which bell each one sleeps on.
  mine.left.store(1, std::memory_order_release);
  ops_generation_.store(kLeft, std::memory_order_relaxed);
}

bool WaitContext::all_joined() const {
  if (header_.launcher_pid == 0 || everyone_joined_.load(std::memory_order_relaxed)) return true;
  for (int r = 0; r < static_cast<int>(header_.world_size); ++r) {
    if (control(r).joined.load(std::memory_order_acquire) == 0) return false;
  }
  everyone_joined_.store(true, std::memory_order_relaxed);
  return true;
}

void WaitContext::peer_ended(int peer, const std::string& what) const {
  // A peer that aborts before it leaves (the PyTorch backend, for ranks left
  // in a collective it never called) has said more than "left": its abort,
  // visible now that its later `left` is, is the error to give.
  if (aborted()) check_alive();
  const int status = control(peer).end_status;  // written before `ended` (release)
  const bool ended = header_.launcher_pid != 0 && control(peer).ended.load(std::memory_order_acquire) != 0;
  // Why it left, when it said: a peer that came to wait after it had gone
  // learnt only that it left (a PyTorch rank that ended on an exception
  // before its peers reached the collective; a review, 6 runs of 10).
  const std::string why = left_reason_of(peer);
  const std::string how = ended ? describe_end(status) + (why.empty() ? "" : " (" + why + ")")
                                : "left the group (" + (why.empty() ? "it destroyed it, or its program ended" : why) + ")";
  const std::string peer_name = names_.rank(peer);
  // Blame the peer, so that the launcher's summary names it rather than us.
  abort(peer, peer_name + " " + how + " while " + names_.rank(rank_) +
                  " still waited for it (" + what + ")");
  throw PeerFailure(names_.rank(rank_) + ": " + peer_name + " " + how +
                    " while this rank still waited for it: " + what);
}

bool WaitContext::publish_wait_note(const std::string& text, bool owned) const {
  if (in_forked_child()) return false;
  RankControl& mine = control(rank_);
  std::uint32_t free = 0;
  if (!owned && !mine.note_owner.compare_exchange_strong(free, 1, std::memory_order_acquire)) return false;
  write_wait_note(mine, text);
  return true;
}

void WaitContext::clear_wait_note() const {
  RankControl& mine = control(rank_);
  write_wait_note(mine, {});
  mine.note_owner.store(0, std::memory_order_release);
}

// The seqlock's writer: odd, a release fence (the text's stores may not
// move above it), the text, even.
void WaitContext::write_wait_note(RankControl& mine, const std::string& text) {
  constexpr std::size_t kWords = kWaitNoteBytes / sizeof(std::uint64_t);
  std::uint64_t words[kWords] = {};
  char* bytes = reinterpret_cast<char*>(words);
  if (text.size() < kWaitNoteBytes) {
    std::memcpy(bytes, text.data(), text.size());  // NUL-terminated by the zeros after it
  } else {
    std::memcpy(bytes, text.data(), kWaitNoteBytes - 4);
    std::memcpy(bytes + kWaitNoteBytes - 4, "...", 3);  // cut: say so
  }
  const std::uint32_t seq = mine.note_seq.load(std::memory_order_relaxed);
  mine.note_seq.store(seq + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  for (std::size_t w = 0; w < kWords; ++w) mine.note_words[w].store(words[w], std::memory_order_relaxed);
  mine.note_seq.store(seq + 2, std::memory_order_release);
}

std::string WaitContext::left_reason_of(int rank) const {
  const RankControl& theirs = control(rank);
  if (theirs.left.load(std::memory_order_acquire) == 0) return {};
  std::uint64_t words[kLeftReasonBytes / sizeof(std::uint64_t)];
  for (std::size_t w = 0; w < std::size(words); ++w) words[w] = theirs.left_words[w].load(std::memory_order_relaxed);
  const char* text = reinterpret_cast<const char*>(words);
  return std::string(text, strnlen(text, sizeof(words) - 1));
}

std::string WaitContext::wait_note_of(int rank) const {
  const RankControl& theirs = control(rank);
  const std::uint32_t before = theirs.note_seq.load(std::memory_order_acquire);
  if (before % 2 != 0) return {};
  std::uint64_t words[kWaitNoteBytes / sizeof(std::uint64_t)];
  for (std::size_t w = 0; w < std::size(words); ++w) words[w] = theirs.note_words[w].load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (theirs.note_seq.load(std::memory_order_relaxed) != before) return {};
  const char* text = reinterpret_cast<const char*>(words);
  return std::string(text, strnlen(text, sizeof(words)));
}

void WaitContext::abort(int rank, const std::string& reason) const {
  if (in_forked_child()) return;  // not the rank: the job is its parent's to abort
  abort_job(header_, rank, reason);
  // An arena no launcher watches (a PyTorch group's) in a process axon-launch
  // started: the launcher's summary should say why, too.
  if (header_.launcher_pid == 0) report_group_failure_to_launcher(names_.job_rank(rank), reason);
}

bool abort_blames_clean_exit_of(const ArenaHeader& header, int rank) {
  if (header.abort_state.load(std::memory_order_acquire) != static_cast<std::uint32_t>(AbortState::Set)) return false;
  // peer_ended's words for a peer that exited 0, with a launcher's arena's
  // own names ("rank R").
  const std::string exited = "rank " + std::to_string(rank) + " exited (status 0)";
  return header.abort_rank == rank && std::string_view(header.abort_reason).substr(0, exited.size()) == exited;
}

void abort_job(ArenaHeader& header, int rank, const std::string& reason) {
  publish_once(header.abort_state, [&] {
    header.abort_rank = rank;
    copy_reason(header.abort_reason, reason);
  });
  header.abort_bell.word.fetch_add(1, std::memory_order_seq_cst);
  futex_wake_all(header.abort_bell.word);
}

std::string describe_end(int status) {
  if (WIFEXITED(status)) return "exited (status " + std::to_string(WEXITSTATUS(status)) + ")";
  if (WIFSIGNALED(status)) return "was killed by signal " + std::to_string(WTERMSIG(status));
  return "ended";
}

std::chrono::milliseconds default_timeout() {
  if (const auto seconds = env::timeout_seconds("AXON_TIMEOUT")) {
    return env::timeout_milliseconds(*seconds);
  }
  return std::chrono::seconds(300);
}

std::chrono::milliseconds default_timeout_at_exit() noexcept {
  try {
    return default_timeout();
  } catch (const std::exception&) {
    return std::chrono::seconds(300);
  }
}

namespace detail {

std::string WaitNote::note_of(const std::string& description) {
  constexpr std::string_view kWaiting = ": waiting for rank(s) ";
  const std::size_t at = description.find(kWaiting);
  if (at == std::string::npos) return description;
  std::string whom = description.substr(at + 2);
  if (const std::size_t round = whom.find(" (round "); round != std::string::npos) whom.resize(round);
  return whom + " in " + description.substr(0, at);
}

void check_wait(const WaitContext& waits, std::chrono::steady_clock::time_point started,
                const std::function<std::string()>& describe, const std::vector<int>& needed) {
  waits.check_alive();
  if (waits.waits_end_at_exit() && ends_waits_at_exit()) [[unlikely]] {
    // The exit gave this call two seconds (exit_guard.hpp); it waits on for
    // what may never come, and the World it waits in is about to be
    // destroyed. Its peers learn why from the abort, at once.
    const std::string rank = waits.names().rank(waits.rank());
    waits.abort(waits.rank(), rank + " is exiting (its main returned, or exit() was called) while a thread of it "
                                     "still waits in " + describe());
    throw InvalidArgument(rank + ": " + describe() + ": this process is exiting (its main returned, or exit() was "
                          "called) while this thread waits here; join every thread that uses the library before "
                          "main returns");
  }
  const auto waited = waited_since(started);  // not the time the job was held stopped (Ctrl-Z)
  if (waited >= waits.timeout()) {
    const double seconds = std::chrono::duration<double>(waits.timeout()).count();
    std::string what = waits.names().rank(waits.rank()) + ": timed out after " + format_seconds(seconds) + " s (" +
                       waits.timeout_source() + "): " + describe();
    // What the ranks this one waits for wait for themselves, where they have
    // said (a rank stopped, or busy outside any collective, says nothing):
    // the rank to look at may be further down the chain.
    for (std::size_t i = 0; i < needed.size() && i < 3; ++i) {
      if (needed[i] == waits.rank()) continue;
      if (const std::string note = waits.wait_note_of(needed[i]); !note.empty()) {
        what += "; " + waits.names().rank(needed[i]) + (note.starts_with("waiting ") ? " itself is " : " itself waits: ") +
                note;
      }
    }
    // This rank now leaves an op its peers may still complete, reading or
    // writing its buffers out of turn, and every later op would pair with
    // the wrong call: the arena is broken for all, so say so to all.
    waits.abort(waits.rank(), what);
    throw Timeout(what);
  }
}

namespace {
// Per thread: a test counts one rank's yields while other threads yield too
// (process-wide, a late peer's thousands of cheap yields failed it under
// load; a review).
thread_local std::uint64_t yields_made = 0;
}  // namespace

void yield_cpu() {
  ++yields_made;
  sched_yield();
}

std::uint64_t yield_calls() { return yields_made; }

namespace {
// Per thread: each thread of a rank has its own core's situation (the
// communication thread may share its core with the compute thread while the
// caller's core is free).
thread_local std::chrono::steady_clock::time_point last_costly_yield{};      // the second of two close ones
thread_local std::chrono::steady_clock::time_point previous_costly_yield{};  // any
}  // namespace

bool yields_lose_the_core(std::chrono::steady_clock::time_point now) {
  return last_costly_yield != std::chrono::steady_clock::time_point{} && now - last_costly_yield < kLostCoreMemory;
}

void remember_costly_yield(std::chrono::steady_clock::time_point when) {
  if (previous_costly_yield != std::chrono::steady_clock::time_point{} &&
      when - previous_costly_yield < kLostCoreConfirmation) {
    last_costly_yield = when;
  }
  previous_costly_yield = when;
}

}  // namespace detail
}  // namespace axonml::distributed::shm
