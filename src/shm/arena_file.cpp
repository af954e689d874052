#include "shm/arena_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <boost/interprocess/shared_memory_object.hpp>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <algorithm>
#include <random>
#include <string>
#include <string_view>

#include "axonml/distributed/error.hpp"
#include "base/text.hpp"

namespace axonml::distributed::shm {
namespace bip = boost::interprocess;
namespace {


// Free bytes in /dev/shm, or SIZE_MAX when it cannot be asked.
std::size_t dev_shm_free_bytes() {
  struct statvfs info {};
  if (::statvfs("/dev/shm", &info) != 0) return SIZE_MAX;
  return static_cast<std::size_t>(info.f_bavail) * info.f_frsize;
}

// A number from the first line of `path` ("max" or unreadable: SIZE_MAX).
std::size_t number_in_file(const std::string& path) {
  std::ifstream in(path);
  std::string word;
  if (!(in >> word) || word == "max") return SIZE_MAX;
  errno = 0;
  char* end = nullptr;
  const unsigned long long value = std::strtoull(word.c_str(), &end, 10);
  return errno == 0 && *end == '\0' ? static_cast<std::size_t>(value) : SIZE_MAX;
}

// The value of `key` in a cgroup's memory.stat (0 when absent).
std::size_t stat_in_file(const std::string& path, std::string_view key) {
  std::ifstream in(path);
  std::string name;
  for (std::size_t value = 0; in >> name >> value;) {
    if (name == key) return value;
  }
  return 0;
}

// Room below the memory limits of the cgroup at `dir` and of every cgroup
// above it (a limit anywhere up the tree applies): limit - (usage - the
// file cache, which the kernel reclaims before it fails a page).
// v2 names the files memory.max / memory.current, v1 memory.limit_in_bytes /
// memory.usage_in_bytes. SIZE_MAX where none is set or readable.
std::size_t cgroup_room(const std::string& mount, std::string path, bool v2) {
  std::size_t room = SIZE_MAX;
  for (;;) {
    const std::string dir = mount + (path == "/" ? "" : path) + "/";
    const std::size_t limit = number_in_file(dir + (v2 ? "memory.max" : "memory.limit_in_bytes"));
    const std::size_t used = number_in_file(dir + (v2 ? "memory.current" : "memory.usage_in_bytes"));
    if (limit != SIZE_MAX && used != SIZE_MAX) {
      // The whole file cache, active too: the kernel reclaims it before it
      // fails a page (a review: 398 MB of active cache refused a 200 MiB
      // arena that then fitted).
      const std::size_t cache = stat_in_file(dir + "memory.stat", v2 ? "inactive_file" : "total_inactive_file") +
                                stat_in_file(dir + "memory.stat", v2 ? "active_file" : "total_active_file");
      const std::size_t charged = used > cache ? used - cache : 0;
      room = std::min(room, limit > charged ? limit - charged : 0);
    }
    if (path.empty() || path == "/") return room;
    path = path.substr(0, std::max<std::size_t>(path.rfind('/'), 1));
  }
}

// Memory a memfd's pages may still take: the kernel's MemAvailable, and what
// is left below this process's cgroup memory limits, v2 or v1 (under v1 only
// memory.max was read, so axon-launch in a limited cgroup was OOM-killed
// without a word; a review). SIZE_MAX when none can be read.
std::size_t available_memory_bytes() {
  std::size_t available = SIZE_MAX;
  std::ifstream meminfo("/proc/meminfo");
  for (std::string key; meminfo >> key;) {
    std::size_t kib = 0;
    meminfo >> kib;
    if (key == "MemAvailable:") {
      available = kib << 10;
      break;
    }
    meminfo.ignore(256, '\n');
  }
  // Lines of /proc/self/cgroup: "0::/path" (v2), "4:memory:/path" (v1).
  std::ifstream cgroups("/proc/self/cgroup");
  for (std::string line; std::getline(cgroups, line);) {
    const std::size_t first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    if (controllers.empty()) {
      available = std::min({available, cgroup_room("/sys/fs/cgroup", path, true),
                            cgroup_room("/sys/fs/cgroup/unified", path, true)});
    } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      available = std::min(available, cgroup_room("/sys/fs/cgroup/memory", path, false));
    }
  }
  return available;
}

[[noreturn]] void no_room(std::size_t bytes, const std::string& why, std::string_view remedy) {
  const std::size_t free_bytes = dev_shm_free_bytes();
  throw Error("cannot reserve " + format_bytes(bytes) + " for the arena in /dev/shm (" + why + "; " +
              (free_bytes == SIZE_MAX ? std::string("unknown") : format_bytes(free_bytes)) +
              " free there): free space in /dev/shm, enlarge it (docker run --shm-size), or " +
              std::string(remedy));
}

// This process's mappings, in bytes (0 when /proc cannot tell).
std::size_t address_space_in_use() {
  std::ifstream statm("/proc/self/statm");
  std::size_t pages = 0;
  statm >> pages;
  return pages * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}

}  // namespace

