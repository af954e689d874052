#include "core/environment.hpp"

#include <cstdlib>
#include <string>

#include "axonml/distributed/error.hpp"
#include "axonml/distributed/mock_backend.hpp"

namespace axonml::distributed {

std::shared_ptr<Backend> backend_from_environment() {
  const char* choice = std::getenv("AXON_BACKEND");
  const std::string backend = choice ? choice : "";
  if (backend.empty() || backend == "mock") return MockBackend::single();
  throw InvalidArgument("AXON_BACKEND=" + backend + " is not one of: mock");
}

}  // namespace axonml::distributed
