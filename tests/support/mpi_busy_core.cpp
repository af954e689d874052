// mpi_busy_core: run under mpirun -np 2 with AXON_HIERARCHICAL=0 (flat MPI
// waits) and AXON_OVERSUBSCRIBED=0 or 1, or without it (then mpirun's own
// OMPI_MCA_mpi_oversubscribe says which to expect). Rank 0 pins its thread to one CPU
// beside a busy thread pinned there too (another program, a DataLoader
// worker); rank 1 comes 2 ms late to each of 40 all_reduces, so each of rank
// 0's waits outlasts its test and reaches the yield phase. Prints how many
// sched_yield calls rank 0's waits made and checks every result.
//
// With a core per rank, yields that hand the busy thread the rest of its
// slice (milliseconds, each round: flat MPI all_reduce at n=2 beside two busy
// processes took 4 ms at 4 B) stop after two: expect fewer than half the
// rounds. Oversubscribed, a long yield is a peer rank's turn: every round
// yields at least once.
//
// `mpi_busy_core FLOATS` all-reduces FLOATS floats (default 1); above 4 KiB
// a hierarchical world (the default) takes them through the node's arena,
// whose waits are the shared-memory ones.
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "axonml/distributed.hpp"
#include "shm/wait.hpp"

using namespace axonml::distributed;

namespace {

void pin_to(int cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  if (sched_setaffinity(0, sizeof(one), &one) != 0) {
    std::perror("sched_setaffinity");
    std::exit(2);
  }
}

}  // namespace

int main(int argc, char** argv) {
  constexpr int kRounds = 40;
  const std::size_t floats = argc > 1 ? std::stoul(argv[1]) : 1;
  World world = World::init();
  // AXON_OVERSUBSCRIBED where the test sets it, else what mpirun decided.
  const char* told = std::getenv("AXON_OVERSUBSCRIBED");
  if (!told) told = std::getenv("OMPI_MCA_mpi_oversubscribe");
  if (world.world_size() != 2 || !told) {
    std::fprintf(stderr, "mpi_busy_core: run under mpirun -np 2 (with -x AXON_OVERSUBSCRIBED=0 or 1, or not)\n");
    return 2;
  }
  const bool oversubscribed = std::string(told) == "1";
  int wrong = 0;
  if (world.rank() == 0) {
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    sched_getaffinity(0, sizeof(allowed), &allowed);
    int cpu = 0;
    while (!CPU_ISSET(cpu, &allowed)) ++cpu;
    pin_to(cpu);
    std::atomic<bool> stop{false};
    std::thread busy([&] {
      pin_to(cpu);
      while (!stop.load(std::memory_order_relaxed)) shm::detail::pause_cpu();
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the busy thread runs
    const std::uint64_t before = shm::detail::yield_calls();   // this thread's own
    for (int i = 0; i < kRounds; ++i) {
      std::vector<float> v(floats, 1.0f);
      world.backend().all_reduce(std::span<float>(v), ReduceOp::Sum);
      wrong += static_cast<int>(std::count_if(v.begin(), v.end(), [](float x) { return x != 3.0f; }));
    }
    const std::uint64_t yields = shm::detail::yield_calls() - before;
    stop = true;
    busy.join();
    const bool ok = wrong == 0 && (oversubscribed ? yields >= kRounds / 2 : yields < kRounds / 2);
    std::printf("rank 0: %llu sched_yield calls in %d waits beside a busy thread (%s: expected %s %d), %d wrong: %s\n",
                static_cast<unsigned long long>(yields), kRounds,
                oversubscribed ? "oversubscribed" : "a core per rank", oversubscribed ? "at least" : "fewer than",
                kRounds / 2, wrong, ok ? "ok" : "FAILED");
    std::fflush(stdout);
    world.backend().barrier();
    return ok ? 0 : 1;
  }
  for (int i = 0; i < kRounds; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::vector<float> v(floats, 2.0f);
    world.backend().all_reduce(std::span<float>(v), ReduceOp::Sum);
    wrong += static_cast<int>(std::count_if(v.begin(), v.end(), [](float x) { return x != 3.0f; }));
  }
  world.backend().barrier();
  return wrong == 0 ? 0 : 1;
}
