#include "axonml/distributed/mock_backend.hpp"

#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "axonml/distributed/error.hpp"
#include "backends/arena_backend_impl.hpp"
#include "shm/arena_layout.hpp"
#include "shm/wait.hpp"

namespace axonml::distributed {

std::vector<std::shared_ptr<MockBackend>> MockBackend::create_world(int world_size,
                                                                    MockOptions options) {
  if (world_size < 1 || world_size > shm::kMaxWorldSize) {
    throw InvalidArgument("MockBackend::create_world: world size " + std::to_string(world_size) +
                          " is outside 1.." + std::to_string(shm::kMaxWorldSize));
  }
  shm::check_size_limit(options.slot_bytes, shm::kMaxSlotBytes, "MockBackend::create_world: MockOptions::slot_bytes");
  shm::check_size_limit(options.arena_bytes, shm::kMaxArenaBytes, "MockBackend::create_world: MockOptions::arena_bytes");
  shm::ArenaSpec spec;
  spec.world_size = world_size;
  spec.slot_bytes = options.slot_bytes;
  spec.flat_barrier = options.flat_barrier;
  spec.arena_bytes = options.arena_bytes ? options.arena_bytes : shm::default_arena_bytes(world_size, options.slot_bytes);
  // Zeroed like a fresh /dev/shm file, so group areas start clean.
  void* raw = std::aligned_alloc(4096, (spec.arena_bytes + 4095) / 4096 * 4096);
  if (raw == nullptr) throw std::bad_alloc();
  std::shared_ptr<void> memory(raw, std::free);
  std::memset(raw, 0, spec.arena_bytes);
  shm::format_arena(raw, spec);

  std::vector<std::shared_ptr<MockBackend>> world;
  world.reserve(static_cast<std::size_t>(world_size));
  for (int r = 0; r < world_size; ++r) {
    auto impl = Impl::attach_world(memory, static_cast<std::byte*>(raw), r, shm::default_timeout());
    world.push_back(std::shared_ptr<MockBackend>(new MockBackend("mock", std::move(impl))));
  }
  return world;
}

std::shared_ptr<MockBackend> MockBackend::single() { return create_world(1).front(); }

}  // namespace axonml::distributed
