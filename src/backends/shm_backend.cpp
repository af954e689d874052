#include "axonml/distributed/shm_backend.hpp"

#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <cerrno>
#include <cstdlib>
#include <string>

#include "axonml/distributed/error.hpp"
#include "backends/arena_backend_impl.hpp"
#include "shm/arena_layout.hpp"
#include "shm/wait.hpp"

namespace axonml::distributed {
namespace bip = boost::interprocess;

namespace {

std::string required_variable(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') {
    throw InvalidArgument(std::string("shm backend: ") + name +
                          " is not set (start the program with axon-launch)");
  }
  return value;
}

// A whole decimal number in [low, high] from variable `name`.
long long integer_variable(const char* name, long long low, long long high) {
  const std::string text = required_variable(name);
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || value < low || value > high) {
    throw InvalidArgument(std::string("shm backend: ") + name + "=" + text +
                          " is not a whole number in " + std::to_string(low) + ".." +
                          std::to_string(high));
  }
  return value;
}

}  // namespace

std::shared_ptr<ShmBackend> ShmBackend::from_environment() {
  const int world_size =
      static_cast<int>(integer_variable("WORLD_SIZE", 1, shm::kMaxWorldSize));
  const int rank = static_cast<int>(integer_variable("RANK", 0, world_size - 1));
  const std::string name = required_variable("AXON_ARENA");
  const auto bytes = static_cast<std::size_t>(
      integer_variable("AXON_ARENA_BYTES", sizeof(shm::ArenaHeader), 1LL << 50));
  const std::string who = "rank " + std::to_string(rank) + ": ";

  bip::shared_memory_object object;
  try {
    object = bip::shared_memory_object(bip::open_only, name.c_str(), bip::read_write);
  } catch (const bip::interprocess_exception& e) {
    if (e.get_error_code() == bip::not_found_error) {
      throw Error(who + "the arena /dev/shm/" + name +
                  " (AXON_ARENA) does not exist: the launcher removed the arena: did every rank "
                  "start? (a rank that ended early, or a program started twice, gets this)");
    }
    throw Error(who + "cannot open the arena /dev/shm/" + name + " (AXON_ARENA): " + e.what());
  }
  bip::offset_t actual = 0;
  if (!object.get_size(actual) || static_cast<std::size_t>(actual) != bytes) {
    throw Error(who + "the arena /dev/shm/" + name + " has " + std::to_string(actual) +
                " bytes but AXON_ARENA_BYTES=" + std::to_string(bytes));
  }
  auto region = std::make_shared<bip::mapped_region>(object, bip::read_write, 0, bytes);
  auto* base = static_cast<std::byte*>(region->get_address());
  auto& header = const_cast<shm::ArenaHeader&>(shm::check_arena(base, region->get_size(), world_size));

  // Register: first this rank's joined flag (the launcher reads it when a
  // rank exits, to tell a rank that never joined from one that finished),
  // then the count; the last rank to arrive also removes the name itself
  // (the launcher does too), so that from here on nothing can leak it.
  auto* controls = reinterpret_cast<shm::RankControl*>(base + header.rank_controls_offset);
  controls[rank].joined.store(1, std::memory_order_release);
  const std::uint32_t before = header.attached.fetch_add(1, std::memory_order_acq_rel);
  if (before >= static_cast<std::uint32_t>(world_size)) {
    throw Error(who + "more than WORLD_SIZE=" + std::to_string(world_size) +
                " processes attached to the arena " + name + " (a program started twice?)");
  }
  if (before + 1 == static_cast<std::uint32_t>(world_size)) {
    bip::shared_memory_object::remove(name.c_str());
  }

  std::shared_ptr<void> owner = region;  // keeps the mapping while any endpoint lives
  auto impl = Impl::attach_world(std::move(owner), base, rank, shm::default_timeout());
  return std::shared_ptr<ShmBackend>(new ShmBackend("shm", std::move(impl)));
}

}  // namespace axonml::distributed
