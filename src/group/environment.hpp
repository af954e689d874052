// Choosing a backend from the environment the launcher leaves.
#pragma once

#include <memory>

#include "axonml/distributed/backend.hpp"

namespace axonml::distributed {

// AXON_BACKEND=shm|mpi|mock, else the launcher's variables decide (under
// mpirun: MpiBackend, which throws when built without MPI); a process
// started without a launcher gets a world of one.
std::shared_ptr<Backend> backend_from_environment();

}  // namespace axonml::distributed