std::string address_space_limit_advice() {
  rlimit as{};
  if (::getrlimit(RLIMIT_AS, &as) != 0 || as.rlim_cur == RLIM_INFINITY) return {};
  // With what is mapped already: "100 MiB cannot fit in 146.5 MiB" read as a
  // contradiction (a review).
  return "this process's address space is limited to " + format_bytes(static_cast<std::size_t>(as.rlim_cur)) +
         " (ulimit -v), " + format_bytes(address_space_in_use()) + " of it in use already: raise that limit";
}

namespace {

[[noreturn]] void no_memory(std::size_t bytes, const std::string& why, std::string_view remedy) {
  const std::size_t available = available_memory_bytes();
  // A mapping refused under an address-space limit is that limit, not the
  // machine's memory (it advised "free memory" with 22 GiB free; a review).
  std::string advice = "free memory";
  if (std::string limit = address_space_limit_advice(); why.starts_with("mmap") && !limit.empty()) {
    advice = std::move(limit);
  }
  throw Error("cannot reserve " + format_bytes(bytes) + " of shared memory for the arena (" + why + "; " +
              (available == SIZE_MAX ? std::string("unknown") : format_bytes(available)) +
              " of memory available): " + advice + ", or " + std::string(remedy));
}

// Shared memory counts as a file: sizing it past this process's file size
// limit (ulimit -f) raises SIGXFSZ, which killed axon-launch without a word
// (exit 153) and, under mpirun, the node's first rank with the arena's name
// still in /dev/shm (a review). Asked first, it is an error that says so.
void check_file_size_limit(std::size_t bytes, std::string_view remedy) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_FSIZE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return;
  if (bytes <= static_cast<std::size_t>(limit.rlim_cur)) return;
  throw Error("cannot reserve " + format_bytes(bytes) + " of shared memory for the arena: this process's file size "
              "limit is " + format_bytes(static_cast<std::size_t>(limit.rlim_cur)) +
              " (ulimit -f), and shared memory counts as a file: raise that limit (ulimit -f unlimited), or " +
              std::string(remedy));
}

// The arena's pages are taken a piece at a time (reserve_in_pieces).
constexpr std::size_t kReservePiece = std::size_t{8} << 20;
// How far the available memory may fall beyond this reservation's own
// pieces before other processes count as taking it: this process's own
// allocations, and the kernel's batched accounting, move it a little.
constexpr std::size_t kOthersTolerance = std::size_t{32} << 20;

// Takes the arena's pages a piece at a time. Before each piece, when what
// is left no longer fits in the memory available and other processes took
// memory meanwhile, it stops (`out_of_memory`): a job started at the same
// moment passed the same first check, and the two together took more than
// the machine had, so the OOM killer took the second launcher and unrelated
// processes, with no word (a review: two 13 GB arenas on a 23 GB machine).
// A reservation alone is never stopped: the first check let it through,
// and only its own pieces used the memory (a first version, asking for a
// piece to spare, refused jobs that fitted; a review). `fallocate_failed`
// reports posix_fallocate's error. Both must throw.
template <class OutOfMemory, class FallocateFailed>
void reserve_in_pieces(int fd, std::size_t bytes, OutOfMemory&& out_of_memory, FallocateFailed&& fallocate_failed) {
  const std::size_t at_start = available_memory_bytes();
  for (std::size_t done = 0; done < bytes;) {
    if (done != 0) {
      const std::size_t available = available_memory_bytes();
      const std::size_t by_others = at_start > available + done ? at_start - available - done : 0;
      if (bytes - done > available && by_others > kOthersTolerance) {
        out_of_memory("while it was being reserved, other processes took " + format_bytes(by_others) +
                      " and the " + format_bytes(bytes - done) +
                      " left no longer fit (another job starting at the same time?)");
      }
    }
    const std::size_t piece = std::min(kReservePiece, bytes - done);
    if (const int err = ::posix_fallocate(fd, static_cast<off_t>(done), static_cast<off_t>(piece)); err != 0) {
      fallocate_failed(std::string("posix_fallocate: ") + std::strerror(err));
    }
    done += piece;
  }
}

}  // namespace

