// ShmBackend::from_environment and World::init's choice of backend, in one
// process: the environment a launcher leaves, its mistakes, and the arena's
// /dev/shm name going away once every rank has attached.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <cstdlib>
#include <string>
#include <vector>

#include "axonml/distributed.hpp"
#include "shm/arena_layout.hpp"

using namespace axonml::distributed;
namespace bip = boost::interprocess;

namespace {

// Sets variables for one test and restores the previous values after it.
class ScopedEnvironment {
 public:
  void set(const std::string& name, const std::string& value) {
    remember(name);
    ::setenv(name.c_str(), value.c_str(), 1);
  }
  void unset(const std::string& name) {
    remember(name);
    ::unsetenv(name.c_str());
  }
  ~ScopedEnvironment() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->had) ::setenv(it->name.c_str(), it->value.c_str(), 1);
      else ::unsetenv(it->name.c_str());
    }
  }

 private:
  struct Saved {
    std::string name;
    bool had;
    std::string value;
  };
  void remember(const std::string& name) {
    const char* old = std::getenv(name.c_str());
    saved_.push_back({name, old != nullptr, old ? old : ""});
  }
  std::vector<Saved> saved_;
};

// What the launcher does for a world of one, without the launcher.
struct TestArena {
  std::string name = "axon-test-" + std::to_string(::getpid());
  std::size_t bytes = shm::default_arena_bytes(1);
  TestArena() {
    bip::shared_memory_object::remove(name.c_str());
    bip::shared_memory_object object(bip::create_only, name.c_str(), bip::read_write);
    object.truncate(static_cast<bip::offset_t>(bytes));
    bip::mapped_region region(object, bip::read_write);
    shm::ArenaSpec spec;
    spec.world_size = 1;
    spec.arena_bytes = bytes;
    shm::format_arena(region.get_address(), spec);
  }
  ~TestArena() { bip::shared_memory_object::remove(name.c_str()); }
  bool name_exists() const {
    try {
      bip::shared_memory_object object(bip::open_only, name.c_str(), bip::read_only);
      return true;
    } catch (const bip::interprocess_exception&) {
      return false;
    }
  }
};

void set_launcher_variables(ScopedEnvironment& env, const TestArena& arena) {
  env.set("RANK", "0");
  env.set("WORLD_SIZE", "1");
  env.set("AXON_ARENA", arena.name);
  env.set("AXON_ARENA_BYTES", std::to_string(arena.bytes));
  env.unset("AXON_BACKEND");
}

}  // namespace

TEST_CASE("a rank attaches to the launcher's arena and the name goes once all attached",
          "[shm][environment]") {
  TestArena arena;
  ScopedEnvironment env;
  set_launcher_variables(env, arena);
  World world = World::init();
  CHECK(world.backend().name() == "shm");
  CHECK(world.rank() == 0);
  CHECK(world.world_size() == 1);
  CHECK_FALSE(arena.name_exists());  // the last rank to attach unlinked it
  std::vector<float> data = {1.5f, -2.0f};
  world.backend().all_reduce(data, ReduceOp::Sum);
  CHECK(data == std::vector<float>{1.5f, -2.0f});
}

TEST_CASE("a malformed launcher variable is named in the error", "[shm][environment]") {
  TestArena arena;
  ScopedEnvironment env;
  set_launcher_variables(env, arena);
  const auto [variable, value] = GENERATE(std::pair<std::string, std::string>{"RANK", "x"},
                                          std::pair<std::string, std::string>{"RANK", "1"},
                                          std::pair<std::string, std::string>{"WORLD_SIZE", "0"},
                                          std::pair<std::string, std::string>{"WORLD_SIZE", "5000"},
                                          std::pair<std::string, std::string>{"AXON_ARENA_BYTES", "12kb"});
  CAPTURE(variable, value);
  env.set(variable, value);
  REQUIRE_THROWS_AS(ShmBackend::from_environment(), InvalidArgument);
  REQUIRE_THROWS_WITH(ShmBackend::from_environment(), Catch::Contains(variable + "=" + value));
}

TEST_CASE("a missing launcher variable says to use axon-launch", "[shm][environment]") {
  ScopedEnvironment env;
  env.set("RANK", "0");
  env.set("WORLD_SIZE", "2");
  env.unset("AXON_ARENA");
  REQUIRE_THROWS_WITH(ShmBackend::from_environment(),
                      Catch::Contains("AXON_ARENA is not set") && Catch::Contains("axon-launch"));
  env.set("AXON_BACKEND", "shm");
  REQUIRE_THROWS_AS(World::init(), InvalidArgument);
}

TEST_CASE("an arena that is gone is reported as removed by the launcher", "[shm][environment]") {
  ScopedEnvironment env;
  env.set("RANK", "0");
  env.set("WORLD_SIZE", "2");
  env.set("AXON_ARENA", "axon-test-gone-" + std::to_string(::getpid()));
  env.set("AXON_ARENA_BYTES", "4194304");
  REQUIRE_THROWS_WITH(ShmBackend::from_environment(),
                      Catch::Contains("rank 0") && Catch::Contains("did every rank start?"));
}

TEST_CASE("an arena made for another world size or size is refused", "[shm][environment]") {
  TestArena arena;
  ScopedEnvironment env;
  set_launcher_variables(env, arena);
  SECTION("world size") {
    env.set("WORLD_SIZE", "2");
    REQUIRE_THROWS_WITH(ShmBackend::from_environment(), Catch::Contains("WORLD_SIZE is 2"));
  }
  SECTION("bytes") {
    env.set("AXON_ARENA_BYTES", std::to_string(arena.bytes + 4096));
    REQUIRE_THROWS_WITH(ShmBackend::from_environment(), Catch::Contains("AXON_ARENA_BYTES"));
  }
}

TEST_CASE("World::init without a launcher is a world of one", "[environment]") {
  ScopedEnvironment env;
  env.unset("AXON_ARENA");
  env.unset("AXON_BACKEND");
  World alone = World::init();
  CHECK(alone.world_size() == 1);
  CHECK(alone.backend().name() == "mock");
  env.set("AXON_BACKEND", "mock");
  CHECK(World::init().world_size() == 1);
  env.set("AXON_BACKEND", "nccl");
  REQUIRE_THROWS_WITH(World::init(), Catch::Contains("AXON_BACKEND=nccl") && Catch::Contains("shm, mpi, mock"));
}
