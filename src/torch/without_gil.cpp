#include "torch/without_gil.hpp"

#include <atomic>

namespace axonml::torch {
namespace {
std::atomic<WaitRunner> installed_runner{nullptr};
}

void install_wait_runner(WaitRunner runner) { installed_runner.store(runner, std::memory_order_release); }

namespace detail {
void run_wait(void (*wait)(void*), void* context) {
  if (WaitRunner runner = installed_runner.load(std::memory_order_acquire)) return runner(wait, context);
  wait(context);
}
}  // namespace detail

}  // namespace axonml::torch
