#include "axonml/nn/threads.hpp"

#include <tbb/global_control.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

#include "axonml/distributed/error.hpp"

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
  const std::size_t cores = std::max(1u, std::thread::hardware_concurrency());
  std::size_t ranks = 1;
  if (const char* local = std::getenv("LOCAL_WORLD_SIZE")) {
    try {
      ranks = std::max<long>(1, std::stol(local));
    } catch (const std::exception&) {
      ranks = 1;  // not a number: not launched by axon-launch
    }
  }
  return std::max<std::size_t>(1, cores / ranks);
}

}  // namespace axonml::nn
