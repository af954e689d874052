// ShmBackend::from_environment and World::init's choice of backend, in one
// process: the environment a launcher leaves (an inherited memfd), its
// mistakes, and a second attach by the same process.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "axonml/distributed.hpp"
#include "shm/arena_file.hpp"
#include "shm/arena_layout.hpp"

using namespace axonml::distributed;

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

// What the launcher does for a world of one (or `world_size`), without the
// launcher: an anonymous arena whose descriptor this process holds.
struct TestArena {
  shm::MemfdArena arena;
  explicit TestArena(int world_size = 1) {
    shm::ArenaSpec spec;
    spec.world_size = world_size;
    arena = shm::create_arena_memfd("axon-test", spec, "(test)");
  }
  ~TestArena() { shm::destroy_arena_memfd(arena); }
  int fd() const { return arena.fd; }
  std::size_t bytes() const { return arena.bytes; }
  unsigned attached() const {
    return static_cast<const shm::ArenaHeader*>(arena.base)->attached.load();
  }
};

void set_launcher_variables(ScopedEnvironment& env, const TestArena& arena) {
  env.set("RANK", "0");
  env.set("WORLD_SIZE", "1");
  env.set("AXON_ARENA_FD", std::to_string(arena.fd()));
  env.set("AXON_ARENA_BYTES", std::to_string(arena.bytes()));
  env.unset("AXON_BACKEND");
}

}  // namespace

TEST_CASE("a rank attaches to the launcher's inherited arena", "[shm][environment]") {
  TestArena arena;
  ScopedEnvironment env;
  set_launcher_variables(env, arena);
  World world = World::init();
  CHECK(world.backend().name() == "shm");
  CHECK(world.rank() == 0);
  CHECK(world.world_size() == 1);
  CHECK(arena.attached() == 1);
  // Programs the rank starts do not inherit the arena.
  CHECK((::fcntl(arena.fd(), F_GETFD) & FD_CLOEXEC) != 0);
  std::vector<float> data = {1.5f, -2.0f};
  world.backend().all_reduce(data, ReduceOp::Sum);
  CHECK(data == std::vector<float>{1.5f, -2.0f});
}

TEST_CASE("World::init twice in one process is an error on the caller", "[shm][environment]") {
  TestArena arena(2);
  ScopedEnvironment env;
  set_launcher_variables(env, arena);
  env.set("WORLD_SIZE", "2");
  World world = World::init();
  REQUIRE_THROWS_AS(World::init(), InvalidArgument);
  REQUIRE_THROWS_WITH(World::init(), Catch::Contains("rank 0") &&
                                         Catch::Contains("World::init() (ShmBackend::from_environment) "
                                                         "was already called in this process") &&
                                         Catch::Contains("keep the World"));
  // The refused calls did not count as ranks: the peer can still attach.
  CHECK(arena.attached() == 1);
  CHECK(world.rank() == 0);
}

TEST_CASE("a malformed launcher variable is named in the error", "[shm][environment]") {
  TestArena arena;
  ScopedEnvironment env;
  set_launcher_variables(env, arena);
  const auto [variable, value] = GENERATE(std::pair<std::string, std::string>{"RANK", "x"},
                                          std::pair<std::string, std::string>{"RANK", "1"},
                                          std::pair<std::string, std::string>{"WORLD_SIZE", "0"},
                                          std::pair<std::string, std::string>{"WORLD_SIZE", "5000"},
                                          std::pair<std::string, std::string>{"AXON_ARENA_BYTES", "12kb"},
                                          std::pair<std::string, std::string>{"AXON_ARENA_FD", "-1"},
                                          std::pair<std::string, std::string>{"AXON_ARENA_FD", "3x"});
  CAPTURE(variable, value);
  env.set(variable, value);
  REQUIRE_THROWS_AS(ShmBackend::from_environment(), InvalidArgument);
  REQUIRE_THROWS_WITH(ShmBackend::from_environment(), Catch::Contains(variable + "=" + value));
}

