// Runs one function per rank of a mock world, each on its own thread, and
// rethrows the first failure. A rank that throws aborts the world so that the
// others fail fast instead of waiting for it.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "axonml/distributed.hpp"

namespace axon_test {

using namespace axonml::distributed;

// Catch2 v2 assertions are not thread-safe: rank threads assert through
// RANK_REQUIRE / RANK_FAIL, which serialize on this mutex. Never put a
// collective inside them (a rank holding the lock would block the others);
// evaluate it first, or capture its error with error_of().
inline std::mutex& assertion_mutex() {
  static std::mutex mutex;
  return mutex;
}

// The what() of the exception `body` throws, or "" when it returns normally.
template <typename Body>
std::string error_of(Body&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

inline void run_ranks(int n, const std::function<void(std::shared_ptr<Backend>, int)>& body,
                      MockOptions options = {}) {
  auto world = MockBackend::create_world(n, options);
  std::exception_ptr first;
  std::mutex mutex;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(world[static_cast<std::size_t>(r)], r);
      } catch (...) {
        {
          std::lock_guard<std::mutex> lock(mutex);
          if (!first) first = std::current_exception();
        }
        try {
          world[static_cast<std::size_t>(r)]->abort("test body threw");
        } catch (...) {
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

// Collects one value per rank from a multi-rank run.
template <typename T>
class PerRank {
 public:
  explicit PerRank(int n) : values_(static_cast<std::size_t>(n)) {}
  T& operator[](int r) { return values_[static_cast<std::size_t>(r)]; }
  const std::vector<T>& all() const { return values_; }

 private:
  std::vector<T> values_;
};

}  // namespace axon_test

#define RANK_REQUIRE(...)                                                         \
  do {                                                                            \
    std::lock_guard<std::mutex> axon_assert_lock_(::axon_test::assertion_mutex()); \
    REQUIRE(__VA_ARGS__);                                                         \
  } while (false)

#define RANK_REQUIRE_THAT(arg, matcher)                                           \
  do {                                                                            \
    std::lock_guard<std::mutex> axon_assert_lock_(::axon_test::assertion_mutex()); \
    REQUIRE_THAT(arg, matcher);                                                   \
  } while (false)

#define RANK_FAIL(...)                                                            \
  do {                                                                            \
    std::lock_guard<std::mutex> axon_assert_lock_(::axon_test::assertion_mutex()); \
    FAIL(__VA_ARGS__);                                                            \
  } while (false)
