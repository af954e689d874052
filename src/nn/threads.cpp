#include "axonml/nn/threads.hpp"

#include <sched.h>
#include <tbb/global_control.h>

#include <algorithm>
#include <thread>

#include "axonml/distributed/error.hpp"
#include "base/env.hpp"

namespace axonml::nn {

struct ComputeThreads::Control {
  tbb::global_control limit;
};

ComputeThreads::ComputeThreads(std::size_t threads) : threads_(threads) {
  if (threads == 0) {
    throw distributed::InvalidArgument("ComputeThreads: threads must be >= 1, got 0");
  }
  control_ = std::make_unique<Control>(Control{tbb::global_control(tbb::global_control::max_allowed_parallelism, threads)});
}

ComputeThreads::~ComputeThreads() = default;

std::size_t ComputeThreads::fair_share() {
  if (const auto share = distributed::env::integer("AXON_THREADS_PER_RANK", 1, 1 << 16)) {
    return static_cast<std::size_t>(*share);
  }
  // The CPUs we may use (taskset, cgroups), not every CPU of the machine.
  cpu_set_t mask;
  CPU_ZERO(&mask);
  const std::size_t cpus = sched_getaffinity(0, sizeof(mask), &mask) == 0
                               ? static_cast<std::size_t>(CPU_COUNT(&mask))
                               : std::max(1u, std::thread::hardware_concurrency());
  const auto ranks = distributed::env::integer("LOCAL_WORLD_SIZE", 1, 1 << 20).value_or(1);
  return std::max<std::size_t>(1, cpus / static_cast<std::size_t>(ranks));
}

}  // namespace axonml::nn
