#include "torch/interrupts.hpp"

#include <atomic>

namespace axonml::torch {
namespace {
std::atomic<InterruptCheck> installed_check{nullptr};
thread_local bool interruptible = false;
std::atomic<int> interrupted_pending{0};
}  // namespace

void install_interrupt_check(InterruptCheck check) { installed_check.store(check, std::memory_order_release); }

InterruptibleWaits::InterruptibleWaits(bool on) : saved_(interruptible) { interruptible = on; }
InterruptibleWaits::~InterruptibleWaits() { interruptible = saved_; }

void check_interrupts() {
  if (!interruptible) return;
  if (InterruptCheck check = installed_check.load(std::memory_order_acquire)) check();
}

void note_interrupted_op_pending() { interrupted_pending.fetch_add(1, std::memory_order_relaxed); }
void note_interrupted_op_ended() { interrupted_pending.fetch_sub(1, std::memory_order_relaxed); }
bool interrupted_ops_pending() { return interrupted_pending.load(std::memory_order_relaxed) > 0; }

void check_interrupts_while(const std::function<std::string()>& who, const std::function<std::string()>& waiting) {
  try {
    check_interrupts();
  } catch (...) {
    throw Interrupted(who() + std::string(kInterruptedWords) + ": Ctrl-C's KeyboardInterrupt, most often) while it " +
                      waiting(), std::current_exception());
  }
}

}  // namespace axonml::torch
