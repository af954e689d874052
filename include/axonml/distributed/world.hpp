// World: every rank of the job, and the entry point of a program.
//
// World::init() reads the launcher's environment: under axon-launch it
// attaches to the job's shared-memory arena (ShmBackend); under mpirun it is
// an MpiBackend (when the library was built with MPI); run alone it is a
// world of one, so every program also runs without the launcher.
// AXON_BACKEND=shm|mpi|mock chooses explicitly.
//
// Thread safety: as ProcessGroup.
#pragma once

#include <memory>
#include <vector>

#include "axonml/distributed/backend.hpp"
#include "axonml/distributed/process_group.hpp"

namespace axonml::distributed {

class World {
 public:
  explicit World(std::shared_ptr<Backend> backend);
  static World init();
  static World mock();  // a world of one

  const ProcessGroup& default_group() const { return default_group_; }
  Backend& backend() const { return default_group_.backend(); }
  int rank() const { return default_group_.rank(); }
  int world_size() const { return default_group_.size(); }
  bool is_main() const { return rank() == 0; }
  void barrier() const { default_group_.barrier(); }
  // Collective over the world; see ProcessGroup::with_ranks.
  ProcessGroup new_group(std::vector<int> ranks) const;

 private:
  ProcessGroup default_group_;
};

}  // namespace axonml::distributed
