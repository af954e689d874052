// A rank's own arena pages move to the NUMA node it is bound to (the
// launcher reserved them all on its own node). On a one-node machine the
// node is 0 and nothing moves, but the same system calls run.
#include <catch2/catch.hpp>

#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "shm/numa_place.hpp"

using namespace axonml::distributed;

namespace {

int current_node() {
  unsigned cpu = 0, node = 0;
  REQUIRE(getcpu(&cpu, &node) == 0);
  return static_cast<int>(node);
}

}  // namespace

TEST_CASE("whole pages of a shared range move to the given node and keep their contents", "[shm][numa]") {
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  const std::size_t pages = 16;
  void* raw = mmap(nullptr, pages * page, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(raw != MAP_FAILED);
  auto* bytes = static_cast<unsigned char*>(raw);
  std::memset(bytes, 0x5a, pages * page);
  const int node = current_node();

  const std::size_t moved = shm::move_to_numa_node(bytes, pages * page, node);
  if (moved == 0) {
    munmap(raw, pages * page);
    SUCCEED("this kernel has no NUMA support (mbind failed): nothing to place");
    return;
  }
  CHECK(moved == pages);
  // A range that starts and ends inside pages covers only the whole ones.
  CHECK(shm::move_to_numa_node(bytes + 100, 3 * page, node) == 2);
  CHECK(shm::move_to_numa_node(bytes + 100, page, node) == 0);
  for (std::size_t i = 0; i < pages * page; ++i) {
    if (bytes[i] != 0x5a) FAIL("byte " << i << " changed to " << int(bytes[i]));
  }
  munmap(raw, pages * page);
}

TEST_CASE("a node outside 0..1023 places nothing", "[shm][numa]") {
  alignas(4096) static unsigned char buffer[2 * 4096];
  CHECK(shm::move_to_numa_node(buffer, sizeof(buffer), -1) == 0);
  CHECK(shm::move_to_numa_node(buffer, sizeof(buffer), 5000) == 0);
}
