// JobArena: the launcher's side of the shared-memory arena.
//
// Creates the /dev/shm object (exclusive, mode 0600, a name unique to this
// job), reserves all of its pages up front so that a full /dev/shm fails here
// with a message instead of SIGBUS in a rank later, maps and formats it.
// remove_name() unlinks the name: the launcher calls it once every rank has
// attached (or one died first) and on every way out, so that nothing is left
// in /dev/shm; the memory itself lives on in the mappings until the last
// process unmaps it.
//
// Thread safety: single-threaded (the launcher's main loop).
#pragma once

#include <boost/interprocess/mapped_region.hpp>
#include <cstddef>
#include <memory>
#include <string>

#include "shm/arena_layout.hpp"

namespace axon_launch {

class JobArena {
 public:
  // Throws (see shm::create_arena_file) naming the sizes, the free space of
  // /dev/shm and --arena-mb when the arena cannot be made.
  JobArena(int world_size, std::size_t arena_bytes, std::size_t slot_bytes);
  ~JobArena();
  JobArena(const JobArena&) = delete;
  JobArena& operator=(const JobArena&) = delete;

  const std::string& name() const { return name_; }
  std::size_t bytes() const { return bytes_; }
  axonml::distributed::shm::ArenaHeader& header() const;

  // Ranks that have attached so far.
  unsigned attached() const;
  // Whether `rank` has attached (its RankControl::joined flag).
  bool joined(int rank) const;
  // Unlinks the /dev/shm name (idempotent).
  void remove_name();
  bool name_removed() const { return removed_; }

 private:
  std::string name_;
  std::size_t bytes_;
  std::shared_ptr<boost::interprocess::mapped_region> region_;
  bool removed_ = false;
};

}  // namespace axon_launch
