// A World with static storage duration, and a detached thread that loops
// all_reduces on its backend; main returns after 300 ms. The World is
// destroyed at exit, after main: under MPI the thread ran on in its call as
// the destructor freed the backend (SIGSEGV in MPI_Testsome, 8 runs of 8; a
// review). Now the exit refuses the thread's calls (InvalidArgument, "this
// process is exiting") before static destructors run, and waits for the
// thread to stop calling. The test passes when a thread says it was refused
// or its peer's exit ended its loop, and no process dies of a signal.
#include <chrono>
#include <cstdio>
#include <exception>
#include <span>
#include <thread>
#include <vector>

#include "axonml/distributed.hpp"

using namespace axonml::distributed;

namespace {
World world = World::init();
}  // namespace

int main() {
  const int rank = world.rank();
  std::thread([rank] {
    std::vector<float> data(1000, 1.0f);
    try {
      for (;;) world.backend().all_reduce(std::span<float>(data), ReduceOp::Max);
    } catch (const std::exception& e) {
      std::printf("static_world_exit: rank %d's thread: %s\n", rank, e.what());
      std::fflush(stdout);
    }
  }).detach();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  return 0;
}
