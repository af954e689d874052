// ComputeThreads: how many threads the nn kernels (oneTBB parallel_for in
// Linear) may use in this process, while the object lives.
//
// oneTBB sizes its pool to every core of the machine. Ranks launched on one
// machine each have such a pool, so n ranks run n times as many busy workers
// as there are cores: they preempt one another mid-matmul, and the rank a
// collective waits on is often the one descheduled. fair_share() gives each
// rank its slice of the cores instead: AXON_THREADS_PER_RANK when set
// (axon-launch sets it to the cores the rank is bound to, see --bind), else
// the CPUs this process may run on (its affinity mask) divided by
// LOCAL_WORLD_SIZE (1 when run alone), at least 1.
//
//   axonml::nn::ComputeThreads limit(axonml::nn::ComputeThreads::fair_share());
//
// Thread safety: construct and destroy on one thread; limits nest as
// tbb::global_control does (the smallest live limit wins).
#pragma once

#include "axonml/distributed/cxx20.hpp"

#include <cstddef>
#include <memory>

namespace axonml::nn {

class ComputeThreads {
 public:
  // REQUIRES: threads >= 1.
  explicit ComputeThreads(std::size_t threads);
  ~ComputeThreads();
  ComputeThreads(const ComputeThreads&) = delete;
  ComputeThreads& operator=(const ComputeThreads&) = delete;

  std::size_t threads() const { return threads_; }

  // This rank's share of the machine's cores (see above).
  static std::size_t fair_share();

 private:
  struct Control;
  std::size_t threads_;
  std::unique_ptr<Control> control_;
};

}  // namespace axonml::nn
