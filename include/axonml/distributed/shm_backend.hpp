// ShmBackend: a world whose ranks are the processes axon-launch started.
//
// The launcher creates the job's arena as an anonymous memfd and every rank
// inherits its descriptor (AXON_ARENA_FD, AXON_ARENA_BYTES) with the rank's
// place (RANK, WORLD_SIZE). from_environment() maps that arena, checks its
// header against these variables and registers this rank as attached. The
// arena has no name, so no crash can leak it. The collectives are
// ArenaBackend's, the same code MockBackend runs over threads.
//
// A process is one rank: it attaches once. A second from_environment() (or
// World::init()) for the same arena in the same process throws
// InvalidArgument on the caller; keep the first World (copies are cheap and
// share the endpoint).
//
// Thread safety: one thread at a time per object; see Backend.
#pragma once

#include <memory>

#include "axonml/distributed/arena_backend.hpp"

namespace axonml::distributed {

class ShmBackend final : public ArenaBackend {
 public:
  // This process's endpoint of the launcher's world. Throws InvalidArgument
  // naming the variable when the environment is missing or malformed or
  // this process already attached to the arena, and Error when the arena
  // cannot be mapped or does not match it.
  static std::shared_ptr<ShmBackend> from_environment();

 private:
  using ArenaBackend::ArenaBackend;
};

}  // namespace axonml::distributed
