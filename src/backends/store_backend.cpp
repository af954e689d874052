#include "axonml/distributed/store_backend.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "axonml/distributed/error.hpp"
#include "backends/arena_backend_impl.hpp"
#include "base/process_watch.hpp"
#include "base/rank_names.hpp"
#include "base/text.hpp"
#include "shm/arena_file.hpp"
#include "shm/arena_layout.hpp"
#include "shm/launcher_report.hpp"
#include "shm/wait.hpp"
#include "shm/arena_view.hpp"

namespace axonml::distributed {
namespace {

// "hostname boot-id": equal on two processes exactly when they run under
// one kernel, which is what sharing memory needs (hostnames alone collide
// across containers on different machines).
std::string host_identity(const std::string& who) {
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  const char* path = "/proc/sys/kernel/random/boot_id";
  std::string boot_id;
  // Unread (no descriptor left: ulimit -n 16), it made this rank's host
  // differ from everyone's, its own included, and the set-up blamed the hosts
  // (a review).
  errno = 0;
  if (!(std::ifstream(path) >> boot_id) || boot_id.empty()) {
    const int err = errno;
    throw Error(who + "cannot read " + path + " (" + (err != 0 ? std::strerror(err) : "empty") +
                      "), which tells whether the ranks share one machine" +
                      (err == EMFILE || err == ENFILE ? ": raise ulimit -n, or destroy groups no longer used" : ""));
  }
  return std::string(name) + " " + boot_id;
}

std::string host_name(const std::string& identity) { return identity.substr(0, identity.find(' ')); }

std::string errno_text() { return std::strerror(errno); }

// Closes the descriptor on every path out.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

std::shared_ptr<void> map_shared(int fd, std::size_t bytes, const std::string& who,
                                 const std::string& what) {
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    // Ranks may differ in their limits: the one that made the arena said
    // so, and this one must too (a review saw only "Cannot allocate memory").
    const int error = errno;
    const std::string limit = error == ENOMEM ? shm::address_space_limit_advice() : std::string();
    throw Error(who + "cannot map the arena " + what + " (" + std::to_string(bytes) +
                " bytes): " + std::strerror(error) + (limit.empty() ? "" : ": " + limit));
  }
  return std::shared_ptr<void>(base, [bytes](void* p) { ::munmap(p, bytes); });
}

// One rank's entry at "axon/host/<rank>", as publish_host() writes it:
// "hostname boot-id pid token world-size job-rank group".
struct HostEntry {
  std::string host;  // "hostname boot-id"
  int pid = 0;
  std::uint64_t token = 0;  // the world's, in its process (LiveWorld)
  int size = 0;      // 0 where the entry has none
  // The job's number of the process that wrote the entry, as it was told
  // (-1 where the entry has none). Ranks given different groups number
  // one another differently: only the writer knows its own.
  int job_rank = -1;
  std::string group;
};

HostEntry parse_host_entry(const std::string& value) {
  HostEntry e;
  std::istringstream entry(value);
  std::string name, boot_id;
  entry >> name >> boot_id >> e.pid >> e.token >> e.size;
  // The job rank, where the entry has one: a word that is all digits
  // (an entry without one goes straight on to the group's text).
  std::string rest;
  std::getline(entry >> std::ws, rest);
  const std::size_t digits = rest.find_first_not_of("0123456789");
  const std::size_t word_end = digits == std::string::npos ? rest.size() : digits;
  if (word_end > 0 && word_end <= 9 && (word_end == rest.size() || rest[word_end] == ' ')) {
    e.job_rank = std::stoi(rest.substr(0, word_end));
    rest.erase(0, std::min(rest.size(), word_end + 1));
  }
  e.group = rest;
  e.host = name + " " + boot_id;
  return e;
}

// Where a rank whose set-up failed after it published its host says why,
// so that the others, waiting for its next entry, fail at once with the
// reason rather than at their deadline.
constexpr const char* kFailedKey = "axon/failed";
// Where each rank that read that reason says so ("axon/failure_seen/<rank>"):
// every rank that knows of the failure waits, briefly, until all have read
// it, since under env:// or tcp:// the store lives in global rank 0's
// process, and a rank 0 that failed (or read the reason) and exited at once
// took the store, and the reason, with it (peers got a bare "Broken pipe";
// found by a review).
constexpr const char* kFailureSeenPrefix = "axon/failure_seen/";
constexpr auto kFailureSeenWait = std::chrono::seconds(2);
// Set before kFailedKey by a rank whose failure is its own (a bad argument
// or variable, no memory for the arena): its peers may all still be on
// their way, so the rank in whose process the store lives
// (StoreOptions::store_lives_here) also waits for those that have not
// published their host entry. Under env:// a PyTorch rank connects to the
// store a second time after rank 0's rendezvous has counted it: a rank 0
// that left at once had that rank time out connecting after 60 s, naming
// nothing (a fresh-clone run). The other ranks gain nothing by waiting for
// them (a review: a lone rank's bad value took 2 s). Not set for a timeout,
// a peer that exited, an interrupt or a failing store: the ranks not yet
// here are not coming (a timeout's error came 2 s after the timeout it
// named; a review), or the user wants out.
constexpr const char* kWaitForEveryRankKey = "axon/failed_before_every_rank_came";

// Marks the failure under kFailedKey read by `rank`, then waits, at most
// kFailureSeenWait, until every rank has: the rank that left it and every
// reader, the store's host included, stays until the slowest has read it.
// A peer already past the store (waiting in the arena, which abort_job
// ended) marks it as it leaves (leave_reason); kept short for one that died
// and never does. A peer that has not published its host entry is waited
// for only by the store's own process, and only where the failure says
// every rank may still come (kWaitForEveryRankKey). Throws what the store
// throws.
void mark_failure_read(KeyValueStore& store, int rank, int world_size, bool store_lives_here) {
  store.set(kFailureSeenPrefix + std::to_string(rank), "1");
  const bool wait_for_unpublished = store_lives_here && store.has(kWaitForEveryRankKey).value_or(false);
  const auto until = std::chrono::steady_clock::now() + kFailureSeenWait;
  for (int peer = 0; peer < world_size; ++peer) {
    const std::string host_key = "axon/host/" + std::to_string(peer);
    if (!wait_for_unpublished && !store.has(host_key).value_or(true)) continue;
    // Nor a peer whose process has exited (killed, most often: what failed
    // the set-up): it never reads, and every rank's error came 2 s after the
    // kill (a review).
    ProcessWatch process;
    bool gone = false;
    if (peer != rank && store.has(host_key) == std::optional<bool>(true)) {
      const int pid = parse_host_entry(store.get(host_key)).pid;
      try {
        if (pid > 0 && pid != ::getpid()) process = ProcessWatch(pid, "");
      } catch (const PeerFailure&) {  // gone already
        gone = true;
      }
    }
    while (!gone && !store.has(kFailureSeenPrefix + std::to_string(peer)).value_or(true) &&
           std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      gone = process.exited();
    }
  }
}

// `reason` as the peers read it: starting with this rank's name ("rank 2: "),
// which most of this library's set-up messages have and the environment's
// readers' do not.
std::string named_by(const std::string& who, const std::string& reason) {
  return reason.rfind(who, 0) == 0 ? reason : who + reason;
}

// Peers waiting for this rank's next entry learn why it will not come
// (the first reason stays: later ones follow from it). Where a peer's reason
// is there already, this rank still stays until every rank has read it: it
// may have learned of the failure elsewhere (in the arena, which abort_job
// ended) and, as the store's host, have taken the reason with it when its
// program ended (a peer still polling the store got "Broken pipe", 1 run in
// 10). A rank that read the reason in the store has waited for the others
// then. `own_failure`: the reason is this rank's own (kWaitForEveryRankKey).
// Never throws.
void leave_reason(KeyValueStore& store, int rank, int world_size, const std::string& reason, bool own_failure,
                  bool store_lives_here) {
  try {
    const std::optional<bool> failed = store.has(kFailedKey);
    if (!failed.has_value()) return;  // a store that cannot check: no reasons
    if (!*failed) {
      if (own_failure) store.set(kWaitForEveryRankKey, "1");
      store.set(kFailedKey, reason);
    } else if (store.has(kFailureSeenPrefix + std::to_string(rank)).value_or(true)) {
      return;
    }
    mark_failure_read(store, rank, world_size, store_lives_here);
  } catch (...) {  // the store failing too: the peers' own checks remain
  }
}

// What create() watches while it waits for a peer's entry in the store.
class SetupWait {
 public:
  SetupWait(KeyValueStore& store, const StoreOptions& options, std::string who, const RankNames& names,
            int rank, int world_size, std::chrono::milliseconds timeout, std::string timeout_name)
      : rank_(rank),
        world_size_(world_size),
        store_(store),
        options_(options),
        who_(std::move(who)),
        names_(names),
        timeout_(timeout),
        timeout_name_(std::move(timeout_name)),
        started_(std::chrono::steady_clock::now()),
        peers_(static_cast<std::size_t>(world_size)),
        can_check_(store.has(kFailedKey).has_value()) {}

