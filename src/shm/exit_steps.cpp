#include "shm/exit_steps.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "base/log.hpp"
#include "shm/wait.hpp"

namespace axonml::distributed::shm {

void refuse_calls_then_wait_for_those_in_flight(const ExitSteps& steps) {
  auto started = std::chrono::steady_clock::now();
  auto pause = std::chrono::microseconds(100);
  auto sleep_a_while = [&] {
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(10'000));
  };
  // Up to `grace` from `started` for the calls in flight to end; true when
  // they did.
  auto wait_for_calls = [&](std::chrono::milliseconds grace) {
    while (steps.in_flight() != 0 && std::chrono::steady_clock::now() - started < grace) sleep_a_while();
    return steps.in_flight() == 0;
  };
  if (steps.in_flight() != 0) {
    log::log(log::Level::Warn, steps.rank,
             "{}: exiting while a call of this library is still running on another thread; giving it a second "
             "before {} (join every thread that uses the library before main returns)",
             steps.backend, steps.goes_on_to);
  }
  const bool ended = wait_for_calls(std::chrono::seconds(1));
  steps.refuse_calls();
  if (!ended || steps.in_flight() != 0) {
    started = std::chrono::steady_clock::now();
    if (!wait_for_calls(std::chrono::seconds(1))) steps.give_up_waits();
  }
  started = std::chrono::steady_clock::now();
  const auto limit = default_timeout_at_exit() + std::chrono::seconds(1);
  while (steps.in_flight() != 0) {
    if (std::chrono::steady_clock::now() - started >= limit) {
      log::log(log::Level::Error, steps.rank,
               "{}: at exit a thread of this process was still inside a call of this library after {} ms "
               "(AXON_TIMEOUT and a second); exiting with status 1 {}; join every thread that uses the library "
               "before main returns",
               steps.backend, limit.count(), steps.status_1_means);
      std::fflush(nullptr);  // _Exit does not flush what the program printed
      std::_Exit(1);
    }
    sleep_a_while();
  }
}

void wait_until_calls_stop(const ExitSteps& steps) {
  const auto started = std::chrono::steady_clock::now();
  for (std::uint64_t seen = steps.begun(); std::chrono::steady_clock::now() - started < std::chrono::seconds(1);) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const std::uint64_t now = steps.begun();
    if (now == seen && steps.in_flight() == 0) break;
    seen = now;
  }
}

}  // namespace axonml::distributed::shm
