// Making an arena: the one way this project creates one.
//
// create_arena_memfd() makes an anonymous shared-memory file (memfd_create):
// it has no name anywhere, so nothing can leak it, not even kill -9 of every
// process; the memory goes when the last descriptor and mapping do. The
// launcher's ranks inherit the descriptor (AXON_ARENA_FD). Its pages are
// shmem, limited by the machine's memory rather than by the size of
// /dev/shm, so the check before reserving asks for available memory.
//
// create_arena_file() makes /dev/shm/<name> exclusively with mode 0600, for
// processes that cannot inherit a descriptor (MpiBackend's node arena, whose
// ranks mpirun starts); if any step fails it removes the name again before
// throwing. Its caller removes the name once every rank has mapped it.
//
// Both reserve every page up front (posix_fallocate, after comparing with the
// free space, so that too little memory fails here with the sizes instead of
// SIGBUS in a rank later), map the arena and format it.
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

// An anonymous arena: its descriptor (close-on-exec; the owner closes it)
// and its mapping.
struct MemfdArena {
  int fd = -1;
  void* base = nullptr;
  std::size_t bytes = 0;
};

// `label` names the memfd in /proc/<pid>/fd (e.g. "axon-<pid>-<hex>").
// Throws Error naming the sizes, the available memory and `remedy` when it
// cannot be reserved, InvalidArgument as create_arena_file.
MemfdArena create_arena_memfd(const std::string& label, const ArenaSpec& spec,
                              std::string_view remedy);
// Unmaps and closes (either may already be undone: -1 / nullptr).
void destroy_arena_memfd(MemfdArena& arena);

// Under an address-space limit (ulimit -v), what to say of a mapping it
// refused: "this process's address space is limited to 1.7 GiB (ulimit -v),
// 312.5 MiB of it in use already: raise that limit"; empty without a limit.
std::string address_space_limit_advice();

}  // namespace axonml::distributed::shm