  // From now on a wait also ends when `rank`'s process exits. One that
  // has exited already is reported after any reason a peer left in the
  // store (get_all), not at once: a peer that timed out waiting for a third
  // rank, and exited, was blamed as if it had died (a review: "rank 1
  // (pid …) has already exited", 3 runs of 5). A store that cannot check
  // holds no reasons and never polls: reported at once, as before.
  void watch(int rank, int pid) {
    try {
      peers_[static_cast<std::size_t>(rank)] = ProcessWatch(pid, who_ + names_.rank(rank));
    } catch (const PeerFailure& gone) {
      if (!can_check_) throw;
      if (!exited_before_watched_) exited_before_watched_.emplace(GoneBeforeWatched{rank, pid, gone});
    }
  }

  // How messages name the world's ranks.
  const RankNames& names() const { return names_; }

  // Whether the store answers has(): only then can peers leave reasons in
  // it, or a wait poll it.
  bool store_can_check() const { return can_check_; }

  // Throws PeerFailure with the reason a peer left under kFailedKey, if
  // any, saying what this rank was waiting for (`waiting_for()`, built only
  // then: the polls call this every few milliseconds).
  template <class WaitingFor> void throw_if_a_peer_failed(WaitingFor&& waiting_for) {
    if (store_.has(kFailedKey).value_or(false)) {
      const std::string reason = store_.get(kFailedKey);
      try {
        mark_failure_read(store_, rank_, world_size_, options_.store_lives_here);
      } catch (...) {  // the store going down: the reason is read, which is what counts
      }
      throw PeerFailure(who_ + "gave up setting up the shared memory while it waited for " + waiting_for() + ": " +
                        reason);
    }
  }

