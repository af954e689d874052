#include "shm/arena_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
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
std::size_t number_in_file(const char* path) {
  std::ifstream in(path);
  std::string word;
  if (!(in >> word) || word == "max") return SIZE_MAX;
  errno = 0;
  char* end = nullptr;
  const unsigned long long value = std::strtoull(word.c_str(), &end, 10);
  return errno == 0 && *end == '\0' ? static_cast<std::size_t>(value) : SIZE_MAX;
}

// Memory a memfd's pages may still take: the kernel's MemAvailable, and
// under a cgroup (v2) memory limit what is left below it. SIZE_MAX when
// neither can be read.
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
  const std::size_t limit = number_in_file("/sys/fs/cgroup/memory.max");
  const std::size_t used = number_in_file("/sys/fs/cgroup/memory.current");
  if (limit != SIZE_MAX && used != SIZE_MAX) available = std::min(available, limit > used ? limit - used : 0);
  return available;
}

[[noreturn]] void no_room(std::size_t bytes, const std::string& why, std::string_view remedy) {
  const std::size_t free_bytes = dev_shm_free_bytes();
  throw Error("cannot reserve " + format_bytes(bytes) + " for the arena in /dev/shm (" + why + "; " +
              (free_bytes == SIZE_MAX ? std::string("unknown") : format_bytes(free_bytes)) +
              " free there): free space in /dev/shm, enlarge it (docker run --shm-size), or " +
              std::string(remedy));
}

[[noreturn]] void no_memory(std::size_t bytes, const std::string& why, std::string_view remedy) {
  const std::size_t available = available_memory_bytes();
  throw Error("cannot reserve " + format_bytes(bytes) + " of shared memory for the arena (" + why + "; " +
              (available == SIZE_MAX ? std::string("unknown") : format_bytes(available)) +
              " of memory available): free memory, or " + std::string(remedy));
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
    object.truncate(static_cast<bip::offset_t>(bytes));
    // Asking first spares the machine a partial reservation that is undone anyway.
    if (bytes > dev_shm_free_bytes()) no_room(bytes, "not enough space", remedy);
    const int fd = object.get_mapping_handle().handle;
    if (const int err = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes)); err != 0) {
      no_room(bytes, std::strerror(err), remedy);
    }
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
  try {
    // Asking first spares the machine a partial reservation that is undone
    // anyway; a reservation beyond memory would otherwise end in the OOM killer.
    if (arena.bytes > available_memory_bytes()) no_memory(arena.bytes, "not enough memory", remedy);
    if (::ftruncate(arena.fd, static_cast<off_t>(arena.bytes)) != 0) {
      no_memory(arena.bytes, std::string("ftruncate: ") + std::strerror(errno), remedy);
    }
    if (const int err = ::posix_fallocate(arena.fd, 0, static_cast<off_t>(arena.bytes)); err != 0) {
      no_memory(arena.bytes, std::string("posix_fallocate: ") + std::strerror(err), remedy);
    }
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