std::string unique_arena_name(std::string_view prefix) {
  std::random_device device;
  const std::uint64_t random = (std::uint64_t{device()} << 32) ^ device();
  char suffix[48];
  std::snprintf(suffix, sizeof(suffix), "-%d-%016llx", static_cast<int>(::getpid()),
                static_cast<unsigned long long>(random));
  return std::string(prefix) + suffix;
}

std::shared_ptr<bip::mapped_region> create_arena_file(const std::string& name, const ArenaSpec& spec,
                                                      std::string_view remedy) {
  const std::size_t bytes = spec.arena_bytes ? spec.arena_bytes : default_arena_bytes(spec.world_size, spec.slot_bytes);
  bip::permissions owner_only;
  owner_only.set_permissions(0600);
  bip::shared_memory_object object;
  try {
    object = bip::shared_memory_object(bip::create_only, name.c_str(), bip::read_write, owner_only);
  } catch (const bip::interprocess_exception& e) {
    throw Error("cannot create the arena /dev/shm/" + name + ": " + e.what());
  }
  try {
    check_file_size_limit(bytes, remedy);
    object.truncate(static_cast<bip::offset_t>(bytes));
    // Asking first spares the machine a partial reservation that is undone anyway.
    if (bytes > dev_shm_free_bytes()) no_room(bytes, "not enough space", remedy);
    const int fd = object.get_mapping_handle().handle;
    reserve_in_pieces(
        fd, bytes, [&](const std::string& why) { no_memory(bytes, why, remedy); },
        [&](const std::string& why) { no_room(bytes, why, remedy); });
    auto region = std::make_shared<bip::mapped_region>(object, bip::read_write, 0, bytes);
    ArenaSpec sized = spec;
    sized.arena_bytes = bytes;
    format_arena(region->get_address(), sized);
    return region;  // the object's descriptor closes here; the mapping keeps the memory
  } catch (...) {
    bip::shared_memory_object::remove(name.c_str());
    throw;
  }
}

MemfdArena create_arena_memfd(const std::string& label, const ArenaSpec& spec,
                              std::string_view remedy) {
  MemfdArena arena;
  arena.bytes = spec.arena_bytes ? spec.arena_bytes : default_arena_bytes(spec.world_size, spec.slot_bytes);
  arena.fd = ::memfd_create(label.c_str(), MFD_CLOEXEC);
  if (arena.fd < 0) {
    throw Error("cannot create the arena (memfd_create " + label + "): " + std::strerror(errno));
  }
  // memfd_create makes the file 0777; only the owner's processes (and root)
  // can reach it through /proc/PID/fd, but it should say owner-only itself,
  // as the README promises (found by a review).
  ::fchmod(arena.fd, 0600);
  try {
    // Asking first spares the machine a partial reservation that is undone
    // anyway; a reservation beyond memory would otherwise end in the OOM killer.
    if (arena.bytes > available_memory_bytes()) no_memory(arena.bytes, "not enough memory", remedy);
    check_file_size_limit(arena.bytes, remedy);
    if (::ftruncate(arena.fd, static_cast<off_t>(arena.bytes)) != 0) {
      no_memory(arena.bytes, std::string("ftruncate: ") + std::strerror(errno), remedy);
    }
    const auto no_memory_for_arena = [&](const std::string& why) { no_memory(arena.bytes, why, remedy); };
    reserve_in_pieces(arena.fd, arena.bytes, no_memory_for_arena, no_memory_for_arena);
    void* base = ::mmap(nullptr, arena.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, arena.fd, 0);
    if (base == MAP_FAILED) {
      no_memory(arena.bytes, std::string("mmap: ") + std::strerror(errno), remedy);
    }
    arena.base = base;
    ArenaSpec sized = spec;
    sized.arena_bytes = arena.bytes;
    format_arena(arena.base, sized);
    return arena;
  } catch (...) {
    destroy_arena_memfd(arena);
    throw;
  }
}

void destroy_arena_memfd(MemfdArena& arena) {
  if (arena.base != nullptr) ::munmap(arena.base, arena.bytes);
  if (arena.fd >= 0) ::close(arena.fd);
  arena.base = nullptr;
  arena.fd = -1;
}

}  // namespace axonml::distributed::shm
