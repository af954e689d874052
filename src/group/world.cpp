#include "axonml/distributed/world.hpp"

#include "axonml/distributed/error.hpp"
#include "axonml/distributed/mock_backend.hpp"
#include "group/environment.hpp"

namespace axonml::distributed {

namespace {
std::shared_ptr<Backend> not_null(std::shared_ptr<Backend> backend) {
  if (!backend) throw InvalidArgument("World: null backend");
  return backend;
}
}  // namespace

World::World(std::shared_ptr<Backend> backend) : default_group_(not_null(std::move(backend))) {}

World World::init() { return World(backend_from_environment()); }

World World::mock() { return World(MockBackend::single()); }

ProcessGroup World::new_group(std::vector<int> ranks) const {
  return ProcessGroup::with_ranks(default_group_.backend_ptr(), std::move(ranks));
}

}  // namespace axonml::distributed
