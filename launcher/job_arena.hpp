// JobArena: the launcher's side of the shared-memory arena.
//
// An anonymous memfd (shm::create_arena_memfd): reserved up front, so that too
// little memory fails here with a message instead of SIGBUS in a rank later,
// then mapped and formatted. The ranks inherit its descriptor (fd()); it has
// no name, so however the launcher and the ranks end, nothing is left behind.
// The launcher also writes here what only it knows: which ranks have ended
// (RankControl::ended), and the abort when one fails.
//
// Thread safety: single-threaded (the launcher's main loop).
#pragma once

#include <cstddef>
#include <string>

#include "shm/arena_file.hpp"
#include "shm/arena_layout.hpp"

namespace axon_launch {

class JobArena {
 public:
  // Throws (see shm::create_arena_memfd) naming the sizes, the available
  // memory and `remedy` (what the user may change) when the arena cannot be made.
  JobArena(int world_size, std::size_t arena_bytes, std::size_t slot_bytes, const std::string& remedy);
  ~JobArena();
  JobArena(const JobArena&) = delete;
  JobArena& operator=(const JobArena&) = delete;

  // The descriptor the ranks inherit (close-on-exec in the launcher itself).
  int fd() const { return arena_.fd; }
  std::size_t bytes() const { return arena_.bytes; }
  axonml::distributed::shm::ArenaHeader& header() const;

  // Ranks that have attached so far.
  unsigned attached() const;
  // Whether `rank` has attached (its RankControl::joined flag).
  bool joined(int rank) const;
  // Publishes that `rank` ended with waitpid status `status` and wakes its
  // peers, so that any that still wait for it fail naming it.
  void mark_ended(int rank, int status);
  // Rings every doorbell the launcher can find: each rank's and the world
  // group's (sleepers in subgroups notice within one sleep slice).
  void wake_sleepers();

 private:
  axonml::distributed::shm::RankControl& control(int rank) const;

  axonml::distributed::shm::MemfdArena arena_;
};

}  // namespace axon_launch
