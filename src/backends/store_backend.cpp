#include "axonml/distributed/store_backend.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "axonml/distributed/error.hpp"
#include "backends/arena_backend_impl.hpp"
#include "base/process_watch.hpp"
#include "base/text.hpp"
#include "shm/arena_file.hpp"
#include "shm/arena_layout.hpp"
#include "shm/wait.hpp"
#include "shm/arena_view.hpp"

namespace axonml::distributed {
namespace {

// "hostname boot-id": equal on two processes exactly when they run under
// one kernel, which is what sharing memory needs (hostnames alone collide
// across containers on different machines).
std::string host_identity() {
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  std::string boot_id;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot_id;
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
    throw Error(who + "cannot map the arena " + what + " (" + std::to_string(bytes) +
                " bytes): " + errno_text());
  }
  return std::shared_ptr<void>(base, [bytes](void* p) { ::munmap(p, bytes); });
}

// What create() watches while it waits for a peer's entry in the store.
class SetupWait {
 public:
  SetupWait(KeyValueStore& store, const StoreOptions& options, std::string who, int world_size,
            std::chrono::milliseconds timeout)
      : store_(store),
        options_(options),
        who_(std::move(who)),
        timeout_(timeout),
        deadline_(std::chrono::steady_clock::now() + timeout),
        peers_(static_cast<std::size_t>(world_size)) {}

  // From now on a wait also ends when `rank`'s process exits.
  void watch(int rank, int pid) {
    peers_[static_cast<std::size_t>(rank)] = ProcessWatch(pid, who_ + "rank " + std::to_string(rank));
  }

  // The value of `key`, which `what` ("rank 1's host") publishes. A store
  // that cannot check (has() always true) waits in get() alone.
  std::string get(const std::string& key, const std::string& what) {
    auto pause = std::chrono::microseconds(100);
    while (!store_.has(key)) {
      for (const auto& peer : peers_) {
        if (peer.exited()) {
          throw PeerFailure(who_ + "rank " + std::to_string(&peer - peers_.data()) + " (pid " +
                            std::to_string(peer.pid()) + ") exited or was killed while this rank waited for " +
                            what + " (" + key + ") to set up the shared memory");
        }
      }
      if (options_.while_waiting) options_.while_waiting();
      if (std::chrono::steady_clock::now() >= deadline_) {
        const std::string source = options_.timeout.count() > 0
                                       ? (options_.timeout_name.empty() ? "StoreOptions::timeout" : options_.timeout_name)
                                       : "AXON_TIMEOUT";
        throw Timeout(who_ + "timed out after " + format_seconds(std::chrono::duration<double>(timeout_).count()) +
                      " s (" + source + ") waiting for " + what + " (" + key +
                      ") in the store to set up the shared memory");
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(10'000));
    }
    return store_.get(key);
  }

 private:
  KeyValueStore& store_;
  const StoreOptions& options_;
  std::string who_;
  std::chrono::milliseconds timeout_;
  std::chrono::steady_clock::time_point deadline_;
  std::vector<ProcessWatch> peers_;
};

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
  const std::string who = "rank " + std::to_string(rank) + ": ";
  const auto timeout = options.timeout.count() > 0 ? options.timeout : shm::default_timeout();

  SetupWait setup(store, options, who, world_size, timeout);

  // 1. Hosts and pids.
  const std::string mine = host_identity();
  store.set("axon/host/" + std::to_string(rank), mine + " " + std::to_string(::getpid()));
  std::vector<int> pids(static_cast<std::size_t>(world_size));
  std::string elsewhere;
  for (int r = 0; r < world_size; ++r) {
    std::istringstream entry(setup.get("axon/host/" + std::to_string(r), "rank " + std::to_string(r) + "'s host"));
    std::string name, boot_id;
    int& pid = pids[static_cast<std::size_t>(r)];
    entry >> name >> boot_id >> pid;
    if (name + " " + boot_id != mine) {
      elsewhere += (elsewhere.empty() ? "" : ", ") + std::string("rank ") + std::to_string(r) + " on " + name;
    } else if (r != rank && pid > 0) {
      setup.watch(r, pid);
    }
  }
  if (!elsewhere.empty()) {
    throw InvalidArgument(who + "the axon backend needs every rank of a group on one machine, but this rank "
                          "runs on " + host_name(mine) + " and " + elsewhere +
                          " (hosts with equal names differ in their boot id)");
  }

  // 2. Rank 0 makes the arena.
  shm::ArenaSpec spec;
  spec.world_size = world_size;
  spec.arena_bytes = options.arena_bytes ? options.arena_bytes : shm::default_arena_bytes(world_size);
  spec.slot_bytes = options.slot_bytes;
  const std::size_t bytes = spec.arena_bytes;
  Fd memfd;
  std::shared_ptr<void> memory;
  if (rank == 0) {
    // The launcher's way (shm/arena_file.hpp): the available memory is
    // checked and every page reserved, so too little memory fails here with
    // the sizes, not as SIGBUS in a rank later.
    shm::MemfdArena created;
    try {
      created = shm::create_arena_memfd("axon-arena", spec, "StoreOptions::arena_bytes sets a smaller arena");
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(who + e.what());
    } catch (const Error& e) {
      throw Error(who + e.what());
    }
    memfd.fd = created.fd;
    memory = std::shared_ptr<void>(created.base, [bytes](void* p) { ::munmap(p, bytes); });
    ::fchmod(memfd.fd, 0600);  // peers open it through /proc as the same user only
    store.set("axon/arena", std::to_string(::getpid()) + " " + std::to_string(memfd.fd) + " " +
                                std::to_string(bytes));
  } else {
    std::istringstream entry(setup.get("axon/arena", "rank 0's arena"));
    long long pid = 0, fd = 0;
    std::size_t published = 0;
    entry >> pid >> fd >> published;
    const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
    Fd opened;
    opened.fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (opened.fd < 0) {
      throw Error(who + "cannot open rank 0's arena " + path + ": " + errno_text() +
                  " (every rank must run as the same user in one PID namespace)");
    }
    struct stat info {};
    if (::fstat(opened.fd, &info) != 0 || static_cast<std::size_t>(info.st_size) != published) {
      throw Error(who + "rank 0's arena " + path + " has " + std::to_string(info.st_size) +
                  " bytes but rank 0 published " + std::to_string(published));
    }
    memory = map_shared(opened.fd, published, who, path);
    shm::check_arena(memory.get(), published, world_size);
  }

  auto* base = static_cast<std::byte*>(memory.get());
  const shm::ArenaView arena(base);
  auto& header = arena.header();
  arena.rank_control(rank).joined.store(1, std::memory_order_release);
  header.attached.fetch_add(1, std::memory_order_acq_rel);

  auto impl = Impl::attach_world(std::move(memory), base, rank, timeout, pids);
  if (options.timeout.count() > 0) {
    impl->state->waits.name_timeout(options.timeout_name.empty() ? "StoreOptions::timeout" : options.timeout_name);
  }
  auto backend = std::shared_ptr<StoreBackend>(new StoreBackend("axon", std::move(impl)));
  // 3. Once everyone has mapped the arena, rank 0's descriptor (closed when
  // memfd goes out of scope) is no longer needed.
  backend->barrier();
  return backend;
}

}  // namespace axonml::distributed
