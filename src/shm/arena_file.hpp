// An arena in /dev/shm: the one way this project makes one.
//
// create_arena_file() creates /dev/shm/<name> exclusively with mode 0600,
// reserves every page up front (posix_fallocate, after asking statvfs for the
// free space, so a full /dev/shm fails here with the sizes instead of SIGBUS
// in a rank later), maps it and formats it; if any step fails it removes the
// name again before throwing. The caller removes the name once every rank
// has mapped it; the memory lives on in the mappings.
//
// Used by axon-launch (the job's arena) and by MpiBackend (a node's arena).
#pragma once

#include <boost/interprocess/mapped_region.hpp>
#include <memory>
#include <string>
#include <string_view>

#include "shm/arena_layout.hpp"

namespace axonml::distributed::shm {

// "<prefix>-<pid>-<16 random hex digits>"
std::string unique_arena_name(std::string_view prefix);

// Throws Error naming the sizes, the free space of /dev/shm and `remedy`
// when the arena cannot be created or reserved, and InvalidArgument (from
// format_arena) when spec.arena_bytes is too small for spec.world_size.
std::shared_ptr<boost::interprocess::mapped_region> create_arena_file(const std::string& name,
                                                                      const ArenaSpec& spec,
                                                                      std::string_view remedy);

}  // namespace axonml::distributed::shm