TEST_CASE("a missing launcher variable says to use axon-launch", "[shm][environment]") {
  ScopedEnvironment env;
  env.set("RANK", "0");
  env.set("WORLD_SIZE", "2");
  env.unset("AXON_ARENA_FD");
  REQUIRE_THROWS_WITH(ShmBackend::from_environment(),
                      Catch::Contains("AXON_ARENA_FD is not set") && Catch::Contains("axon-launch"));
  env.set("AXON_BACKEND", "shm");
  REQUIRE_THROWS_AS(World::init(), InvalidArgument);
}

TEST_CASE("an arena descriptor that is not open is named with a hint", "[shm][environment]") {
  ScopedEnvironment env;
  env.set("RANK", "0");
  env.set("WORLD_SIZE", "2");
  env.set("AXON_ARENA_FD", "1000000");
  env.set("AXON_ARENA_BYTES", "4194304");
  REQUIRE_THROWS_WITH(ShmBackend::from_environment(),
                      Catch::Contains("rank 0") && Catch::Contains("AXON_ARENA_FD=1000000") &&
                          Catch::Contains("not an open descriptor") && Catch::Contains("axon-launch") &&
                          Catch::Contains("or execs after its World::init()"));
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
    env.set("AXON_ARENA_BYTES", std::to_string(arena.bytes() + 4096));
    REQUIRE_THROWS_WITH(ShmBackend::from_environment(), Catch::Contains("AXON_ARENA_BYTES"));
  }
}

TEST_CASE("World::init without a launcher is a world of one", "[environment]") {
  ScopedEnvironment env;
  env.unset("AXON_ARENA_FD");
  env.unset("AXON_BACKEND");
  World alone = World::init();
  CHECK(alone.world_size() == 1);
  CHECK(alone.backend().name() == "mock");
  env.set("AXON_BACKEND", "mock");
  CHECK(World::init().world_size() == 1);
  env.set("AXON_BACKEND", "nccl");
  REQUIRE_THROWS_WITH(World::init(), Catch::Contains("AXON_BACKEND=nccl") && Catch::Contains("shm, mpi, mock"));
}

// memfd_create makes its file 0777; an arena says owner-only itself, as the
// README promises (found by a review).
TEST_CASE("a memfd arena is readable and writable by its owner only", "[shm]") {
  shm::ArenaSpec spec;
  spec.world_size = 2;
  shm::MemfdArena arena = shm::create_arena_memfd("axon-test", spec, "(test)");
  struct stat info {};
  const int stated = ::fstat(arena.fd, &info);
  shm::destroy_arena_memfd(arena);
  REQUIRE(stated == 0);
  CHECK((info.st_mode & 07777) == 0600);
}

// Shared memory counts against the file size limit: sizing an arena past it
// raised SIGXFSZ, which killed axon-launch without a word and, under mpirun,
// left the node arena's name in /dev/shm (a review). Asked first, both kinds
// of arena are an error naming the limit, and the named one is removed.
TEST_CASE("an arena above the file size limit (ulimit -f) is an error naming it, never SIGXFSZ", "[shm][errors]") {
  rlimit saved{};
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved) == 0);
  rlimit small = saved;
  small.rlim_cur = 1 << 20;
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
  shm::ArenaSpec spec;
  spec.world_size = 2;
  spec.arena_bytes = std::size_t{4} << 20;
  std::string memfd_error, file_error;
  try {
    shm::MemfdArena arena = shm::create_arena_memfd("axon-test", spec, "(the remedy)");
    shm::destroy_arena_memfd(arena);
  } catch (const Error& e) {
    memfd_error = e.what();
  }
  const std::string name = shm::unique_arena_name("axon-test");
  try {
    (void)shm::create_arena_file(name, spec, "(the remedy)");
  } catch (const Error& e) {
    file_error = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &saved);
  for (const std::string& error : {memfd_error, file_error}) {
    CHECK(error == "cannot reserve 4 MiB of shared memory for the arena: this process's file size limit is 1 MiB "
                   "(ulimit -f), and shared memory counts as a file: raise that limit (ulimit -f unlimited), or "
                   "(the remedy)");
  }
  CHECK(::access(("/dev/shm/" + name).c_str(), F_OK) != 0);  // removed
}
