// A rank program for axon-launch: what a training script that makes a
// subgroup and shared tensors each epoch asks of the arena, with no barrier
// between epochs, in the default arena.
//
//   axon-launch -n N arena_epochs [EPOCHS]   (default 1000)
//
// Each epoch: a subgroup of shuffled members (2..N of them, the same list on
// every rank), a 1000-float shared tensor on it, all-reduced by its members,
// and a 70000-float shared tensor on the world, all-reduced; then all three
// are dropped. Ranks free one epoch's blocks while their peers already take
// the next epoch's, so the free space sees the two interleaved. Every result
// is checked. Exits 1 naming the epoch and the arena's state on the first
// failure, including a refused request.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "axonml/distributed.hpp"

using namespace axonml::distributed;

namespace {

// Every element of `t` after a sum over `members` of rank + 1.
bool summed(const Tensor& t, const std::vector<int>& members) {
  float expected = 0;
  for (int m : members) expected += static_cast<float>(m + 1);
  for (std::size_t k = 0; k < t.numel(); ++k) {
    if (t[k] != expected) return false;
  }
  return true;
}

void fill(Tensor& t, int rank) {
  for (std::size_t k = 0; k < t.numel(); ++k) t[k] = static_cast<float>(rank + 1);
}

}  // namespace

int main(int argc, char** argv) {
  long epochs = 1000;
  if (argc > 1) {
    char* end = nullptr;
    errno = 0;
    epochs = std::strtol(argv[1], &end, 10);
    if (argc > 2 || end == argv[1] || *end != '\0' || errno == ERANGE || epochs < 1) {
      std::fprintf(stderr, "arena_epochs: EPOCHS must be a whole number of at least 1, got '%s'\n"
                           "usage: axon-launch -n N arena_epochs [EPOCHS]   (default 1000)\n", argv[1]);
      return 2;
    }
  }
  int rank = -1;
  long epoch = -1;
  try {
    World world = World::init();
    rank = world.rank();
    const int n = world.world_size();
    const ProcessGroup& everyone = world.default_group();
    std::vector<int> all(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) all[static_cast<std::size_t>(r)] = r;
    std::mt19937 rng(3);  // the same lists on every rank
    for (epoch = 0; epoch < epochs; ++epoch) {
      std::vector<int> members = all;
      std::shuffle(members.begin(), members.end(), rng);
      members.resize(static_cast<std::size_t>(std::min(n, 2 + static_cast<int>(rng() % static_cast<unsigned>(std::max(1, n - 1))))));
      ProcessGroup group = world.new_group(members);
      if (group.is_member()) {
        Tensor t = group.alloc_shared({1000});
        fill(t, rank);
        group.all_reduce_tensor(t);
        if (!summed(t, members)) throw Error("the subgroup's all_reduce gave a wrong sum");
      }
      Tensor w = everyone.alloc_shared({70000});
      fill(w, rank);
      everyone.all_reduce_tensor(w);
      if (!summed(w, all)) throw Error("the world's all_reduce gave a wrong sum");
    }
    world.barrier();
    if (rank == 0) std::printf("arena_epochs: %ld epochs; %s\n", epochs, everyone.backend().describe_shared_memory().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "arena_epochs: rank %d, epoch %ld: %s\n", rank, epoch, e.what());
    return 1;
  }
  return 0;
}
