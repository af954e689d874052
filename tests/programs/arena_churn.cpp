// A rank program for axon-launch: creates and drops many subgroups and
// shared tensors of mixed sizes, far more than the arena could hold at once,
// and checks that the memory it gets back is really free.
//
//   axon-launch -n 4 --arena-mb 64 arena_churn [ITERATIONS]   (default 10000)
//
// Each iteration makes one subgroup of the world (members chosen from the
// iteration number, the same on every rank; the world's ranks drop their
// groups in one agreed order but at their own pace) and one shared tensor per
// rank of a size only that rank knows (1 float to 256 KiB), holding two of
// each. Every held tensor carries a pattern that is checked just before it is
// dropped, so two live allocations that overlap are caught; every 16th
// subgroup runs an all_reduce on its reused area, and every 25th iteration
// runs a zero-copy all_reduce of world-wide shared tensors that are dropped
// right after it. Exits 1 with a message naming the iteration on the first
// failure, including running out of arena.
//
// Why it never runs out when space comes back, whatever the order of frees:
// when any block is requested, at most 3 group areas (2 MiB each: a rank
// holds 2 and a slower one may not have dropped its third yet), 4 x 3 rank
// tensors (256 KiB) and 4 zero-copy tensors (784 KiB) are in use. Those 19
// blocks cut the free space into at most 20 pieces; the 61 MiB a 64 MiB arena
// leaves on 4 ranks, minus the 12 MiB they hold, is more than 20 pieces each
// smaller than the largest request (2 MiB) could hold (40 MiB), so one
// piece always fits it. Without space coming back the arena is full after
// about 30 iterations.
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "axonml/distributed.hpp"

using namespace axonml::distributed;

namespace {

struct CheckFailed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// splitmix64 of the arguments: the same numbers on every rank.
std::uint64_t mix(std::uint64_t a, std::uint64_t b, std::uint64_t c = 0) {
  std::uint64_t h = a * 0x9E3779B97F4A7C15ULL + b * 0xBF58476D1CE4E5B9ULL + c * 0x94D049BB133111EBULL;
  h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ULL;
  h = (h ^ (h >> 27)) * 0x94D049BB133111EBULL;
  return h ^ (h >> 31);
}

// A tensor this rank holds for a while, with the pattern it was given.
struct Held {
  Tensor tensor;
  std::uint64_t stamp;
};

constexpr std::size_t kStride = 256;  // one checked element per KiB

float pattern(std::uint64_t stamp, std::size_t k) {
  return static_cast<float>(mix(stamp, k) % 4096);
}

std::vector<std::size_t> checked_elements(std::size_t count) {
  std::vector<std::size_t> ks;
  for (std::size_t k = 0; k < count; k += kStride) ks.push_back(k);
  if (count > 0) ks.push_back(count - 1);
  return ks;
}

void stamp(Held& held) {
  for (std::size_t k : checked_elements(held.tensor.numel())) held.tensor[k] = pattern(held.stamp, k);
}

void verify(const Held& held, const char* what, long iteration) {
  for (std::size_t k : checked_elements(held.tensor.numel())) {
    if (held.tensor[k] != pattern(held.stamp, k)) {
      throw CheckFailed(std::string(what) + " of " + std::to_string(held.tensor.numel()) +
                        " floats, iteration " + std::to_string(iteration) + ": element " +
                        std::to_string(k) + " is " + std::to_string(held.tensor[k]) + ", not " +
                        std::to_string(pattern(held.stamp, k)) + " (its memory was handed out twice)");
    }
  }
}

// Small integers, so that sums over 4 ranks are exact.
float input(int rank, std::size_t k, long salt) {
  return static_cast<float>(static_cast<long>((k * 7 + static_cast<std::size_t>(rank) * 13 +
                                               static_cast<std::size_t>(salt) * 5) % 9) - 4);
}

void all_reduce_in_group(const ProcessGroup& group, const std::vector<int>& members, int world_rank,
                         long iteration) {
  const std::size_t count = 1 + mix(static_cast<std::uint64_t>(iteration), 3) % 300;
  Tensor t = Tensor::zeros({count});
  for (std::size_t k = 0; k < count; ++k) t[k] = input(world_rank, k, iteration);
  group.all_reduce_tensor(t);
  for (std::size_t k = 0; k < count; ++k) {
    float expected = 0;
    for (int m : members) expected += input(m, k, iteration);
    if (t[k] != expected) {
      throw CheckFailed("all_reduce in " + group.describe() + ", iteration " + std::to_string(iteration) +
                        ": element " + std::to_string(k) + " is " + std::to_string(t[k]) + ", not " +
                        std::to_string(expected));
    }
  }
}

void zero_copy_all_reduce(const ProcessGroup& world, long iteration) {
  const int n = world.size();
  const std::size_t count = 20000 + mix(static_cast<std::uint64_t>(iteration), 5) % 180000;
  Tensor t = world.alloc_shared({count});
  for (std::size_t k = 0; k < count; ++k) t[k] = input(world.rank(), k, iteration);
  world.all_reduce_tensor(t);
  for (std::size_t k = 0; k < count; ++k) {
    float expected = 0;
    for (int r = 0; r < n; ++r) expected += input(r, k, iteration);
    if (t[k] != expected) {
      throw CheckFailed("zero-copy all_reduce of " + std::to_string(count) + " floats, iteration " +
                        std::to_string(iteration) + ": element " + std::to_string(k) + " is " +
                        std::to_string(t[k]) + ", not " + std::to_string(expected));
    }
  }
}  // t goes back to the arena here, right after the collective

std::size_t tensor_size(int rank, long iteration) {
  const std::uint64_t h = mix(static_cast<std::uint64_t>(iteration), 4, static_cast<std::uint64_t>(rank) + 1);
  const std::uint64_t kind = h % 100;
  const std::uint64_t pick = h >> 8;
  if (kind < 60) return 1 + pick % 1024;               // up to 4 KiB
  if (kind < 90) return 1024 + pick % (15 * 1024);     // up to 64 KiB
  return 16 * 1024 + pick % (48 * 1024 + 1);           // up to 256 KiB
}

}  // namespace

