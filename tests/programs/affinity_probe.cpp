// A rank program for the placement tests: reports where it runs.
//
//   affinity_probe      init, print one line, barrier, exit 0:
//     "affinity rank=R cpus=<list> threads=<AXON_THREADS_PER_RANK> omp=<OMP_NUM_THREADS>
//      share=<fair_share()> node=<AXON_NUMA_NODE> over=<AXON_OVERSUBSCRIBED>"
//
// <list> is the rank's own sched_getaffinity mask written the way
// axon-launch --verbose (hwloc) writes CPU lists: "0-3,8,10-11".
#include <sched.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "axonml/distributed.hpp"
#include "axonml/nn/threads.hpp"

using namespace axonml::distributed;

namespace {

std::string cpu_list() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof(mask), &mask) != 0) return "error";
  std::string s;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &mask)) continue;
    int last = cpu;
    while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, &mask)) ++last;
    if (!s.empty()) s += ",";
    s += last == cpu ? std::to_string(cpu) : std::to_string(cpu) + "-" + std::to_string(last);
    cpu = last;
  }
  return s;
}

const char* or_unset(const char* value) { return value ? value : "unset"; }

}  // namespace

int main() {
  World world = World::init();
  std::printf("affinity rank=%d cpus=%s threads=%s omp=%s share=%zu node=%s over=%s\n", world.rank(),
              cpu_list().c_str(), or_unset(std::getenv("AXON_THREADS_PER_RANK")),
              or_unset(std::getenv("OMP_NUM_THREADS")), axonml::nn::ComputeThreads::fair_share(),
              or_unset(std::getenv("AXON_NUMA_NODE")), or_unset(std::getenv("AXON_OVERSUBSCRIBED")));
  std::fflush(stdout);
  barrier(world.default_group());
  return 0;
}
