#include "job_arena.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "shm/arena_view.hpp"
#include "shm/wait.hpp"

namespace axon_launch {
namespace shm = axonml::distributed::shm;

JobArena::JobArena(int world_size, std::size_t arena_bytes, std::size_t slot_bytes, const std::string& remedy) {
  shm::ArenaSpec spec;
  spec.world_size = world_size;
  spec.arena_bytes = arena_bytes;
  spec.slot_bytes = slot_bytes;
  spec.launcher_pid = static_cast<std::int32_t>(::getpid());
  spec.launcher_pid_namespace = shm::pid_namespace_id();
  arena_ = shm::create_arena_memfd(shm::unique_arena_name("axon"), spec, remedy);
  // A launcher started with stdin/stdout/stderr closed gets a low number,
  // which each child's redirections would overwrite: move it above them.
  if (arena_.fd <= STDERR_FILENO) {
    const int moved = ::fcntl(arena_.fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
    ::close(arena_.fd);
    arena_.fd = moved;
    if (moved < 0) {
      shm::destroy_arena_memfd(arena_);
      throw std::runtime_error(std::string("cannot move the arena's descriptor: ") + std::strerror(errno));
    }
  }
}

JobArena::~JobArena() { shm::destroy_arena_memfd(arena_); }

shm::ArenaHeader& JobArena::header() const { return *static_cast<shm::ArenaHeader*>(arena_.base); }

shm::RankControl& JobArena::control(int rank) const {
  return shm::ArenaView(header()).rank_control(rank);
}

unsigned JobArena::attached() const {
  return header().attached.load(std::memory_order_acquire);
}

bool JobArena::joined(int rank) const {
  return control(rank).joined.load(std::memory_order_acquire) != 0;
}

void JobArena::mark_ended(int rank, int status) {
  auto& c = control(rank);
  c.end_status = status;
  c.ended.store(1, std::memory_order_release);
  wake_sleepers();
}

void JobArena::wake_sleepers() {
  auto& h = header();
  for (std::uint32_t r = 0; r < h.world_size; ++r) shm::ring(control(static_cast<int>(r)).doorbell);
  shm::ring(shm::ArenaView(h).world_group().bell);
}

}  // namespace axon_launch
