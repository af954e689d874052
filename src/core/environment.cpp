#include "core/environment.hpp"

#include <cstdlib>
#include <string>

#include "axonml/distributed/error.hpp"
#include "axonml/distributed/mock_backend.hpp"
#include "axonml/distributed/shm_backend.hpp"

namespace axonml::distributed {

std::shared_ptr<Backend> backend_from_environment() {
  const char* choice = std::getenv("AXON_BACKEND");
  const std::string backend = choice ? choice : "";
  if (backend == "shm") return ShmBackend::from_environment();
  if (backend == "mock") return MockBackend::single();
  if (!backend.empty()) {
    throw InvalidArgument("AXON_BACKEND=" + backend + " is not one of: shm, mock");
  }
  // Under axon-launch the arena's name is set; run alone, a world of one.
  const char* arena = std::getenv("AXON_ARENA");
  if (arena != nullptr && *arena != '\0') return ShmBackend::from_environment();
  return MockBackend::single();
}

}  // namespace axonml::distributed
