#include "torch/interrupts.hpp"

#include <atomic>

namespace axonml::torch {
namespace {
std::atomic<InterruptCheck> installed_check{nullptr};
}

void install_interrupt_check(InterruptCheck check) { installed_check.store(check, std::memory_order_release); }

void check_interrupts() {
  if (InterruptCheck check = installed_check.load(std::memory_order_acquire)) check();
}

void check_interrupts_while(const std::string& who, const std::string& waiting) {
  try {
    check_interrupts();
  } catch (...) {
    throw Interrupted(who + std::string(kInterruptedWords) + ": Ctrl-C's KeyboardInterrupt, most often) while it " +
                      waiting, std::current_exception());
  }
}

}  // namespace axonml::torch
