// MockBackend: a world whose ranks are threads of this process.
//
// create_world(n) returns one backend per rank; run each on its own thread.
// Its collectives are the real ones (the same algorithms ShmBackend runs over
// the launcher's shared-memory arena, here over a heap arena): they block until every rank arrives and
// give every rank the right result, so a test of the mock is a test of the
// algorithms the processes use.
//
// Thread safety: each endpoint is used by one thread at a time (its rank's
// thread); different endpoints, and different groups of one rank, may be used
// concurrently.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <vector>

#include "axonml/distributed/arena_backend.hpp"

namespace axonml::distributed {

struct MockOptions {
  std::size_t arena_bytes = 0;  // 0: sized for the world and a few subgroups
  std::size_t slot_bytes = 0;   // 0: the default; tests shrink it to reach the chunked paths
  // The barrier algorithm: flat (true) or dissemination (false); unset: flat
  // when the world has more ranks than this process has cores, as for processes.
  std::optional<bool> flat_barrier = std::nullopt;
};

class MockBackend final : public ArenaBackend {
 public:
  // n endpoints of one new world; endpoint i has rank i.
  static std::vector<std::shared_ptr<MockBackend>> create_world(int world_size,
                                                                MockOptions options = {});
  // A world of one.
  static std::shared_ptr<MockBackend> single();

 private:
  using ArenaBackend::ArenaBackend;
};

}  // namespace axonml::distributed
