#include "shm/arena_file.hpp"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <boost/interprocess/shared_memory_object.hpp>
#include <cstdint>
#include <cstdio>
#include <cstring>
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

[[noreturn]] void no_room(std::size_t bytes, const std::string& why, std::string_view remedy) {
  const std::size_t free_bytes = dev_shm_free_bytes();
  throw Error("cannot reserve " + mib(bytes) + " for the arena in /dev/shm (" + why + "; " +
              (free_bytes == SIZE_MAX ? std::string("unknown") : mib(free_bytes)) +
              " free there): free space in /dev/shm, enlarge it (docker run --shm-size), or " +
              std::string(remedy));
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
  const std::size_t bytes = spec.arena_bytes ? spec.arena_bytes : default_arena_bytes(spec.world_size);
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

}  // namespace axonml::distributed::shm
