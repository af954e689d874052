// Choosing a backend from the environment the launcher leaves.
#pragma once

#include <memory>

#include "axonml/distributed/backend.hpp"

namespace axonml::distributed {

// AXON_BACKEND=shm|mock, else the launcher's variables decide; a process
// started without a launcher gets a world of one.
std::shared_ptr<Backend> backend_from_environment();

}  // namespace axonml::distributed
