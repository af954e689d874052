// ShmBackend: a world whose ranks are the processes axon-launch started.
//
// The launcher creates the job's arena in /dev/shm and passes its name to
// every rank (AXON_ARENA, AXON_ARENA_BYTES) with the rank's place (RANK,
// WORLD_SIZE). from_environment() maps that arena, checks its header against
// these variables and registers this rank as attached; once every rank has,
// the name is removed from /dev/shm and the memory lives on only in the
// ranks' mappings, so no crash can leak it. The collectives are
// ArenaBackend's, the same code MockBackend runs over threads.
//
// Thread safety: one thread at a time per object; see Backend.
#pragma once

#include <memory>

#include "axonml/distributed/arena_backend.hpp"

namespace axonml::distributed {

class ShmBackend final : public ArenaBackend {
 public:
  // This process's endpoint of the launcher's world. Throws InvalidArgument
  // naming the variable when the environment is missing or malformed, and
  // Error when the arena cannot be opened or does not match it.
  static std::shared_ptr<ShmBackend> from_environment();

 private:
  using ArenaBackend::ArenaBackend;
};

}  // namespace axonml::distributed