int main(int argc, char** argv) {
  constexpr const char* kUsage = "usage: axon-launch -n N [--arena-mb M] arena_churn [ITERATIONS]   (default 10000)\n";
  long iterations = 10000;
  if (argc > 1) {
    const std::string_view arg = argv[1];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    char* end = nullptr;
    errno = 0;
    iterations = std::strtol(argv[1], &end, 10);
    if (argc > 2 || end == argv[1] || *end != '\0' || errno == ERANGE || iterations < 1 ||
        !(arg[0] >= '0' && arg[0] <= '9')) {
      std::fprintf(stderr, "arena_churn: ITERATIONS must be a whole number of at least 1, got '%s'%s\n%s",
                   argv[1], argc > 2 ? " and more arguments" : "", kUsage);
      return 2;
    }
  }
  int world_rank = -1;
  long iteration = -1;
  try {
    World world = World::init();
    world_rank = world.rank();
    const int n = world.world_size();
    const ProcessGroup& everyone = world.default_group();

    std::vector<ProcessGroup> groups;
    std::vector<Held> tensors;
    long group_checks = 0;
    long zero_copy_checks = 0;
    for (iteration = 0; iteration < iterations; ++iteration) {
      const auto i = static_cast<std::uint64_t>(iteration);
      std::vector<int> members;
      const std::uint64_t mask = 1 + mix(i, 1) % ((std::uint64_t{1} << n) - 1);
      for (int r = 0; r < n; ++r) {
        if (mask >> r & 1) members.push_back(r);
      }
      groups.push_back(world.new_group(members));
      if (iteration % 16 == 0 && groups.back().is_member()) {
        all_reduce_in_group(groups.back(), members, world_rank, iteration);
        ++group_checks;
      }
      if (groups.size() > 2) groups.erase(groups.begin() + static_cast<long>(mix(i, 2) % 2));

      Held held{everyone.alloc_shared({tensor_size(world_rank, iteration)}), mix(i, 6, static_cast<std::uint64_t>(world_rank))};
      stamp(held);
      tensors.push_back(std::move(held));
      if (tensors.size() > 2) {
        const std::size_t drop = mix(i, 7, static_cast<std::uint64_t>(world_rank)) % tensors.size();
        verify(tensors[drop], "a shared tensor", iteration);
        tensors.erase(tensors.begin() + static_cast<long>(drop));
      }

      if (iteration % 25 == 0) {
        zero_copy_all_reduce(everyone, iteration);
        ++zero_copy_checks;
      }
    }
    for (const Held& held : tensors) verify(held, "a shared tensor", iteration);
    world.barrier();
    if (world_rank == 0) {
      std::printf("arena churn: %ld subgroups and %ld shared tensors per rank created and freed; "
                  "%ld subgroup and %ld zero-copy all_reduces correct\n",
                  iterations, iterations, group_checks, zero_copy_checks);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "arena_churn (rank %d) FAILED at iteration %ld: %s\n", world_rank, iteration, e.what());
    return 1;
  }
}