  // Throws Error for a store that failed (`what`) under a wait, saying what
  // this rank waited for.
  template <class WaitingFor>
  [[noreturn]] void throw_store_failed(const std::string& what, WaitingFor&& waiting_for) {
    store_failed_ = true;
    throw Error(who_ + "the store failed (" + what + ") while this rank waited in it for " + waiting_for() +
                " to set up the shared memory; under env:// or tcp:// the store lives in global rank 0's "
                "process, so that process may have failed or exited: see its error");
  }

  // Throws PeerFailure naming the first watched peer that has exited.
  template <class WaitingFor> void throw_if_a_watched_peer_exited(WaitingFor&& waiting_for) const {
    auto exited = [&](int rank, int pid) {
      return PeerFailure(who_ + names_.rank(rank) + " (pid " + std::to_string(pid) +
                         ") exited or was killed while this rank waited for " + waiting_for() +
                         " to set up the shared memory");
    };
    if (exited_before_watched_) throw exited(exited_before_watched_->rank, exited_before_watched_->pid);
    for (const auto& peer : peers_) {
      if (peer.exited()) throw exited(static_cast<int>(&peer - peers_.data()), peer.pid());
    }
  }

  // Waits until every one of `keys` is in the store, all at once (so that a
  // Timeout names every one still missing), and hands each value to
  // `arrived(i, value)` as it comes. `describe(missing)` names the entries
  // of those indices for messages ("rank 2's host (axon/host/2)"). A store
  // that cannot check (has() gives no answer) waits in get() alone, key by
  // key, and learns nothing of failed peers.
  template <class Describe, class Arrived>
  void get_all(const std::vector<std::string>& keys, Describe&& describe, Arrived&& arrived) {
    std::vector<std::size_t> missing(keys.size());
    auto waiting_for = [&] { return describe(missing); };
    for (std::size_t i = 0; i < keys.size(); ++i) missing[i] = i;
    auto pause = std::chrono::microseconds(100);
    for (;;) {
      try {
        std::erase_if(missing, [&](std::size_t i) {
          if (!store_.has(keys[i]).value_or(true)) return false;  // unknown: get() waits
          arrived(i, store_.get(keys[i]));
          return true;
        });
        if (missing.empty()) {
          // Every entry came, but one's process had gone (watch()): its
          // reason, or another peer's, first; else that it is gone.
          if (exited_before_watched_) {
            throw_if_a_peer_failed([] { return std::string("its peers' entries"); });
            throw exited_before_watched_->error;
          }
          return;
        }
        throw_if_a_peer_failed(waiting_for);
      } catch (const Error&) {
        throw;
      } catch (const std::exception& e) {
        // The store itself failed (PyTorch's TCPStore lives in one rank's
        // process): a watched peer's exit, or the caller's (a process its
        // other groups saw exit), is the better reason; else say what
        // failed, and where the real reason may be. Looked for up to a
        // second: a killed process's sockets close a moment before a watch
        // sees it exit (a review saw bare "Connection reset by peer").
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
        for (;;) {
          call_while_waiting();
          throw_if_a_watched_peer_exited(waiting_for);
          if (std::chrono::steady_clock::now() >= until) break;
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        throw_store_failed(e.what(), waiting_for);
      }
      // The caller's check first: under PyTorch it names a process that
      // died first, where a peer of this set-up may have exited only
      // because that death failed it.
      call_while_waiting();
      throw_if_a_watched_peer_exited(waiting_for);
      if (shm::waited_since(started_) >= timeout_) {  // not a pause (Ctrl-Z): a review
        throw Timeout(who_ + "timed out after " + format_seconds(std::chrono::duration<double>(timeout_).count()) +
                      " s (" + timeout_name_ + ") waiting in the store for " + describe(missing) +
                      " to set up the shared memory");
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(10'000));
    }
  }

  // Whether StoreOptions::while_waiting threw (the caller gave up: a process
  // of the job exited, an interrupt) or the store failed under a wait: no
  // failure of this rank's own.
  bool gave_up_for_another_reason() const { return caller_gave_up_ || store_failed_; }

 private:
  void call_while_waiting() {
    if (!options_.while_waiting) return;
    try {
      options_.while_waiting();
    } catch (...) {
      caller_gave_up_ = true;
      throw;
    }
  }

  int rank_;
  int world_size_;
  KeyValueStore& store_;
  const StoreOptions& options_;
  std::string who_;
  const RankNames& names_;
  std::chrono::milliseconds timeout_;
  std::string timeout_name_;
  std::chrono::steady_clock::time_point started_;
  std::vector<ProcessWatch> peers_;
  // The first peer whose process had exited when its entry came, and what
  // ProcessWatch said of it.
  struct GoneBeforeWatched {
    int rank;
    int pid;
    PeerFailure error;
  };
  std::optional<GoneBeforeWatched> exited_before_watched_;
  bool can_check_;
  bool caller_gave_up_ = false;
  bool store_failed_ = false;
};

// The worlds this process set up through a store and still holds, by the
// token their host entries carry: an entry of this process's own found in a
// store is stale (an earlier try that failed) unless its world still lives.
//
// Never destroyed (nor the registries of the other layers): a program may
// hold a world in a global, destroyed among the static destructors after
// these would have been (a libtorch group in a global corrupted the heap at
// exit; a review).
std::mutex& live_worlds_mutex() {
  static auto* mutex = new std::mutex;
  return *mutex;
}
std::set<std::uint64_t>& live_worlds() {
  static auto* tokens = new std::set<std::uint64_t>;
  return *tokens;
}
bool world_lives(std::uint64_t token) {
  std::lock_guard lock(live_worlds_mutex());
  return live_worlds().count(token) != 0;
}

// Registers a new world's token for as long as it lives.
class LiveWorld {
 public:
  LiveWorld() {
    static std::atomic<std::uint64_t> last{0};
    token_ = last.fetch_add(1, std::memory_order_relaxed) + 1;
    std::lock_guard lock(live_worlds_mutex());
    live_worlds().insert(token_);
  }
  ~LiveWorld() {
    std::lock_guard lock(live_worlds_mutex());
    live_worlds().erase(token_);
  }
  LiveWorld(const LiveWorld&) = delete;
  LiveWorld& operator=(const LiveWorld&) = delete;
  std::uint64_t token() const { return token_; }

 private:
  std::uint64_t token_ = 0;
};

void publish_host(KeyValueStore& store, int rank, int world_size, const std::string& mine, const std::string& group,
                  std::uint64_t token, const RankNames& names) {
  store.set("axon/host/" + std::to_string(rank), mine + " " + std::to_string(::getpid()) + " " +
                                                     std::to_string(token) + " " + std::to_string(world_size) +
                                                     " " + std::to_string(names.job_rank(rank)) + " " + group);
}

// "pid 3232, rank 2": the process behind an entry, by its own account.
std::string process_of(const HostEntry& entry, const std::string& process) {
  return process + (entry.job_rank >= 0 ? ", rank " + std::to_string(entry.job_rank) : "");
}

// Every rank's entry; from each one's arrival on, its process (on this
// host) is watched by `setup`.
std::vector<HostEntry> read_hosts(SetupWait& setup, int rank, int world_size, const std::string& mine) {
  std::vector<HostEntry> e(static_cast<std::size_t>(world_size));
  std::vector<std::string> keys;
  for (int r = 0; r < world_size; ++r) keys.push_back("axon/host/" + std::to_string(r));
  setup.get_all(
      keys,
      [&](const std::vector<std::size_t>& missing) {
        std::string named;
        for (std::size_t i : missing) named += (named.empty() ? "" : ", ") + keys[i];
        const std::string ranks = joined_ranks(setup.names().job_ranks(missing));  // the job's numbers, as every message
        return (missing.size() == 1 ? "rank " + ranks + "'s host" : "the hosts of ranks " + ranks) +
               " (" + named + ")";
      },
      [&](std::size_t r, const std::string& value) {
        e[r] = parse_host_entry(value);
        if (e[r].host == mine && static_cast<int>(r) != rank && e[r].pid > 0) {
          setup.watch(static_cast<int>(r), e[r].pid);
        }
      });
  return e;
}

void check_one_machine(const std::vector<HostEntry>& e, const std::string& mine, const std::string& who,
                       const RankNames& names) {
  std::string elsewhere;
  for (std::size_t r = 0; r < e.size(); ++r) {
    if (e[r].host != mine) {
      elsewhere += (elsewhere.empty() ? "" : ", ") + names.rank(static_cast<int>(r)) + " on " +
                   host_name(e[r].host);
    }
  }
  if (!elsewhere.empty()) {
    throw InvalidArgument(who + "the axon backend needs every rank of a group on one machine, but this rank "
                          "runs on " + host_name(mine) + " and " + elsewhere +
                          " (hosts with equal names differ in their boot id)");
  }
}

// Processes given different groups (under PyTorch: different rank lists for
// one new_group call) meet under the same keys: say so, rather than fail
// later on an arena another process made, or wait for the timeout.
constexpr const char* kGivenDifferentGroups =
    " were given different groups (under PyTorch: different rank lists for one new_group call, or new_group "
    "calls in a different order)";

// Why: a second process given the same rank, or a store whose keys a
// finished world left, only timed out waiting for a rank that never came, or
// blamed the old world's exited process as if a live peer had died (found by
// a review). Where the store can say, an entry already there from another
// process is named before this rank publishes its own. (Two processes that
// publish at the same moment are still told apart later, check_same_group.)
void check_rank_unclaimed(KeyValueStore& store, int rank, const std::string& mine, const std::string& who,
                          const RankNames& names) {
  const std::string key = "axon/host/" + std::to_string(rank);
  if (store.has(key) != std::optional<bool>(true)) return;
  const HostEntry entry = parse_host_entry(store.get(key));
  const int pid = entry.pid;
  if (pid == ::getpid() && world_lives(entry.token)) {
    // Found by a review: PyTorch's env:// store is one server per port in
    // a process, shared by every group made while any of them lives, so
    // init_process_group after destroy_process_group(), with a DDP model
    // still holding the old group, met that group's keys: it hung, or
    // failed to open an arena that was long closed.
    throw InvalidArgument(who + "this store already holds " + names.position(rank) + "'s entry (" + key +
                          ") of a world this process set up before and still holds: one store namespace makes "
                          "one world. Under PyTorch, init_process_group's env:// store is shared by every group "
                          "made in the process while any of them lives: drop what still holds the old groups (a "
                          "DDP model, a comm hook's state, a variable) before making the default group again, "
                          "or give it another MASTER_PORT");
  }
  if (pid <= 0 || pid == ::getpid()) return;  // this process's own, from an earlier try
  const bool here = entry.host == mine;
  const std::string process = "pid " + std::to_string(pid) + (here ? "" : " on " + host_name(entry.host));
  auto exited = [pid] {
    try {
      return ProcessWatch(pid, "").exited();
    } catch (const PeerFailure&) {  // gone already
      return true;
    }
  };
  if (here && exited()) {
    throw InvalidArgument(who + "this store already holds an entry for " + names.position(rank) + " (" + key +
                          ") from " + process + ", which has exited: a world that ended used this store's keys; "
                          "one store namespace makes one world (give each world a new store or prefix)");
  }
  throw InvalidArgument(who + "another process (" + process_of(entry, process) + ") set up as " +
                        names.position(rank) +
                        " through this store too (" + key + "): each rank of a world must be given to one process, "
                        "or the processes" + kGivenDifferentGroups);
}

void check_same_group(const std::vector<HostEntry>& e, int rank, int world_size, const std::string& group,
                      const std::string& who, const RankNames& names) {
  const int claimed_by = e[static_cast<std::size_t>(rank)].pid;
  if (claimed_by != ::getpid()) {
    throw InvalidArgument(who + "another process (pid " + std::to_string(claimed_by) + ") set up as rank " +
                          std::to_string(rank) + " of this group too: the processes" + kGivenDifferentGroups);
  }
  auto as_given = [](int size, const std::string& name) {
    return "one of " + std::to_string(size) + " ranks" + (name.empty() ? "" : " (" + name + ")");
  };
  for (std::size_t r = 0; r < e.size(); ++r) {
    if (e[r].size > 0 && (e[r].size != world_size || e[r].group != group)) {
      // Named by its own account of its rank: this rank's list may give
      // that place to another process of the job.
      const std::string other =
          e[r].job_rank >= 0 ? "rank " + std::to_string(e[r].job_rank) : names.position(static_cast<int>(r));
      throw InvalidArgument(who + other + " (pid " + std::to_string(e[r].pid) +
                            ") sets up this group as " + as_given(e[r].size, e[r].group) + ", this rank as " +
                            as_given(world_size, group) + ": the ranks" + kGivenDifferentGroups);
    }
  }
}

// Rank 0's arena, mapped, once rank 0 (pid `owner`, from its host entry)
// has published it.
std::shared_ptr<void> map_published_arena(SetupWait& setup, int rank, int owner, int world_size,
                                          const std::string& who) {
  std::string published_arena;
  setup.get_all({"axon/arena"}, [](const std::vector<std::size_t>&) { return std::string("rank 0's arena (axon/arena)"); },
                [&](std::size_t, const std::string& value) { published_arena = value; });
  std::istringstream entry(published_arena);
  long long pid = 0, fd = 0;
  std::size_t published = 0;
  entry >> pid >> fd >> published;
  std::vector<long long> members(static_cast<std::size_t>(world_size));
  for (auto& member : members) entry >> member;
  if (members[static_cast<std::size_t>(rank)] != ::getpid()) {
    throw InvalidArgument(who + "rank 0 made the arena for pid " + std::to_string(members[static_cast<std::size_t>(rank)]) +
                          " as rank " + std::to_string(rank) + ", not for this process: the processes" +
                          kGivenDifferentGroups);
  }
  if (pid != owner) {
    throw InvalidArgument(who + "rank 0's arena was published by pid " + std::to_string(pid) + ", but rank 0's host by pid " +
                          std::to_string(owner) + ": the processes" + kGivenDifferentGroups);
  }
  const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  Fd opened;
  opened.fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (opened.fd < 0) {
    const int error = errno;
    const std::string reason = errno_text();
    setup.throw_if_a_peer_failed([&] { return "rank 0's arena (" + path + ", gone)"; });  // rank 0 gave up, closed it
    // The hint fits a refusal, not a full descriptor table (found by a
    // review: "Too many open files" with 100 groups under ulimit -n 60).
    // A descriptor gone from a live rank 0 is most often one of a group
    // rank 0 has destroyed since, whose keys this rank read from a store
    // that outlived it (found by a review: a libtorch program that made its
    // next TCPStore on the same port while rank 0's old one still served).
    const std::string hint =
        error == EMFILE || error == ENFILE
            ? " (this process has no descriptor left: each live group holds a few; raise "
              "ulimit -n, or destroy groups no longer used)"
        : error == ENOENT
            ? " (rank 0 no longer holds it: most often the store gave this rank the keys of a group rank 0 has "
              "destroyed since, as a store rank 0 still served from before does: one store namespace makes one "
              "group; give each group a new prefix, or make sure the old store is gone first; otherwise, every "
              "rank must run as the same user in one PID namespace)"
            : " (every rank must run as the same user in one PID namespace)";
    throw Error(who + "cannot open rank 0's arena " + path + ": " + reason + hint);
  }
  // Rank 0 may have given up since (and its descriptor's number may already
  // be another arena's): touch nothing then.
  setup.throw_if_a_peer_failed([] { return std::string("rank 0's arena (axon/arena)"); });
  struct stat info {};
  const bool stated = ::fstat(opened.fd, &info) == 0;
  // A process that may open any user's files (root) would otherwise join
  // another user's job and share memory that user can write while it runs
  // (found by a review); the other way round, the open above already fails.
  if (stated && info.st_uid != ::geteuid()) {
    throw InvalidArgument(who + "rank 0's arena " + path + " belongs to uid " + std::to_string(info.st_uid) +
                          ", but this process runs as uid " + std::to_string(::geteuid()) +
                          ": every rank must run as the same user (is another user's job on this MASTER_PORT?)");
  }
  if (!stated || static_cast<std::size_t>(info.st_size) != published) {
    throw Error(who + "rank 0's arena " + path + " has " + std::to_string(info.st_size) +
                " bytes but rank 0 published " + std::to_string(published));
  }
  auto memory = map_shared(opened.fd, published, who, path);
  shm::check_arena(memory.get(), published, world_size);
  return memory;
}

// Every rank has mapped the arena, as met through the store, where a peer
// that gave up says why (a wait in the arena sees only that it exited).
void wait_until_all_mapped(KeyValueStore& store, SetupWait& setup, int rank, int world_size) {
  // A store that cannot check would block in get() without a deadline or
  // a watch on the peers, where the arena's barrier has both.
  if (!setup.store_can_check()) return;
  store.set("axon/mapped/" + std::to_string(rank), "1");
  std::vector<std::string> keys;
  for (int r = 0; r < world_size; ++r) keys.push_back("axon/mapped/" + std::to_string(r));
  setup.get_all(
      keys,
      [&setup](const std::vector<std::size_t>& missing) {
        return "rank(s) " + joined_ranks(setup.names().job_ranks(missing)) + " to map the arena (axon/mapped/<rank>)";
      },
      [](std::size_t, const std::string&) {});
}

// Two processes that both set up as rank 0 (given different groups) each
// publish an arena; the ranks map whichever they read. Once all have
// mapped, the one whose arena is not the published one says so.
void check_own_arena_published(KeyValueStore& store, int world_size, const std::string& who) {
  std::istringstream entry(store.get("axon/arena"));
  long long pid = 0;
  entry >> pid;
  if (pid != ::getpid()) {
    throw InvalidArgument(who + "another process (pid " + std::to_string(pid) + ") published its arena as rank 0 of " +
                          "this group of " + std::to_string(world_size) + " too: the processes" + kGivenDifferentGroups);
  }
}

}  // namespace

std::shared_ptr<StoreBackend> StoreBackend::create(KeyValueStore& store, int rank, int world_size,
                                                   StoreOptions options) {
  if (world_size < 1 || world_size > shm::kMaxWorldSize) {
    throw InvalidArgument("store backend: world size " + std::to_string(world_size) +
                          " is outside 1.." + std::to_string(shm::kMaxWorldSize));
  }
  if (rank < 0 || rank >= world_size) {
    throw InvalidArgument("store backend: invalid rank " + std::to_string(rank) +
                          " (rank should be in the 0.." + std::to_string(world_size - 1) + " range)");
  }
  if (!options.rank_names.empty() && options.rank_names.size() != static_cast<std::size_t>(world_size)) {
    throw InvalidArgument("store backend: " + std::to_string(options.rank_names.size()) +
                          " rank names (StoreOptions::rank_names) for a world of " + std::to_string(world_size));
  }
  const RankNames names(options.rank_names);
  const std::string who = names.rank(rank) + ": ";
  // Before anything is published: every rank is given the same options, so
  // each refuses them alone and nobody waits for a peer.
  shm::check_size_limit(options.slot_bytes, shm::kMaxSlotBytes, who + "StoreOptions::slot_bytes");
  shm::check_size_limit(options.arena_bytes, shm::kMaxArenaBytes, who + "StoreOptions::arena_bytes");
  shm::check_size_limit(options.shared_bytes, shm::kMaxArenaBytes, who + "StoreOptions::shared_bytes");
  shm::check_size_limit(options.arena_bytes + options.shared_bytes, shm::kMaxArenaBytes,
                        who + "StoreOptions::arena_bytes + shared_bytes");
  const auto timeout = options.timeout.count() > 0 ? options.timeout : shm::default_timeout();
  // How messages name each timeout: the ops', and the set-up's (the ops'
  // unless StoreOptions gives one of its own).
  auto name_of = [](std::chrono::milliseconds given, const std::string& name, const char* field) -> std::string {
    return given.count() <= 0 ? "AXON_TIMEOUT" : name.empty() ? field : name;
  };
  const std::string timeout_name = name_of(options.timeout, options.timeout_name, "StoreOptions::timeout");
  const bool own_setup_timeout = options.setup_timeout.count() > 0;
  SetupWait setup(store, options, who, names, rank, world_size, own_setup_timeout ? options.setup_timeout : timeout,
                  own_setup_timeout ? name_of(options.setup_timeout, options.setup_timeout_name,
                                              "StoreOptions::setup_timeout")
                                    : timeout_name);
  const std::string mine = host_identity(who);
  auto live = std::make_shared<LiveWorld>();
  check_rank_unclaimed(store, rank, mine, who, names);
  publish_host(store, rank, world_size, mine, options.group, live->token(), names);

  // Rank 0's arena descriptor lives until create() returns: a peer still
  // opening it after rank 0 gave up finds the reason in the store first.
  Fd memfd;
  auto set_up = [&]() -> std::shared_ptr<StoreBackend> {
    // 1. Hosts and pids.
    const std::vector<HostEntry> hosts = read_hosts(setup, rank, world_size, mine);
    check_one_machine(hosts, mine, who, names);
    check_same_group(hosts, rank, world_size, options.group, who, names);
    std::vector<int> pids;
    for (const HostEntry& host : hosts) pids.push_back(host.pid);

    // 2. Rank 0 makes the arena, the others map it.
    shm::ArenaSpec spec;
    spec.world_size = world_size;
    spec.arena_bytes = (options.arena_bytes ? options.arena_bytes : shm::default_arena_bytes(world_size, options.slot_bytes)) +
                       options.shared_bytes;
    spec.slot_bytes = options.slot_bytes;
    if (options.job_size > world_size) spec.flat_barrier = shm::ranks_outnumber_cores(options.job_size);
    const std::size_t bytes = spec.arena_bytes;
    std::shared_ptr<void> memory;
    if (rank == 0) {
      // The launcher's way (shm/arena_file.hpp): the available memory is
      // checked and every page reserved, so too little memory fails here with
      // the sizes, not as SIGBUS in a rank later.
      shm::MemfdArena created;
      try {
        created = shm::create_arena_memfd("axon-arena", spec,
                                          options.size_remedy.empty() ? "StoreOptions::arena_bytes sets a smaller arena"
                                                                      : options.size_remedy);
      } catch (const InvalidArgument& e) {
        throw InvalidArgument(who + e.what());
      } catch (const Error& e) {
        throw Error(who + e.what());
      }
      memfd.fd = created.fd;
      memory = std::shared_ptr<void>(created.base, [bytes](void* p) { ::munmap(p, bytes); });
      // "pid fd bytes pid-of-rank-0 ... pid-of-rank-n-1": the processes the
      // arena is for, which each checks it is one of.
      std::string published = std::to_string(::getpid()) + " " + std::to_string(memfd.fd) + " " + std::to_string(bytes);
      for (int pid : pids) published.append(" ").append(std::to_string(pid));
      store.set("axon/arena", published);
    } else {
      memory = map_published_arena(setup, rank, pids[0], world_size, who);
    }

    auto* base = static_cast<std::byte*>(memory.get());
    const shm::ArenaView arena(base);
    arena.rank_control(rank).joined.store(1, std::memory_order_release);
    arena.header().attached.fetch_add(1, std::memory_order_acq_rel);

    // 3. Everyone has mapped it: met in the store, then in the arena, after
    // which rank 0's descriptor (closed when memfd goes out of scope) is no
    // longer needed. A rank that gives up from here on (also on a variable
    // attaching reads, AXON_SPIN_POLLS say) may leave a peer that saw every
    // entry already in the arena's barrier: the abort ends it there, with
    // this rank's reason (it saw only this process's exit, or nothing while
    // it lived; found by a review).
    const std::shared_ptr<void> mapping = memory;  // the header outlives a throwing attach_world
    try {
      wait_until_all_mapped(store, setup, rank, world_size);
      if (rank == 0 && setup.store_can_check()) check_own_arena_published(store, world_size, who);
      auto impl = Impl::attach_world(std::move(memory), base, rank, timeout, pids, names, options.job_size);
      impl->state->waits.name_timeout(timeout_name);  // "AXON_TIMEOUT" when none is given, as by default
      auto backend = std::shared_ptr<StoreBackend>(new StoreBackend("axon", std::move(impl)),
                                                   [live](StoreBackend* world) { delete world; });
      backend->barrier();
      return backend;
    } catch (const std::exception& e) {
      shm::abort_job(arena.header(), rank, named_by(who, e.what()));
      throw;
    }
  };
  try {
    return set_up();
  } catch (const std::exception& e) {
    // A timeout or a peer's exit is no failure of this rank's own; nor is
    // what the caller's while_waiting threw, or a store that failed.
    const bool own_failure = dynamic_cast<const Error*>(&e) != nullptr &&
                             dynamic_cast<const PeerFailure*>(&e) == nullptr && !setup.gave_up_for_another_reason();
    leave_reason(store, rank, world_size, named_by(who, e.what()), own_failure, options.store_lives_here);
    throw;
  }
}

void StoreBackend::give_up(KeyValueStore& store, int rank, int world_size, const std::vector<int>& rank_names,
                           const std::string& reason, bool store_lives_here) {
  // Names that do not fit the world (a caller's own bad input) give way to its numbers.
  const RankNames names(rank_names.size() == static_cast<std::size_t>(world_size) ? rank_names : std::vector<int>{});
  leave_reason(store, rank, world_size, names.rank(rank) + ": " + reason, /*own_failure=*/true, store_lives_here);
}

}  // namespace axonml::distributed
