#include "axonml/distributed/shm_backend.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "axonml/distributed/error.hpp"
#include "backends/arena_backend_impl.hpp"
#include "base/env.hpp"
#include "shm/arena_file.hpp"
#include "shm/arena_layout.hpp"
#include "shm/arena_view.hpp"
#include "shm/exit_guard.hpp"
#include "shm/wait.hpp"

namespace axonml::distributed {

namespace {

// A whole decimal number in [low, high] from variable `name`, which the
// launcher sets (env::integer refuses a bad value, naming it).
long long required_integer(const char* name, long long low, long long high) {
  const auto value = env::integer(name, low, high);
  if (!value) {
    throw InvalidArgument(std::string("shm backend: ") + name +
                          " is not set (start the program with axon-launch)");
  }
  return *value;
}

// The arenas (device, inode) this process has attached to, and as which rank.
// A second attach would count twice in `attached` and publish the same
// rank's rounds from two endpoints, so it is refused here, on the caller.
struct Attachments {
  std::mutex mutex;
  std::set<std::pair<dev_t, ino_t>> arenas;
};
// Never destroyed: a World held in a global goes among the static
// destructors, possibly after this would have.
Attachments& attachments() {
  static auto* instance = new Attachments;
  return *instance;
}

// Unmaps unless released (the error paths between mmap and the backend).
struct Mapping {
  void* base;
  std::size_t bytes;
  ~Mapping() {
    if (base != nullptr) ::munmap(base, bytes);
  }
};

}  // namespace

std::shared_ptr<ShmBackend> ShmBackend::from_environment() {
  const int world_size =
      static_cast<int>(required_integer("WORLD_SIZE", 1, shm::kMaxWorldSize));
  const int rank = static_cast<int>(required_integer("RANK", 0, world_size - 1));
  const int fd = static_cast<int>(required_integer("AXON_ARENA_FD", 0, INT_MAX));
  const auto bytes = static_cast<std::size_t>(
      required_integer("AXON_ARENA_BYTES", sizeof(shm::ArenaHeader), static_cast<long long>(shm::kMaxArenaBytes)));
  const std::string who = "rank " + std::to_string(rank) + ": ";
  const std::string arena = "the arena (AXON_ARENA_FD=" + std::to_string(fd) + ")";

  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    // Three ways here, and the message cannot tell which: a wrapper closed
    // the descriptor, or this process is not the rank but a program the
    // rank started (system(), subprocess), or the rank exec'd a program
    // after its World::init(), which closes the descriptor on exec; both of
    // the last inherit the rank's variables but not the arena (reviews:
    // only the wrapper was named, then not the exec).
    throw Error(who + arena + " is not an open descriptor (" + std::strerror(errno) +
                "): start the program with axon-launch, and do not close inherited descriptors "
                "in a wrapper between the launcher and the program; a program that a rank starts "
                "(system(), subprocess), or execs after its World::init() (the arena's descriptor "
                "closes on exec from then on), inherits the rank's RANK and AXON_* variables but not "
                "the arena, and cannot join the job: only the processes axon-launch starts are ranks");
  }
  if (!S_ISREG(info.st_mode) || static_cast<std::size_t>(info.st_size) != bytes) {
    throw Error(who + arena + " has " + std::to_string(info.st_size) +
                " bytes but AXON_ARENA_BYTES=" + std::to_string(bytes) +
                (S_ISREG(info.st_mode) ? "" : " (it is not a file: another descriptor took its number?)"));
  }

  std::unique_lock lock(attachments().mutex);
  if (attachments().arenas.count({info.st_dev, info.st_ino}) != 0) {
    throw InvalidArgument(who + "World::init() (ShmBackend::from_environment) was already called "
                          "in this process, which attached it to the job as rank " +
                          std::to_string(rank) + " of " + std::to_string(world_size) +
                          ": a process is one rank and attaches once; keep the World the first "
                          "call returned (copies share it)");
  }

  Mapping mapping{::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0), bytes};
  if (mapping.base == MAP_FAILED) {
    mapping.base = nullptr;
    // The launcher made the arena under its own limits: a rank's own address
    // space limit is news to it (a review saw only "Cannot allocate memory").
    const int error = errno;
    const std::string limit = error == ENOMEM ? shm::address_space_limit_advice() : std::string();
    throw Error(who + "cannot map " + arena + " of " + std::to_string(bytes) + " bytes: " + std::strerror(error) +
                (limit.empty() ? "" : ": " + limit + ", or run the job with a smaller --arena-mb"));
  }
  auto* base = static_cast<std::byte*>(mapping.base);
  auto& header = const_cast<shm::ArenaHeader&>(shm::check_arena(base, bytes, world_size));
  // From another PID namespace the launcher's pid and the peers' name other
  // processes or none: a wait took the launcher for gone (a review: a rank
  // under `unshare -p -f` failed its first all_reduce, "the launcher has gone
  // away"). Refused before joining, so the launcher names this rank.
  if (const std::uint64_t own = shm::pid_namespace_id();
      header.launcher_pid_namespace != 0 && own != 0 && own != header.launcher_pid_namespace) {
    throw InvalidArgument(who + "this process runs in a PID namespace other than axon-launch's (pid " +
                          std::to_string(header.launcher_pid) + " there; started under unshare -p or a sandbox?): "
                          "every rank must run in the launcher's, where the ranks and the launcher can tell "
                          "whether the others are alive");
  }

  // Register: first this rank's joined flag (the launcher reads it when a
  // rank exits, to tell a rank that never joined from one that finished),
  // then the count. A rank joins once: a second process with the same RANK
  // (a wrapper or the program setting it) took the place of the rank that
  // never came, and the job hung with every process attached, beyond
  // --start-timeout and AXON_TIMEOUT (a review).
  if (shm::ArenaView(base).rank_control(rank).joined.exchange(1, std::memory_order_acq_rel) != 0) {
    throw InvalidArgument(who + "another process has already joined this job as rank " + std::to_string(rank) +
                          " (RANK=" + std::to_string(rank) + " in two processes: does the program, or a wrapper "
                          "between axon-launch and it, set RANK? axon-launch gives each process its own)");
  }
  const std::uint32_t before = header.attached.fetch_add(1, std::memory_order_acq_rel);
  if (before >= static_cast<std::uint32_t>(world_size)) {
    throw Error(who + "more than WORLD_SIZE=" + std::to_string(world_size) +
                " processes attached to " + arena + " (a program started twice?)");
  }
  attachments().arenas.insert({info.st_dev, info.st_ino});
  lock.unlock();
  // The mapping holds the memory from here on; programs this rank starts
  // must not inherit the descriptor (they would keep the memory alive).
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);

  std::shared_ptr<void> owner(std::exchange(mapping.base, nullptr),
                              [bytes](void* p) { ::munmap(p, bytes); });
  auto impl = Impl::attach_world(std::move(owner), base, rank, shm::default_timeout());
  // A World with static storage duration is destroyed at exit, perhaps
  // under a thread still calling it: the exit refuses such calls first.
  shm::guard_exit(impl->state->waits);
  impl->calls.count_for_exit();  // the world's Impl was made before; its groups' read the waits
  shm::EndpointCalls& calls = impl->calls;  // the Impl moves, its address does not
  auto backend = std::shared_ptr<ShmBackend>(new ShmBackend("shm", std::move(impl)));
  calls.set_owner(backend);
  return backend;
}

}  // namespace axonml::distributed
