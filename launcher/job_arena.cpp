#include "job_arena.hpp"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <boost/interprocess/shared_memory_object.hpp>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <stdexcept>

namespace axon_launch {
namespace bip = boost::interprocess;
namespace shm = axonml::distributed::shm;

namespace {

std::string mib(std::size_t bytes) {
  return std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB";
}

// Free bytes in /dev/shm, or SIZE_MAX when it cannot be asked.
std::size_t dev_shm_free_bytes() {
  struct statvfs info {};
  if (::statvfs("/dev/shm", &info) != 0) return SIZE_MAX;
  return static_cast<std::size_t>(info.f_bavail) * info.f_frsize;
}

[[noreturn]] void no_room(std::size_t bytes, const std::string& why) {
  const std::size_t free_bytes = dev_shm_free_bytes();
  throw std::runtime_error(
      "cannot reserve " + mib(bytes) + " for the arena in /dev/shm (" + why + "; " +
      (free_bytes == SIZE_MAX ? std::string("unknown") : mib(free_bytes)) +
      " free there): free space in /dev/shm, enlarge it (docker run --shm-size), or choose a "
      "smaller --arena-mb");
}

// Creates, sizes and reserves the object; unlinks it again if any step fails.
bip::shared_memory_object create_object(const std::string& name, std::size_t bytes) {
  bip::permissions owner_only;
  owner_only.set_permissions(0600);
  bip::shared_memory_object object;
  try {
    object = bip::shared_memory_object(bip::create_only, name.c_str(), bip::read_write, owner_only);
  } catch (const bip::interprocess_exception& e) {
    throw std::runtime_error("cannot create the arena /dev/shm/" + name + ": " + e.what());
  }
  try {
    object.truncate(static_cast<bip::offset_t>(bytes));
    // tmpfs hands out pages lazily; reserving them now turns a full /dev/shm
    // into this message instead of a SIGBUS in some rank mid-run.
    // Asking first spares the machine a partial reservation that is undone anyway.
    if (bytes > dev_shm_free_bytes()) no_room(bytes, "not enough space");
    const int fd = object.get_mapping_handle().handle;
    if (const int err = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes)); err != 0) {
      no_room(bytes, std::strerror(err));
    }
  } catch (...) {
    bip::shared_memory_object::remove(name.c_str());
    throw;
  }
  return object;
}

}  // namespace

std::string unique_arena_name() {
  std::random_device device;
  const std::uint64_t random = (std::uint64_t{device()} << 32) ^ device();
  char name[64];
  std::snprintf(name, sizeof(name), "axon-%d-%016llx", static_cast<int>(::getpid()),
                static_cast<unsigned long long>(random));
  return name;
}

JobArena::JobArena(int world_size, std::size_t arena_bytes, std::size_t slot_bytes)
    : name_(unique_arena_name()), bytes_(arena_bytes) {
  bip::shared_memory_object object = create_object(name_, bytes_);
  try {
    region_ = bip::mapped_region(object, bip::read_write, 0, bytes_);
    shm::ArenaSpec spec;
    spec.world_size = world_size;
    spec.arena_bytes = bytes_;
    spec.slot_bytes = slot_bytes;
    spec.launcher_pid = static_cast<std::int32_t>(::getpid());
    shm::format_arena(region_.get_address(), spec);
  } catch (...) {
    remove_name();
    throw;
  }
  // The object's descriptor closes here; the mapping keeps the memory.
}

JobArena::~JobArena() { remove_name(); }

shm::ArenaHeader& JobArena::header() const {
  return *static_cast<shm::ArenaHeader*>(region_.get_address());
}

unsigned JobArena::attached() const {
  return header().attached.load(std::memory_order_acquire);
}

bool JobArena::joined(int rank) const {
  auto& h = header();
  const auto* controls = reinterpret_cast<const shm::RankControl*>(
      reinterpret_cast<const std::byte*>(&h) + h.rank_controls_offset);
  return controls[rank].joined.load(std::memory_order_acquire) != 0;
}

void JobArena::remove_name() {
  if (removed_) return;
  bip::shared_memory_object::remove(name_.c_str());
  removed_ = true;
}

}  // namespace axon_launch
