#include "job_arena.hpp"

#include "shm/arena_file.hpp"

#include <unistd.h>

#include <boost/interprocess/shared_memory_object.hpp>
#include <cstdint>

namespace axon_launch {
namespace bip = boost::interprocess;
namespace shm = axonml::distributed::shm;

JobArena::JobArena(int world_size, std::size_t arena_bytes, std::size_t slot_bytes)
    : name_(shm::unique_arena_name("axon")), bytes_(arena_bytes) {
  shm::ArenaSpec spec;
  spec.world_size = world_size;
  spec.arena_bytes = bytes_;
  spec.slot_bytes = slot_bytes;
  spec.launcher_pid = static_cast<std::int32_t>(::getpid());
  region_ = shm::create_arena_file(name_, spec, "choose a smaller --arena-mb");
}

JobArena::~JobArena() { remove_name(); }

shm::ArenaHeader& JobArena::header() const {
  return *static_cast<shm::ArenaHeader*>(region_->get_address());
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
