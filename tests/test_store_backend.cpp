// StoreBackend: a world set up through a key-value store (PyTorch's c10d
// Store in real use), here an in-memory one with ranks as threads.
#include <catch2/catch.hpp>

#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "axonml/distributed.hpp"
#include "support/run_ranks.hpp"

using namespace axonml::distributed;
using Catch::Matchers::Contains;

namespace {

class MemoryStore final : public KeyValueStore {
 public:
  void set(const std::string& key, const std::string& value) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      values_[key] = value;
    }
    changed_.notify_all();
  }
  std::string get(const std::string& key) override {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!changed_.wait_for(lock, std::chrono::seconds(60), [&] { return values_.count(key) != 0; })) {
      throw Error("MemoryStore: timed out waiting for " + key);
    }
    return values_[key];
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::string> values_;
};

}  // namespace

TEST_CASE("ranks that meet through a store share an arena and reduce together", "[store]") {
  const int n = GENERATE(1, 3);
  MemoryStore store;
  std::vector<std::vector<float>> results(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto backend = StoreBackend::create(store, r, n);
        std::vector<float> data(1000, static_cast<float>(r + 1));
        backend->all_reduce(data, ReduceOp::Sum);
        results[static_cast<std::size_t>(r)] = data;
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    CAPTURE(r);
    REQUIRE(errors[static_cast<std::size_t>(r)].empty());
    REQUIRE(results[static_cast<std::size_t>(r)] == std::vector<float>(1000, static_cast<float>(n * (n + 1) / 2)));
  }
}

TEST_CASE("ranks on different hosts get an error at set-up naming the hosts", "[store][errors]") {
  MemoryStore store;
  store.set("axon/host/1", "other-machine 00000000-dead-beef 4242");
  REQUIRE_THROWS_MATCHES(StoreBackend::create(store, 0, 2), InvalidArgument,
                         Catch::Matchers::Predicate<InvalidArgument>([](const InvalidArgument& e) {
                           const std::string what = e.what();
                           return what.find("rank 1 on other-machine") != std::string::npos &&
                                  what.find("one machine") != std::string::npos;
                         }, "names rank 1's host"));
}

TEST_CASE("an invalid rank or world size for a store world names the range", "[store][errors]") {
  MemoryStore store;
  REQUIRE_THROWS_WITH(StoreBackend::create(store, 2, 2), Contains("invalid rank 2") && Contains("0..1"));
  REQUIRE_THROWS_WITH(StoreBackend::create(store, 0, 0), Contains("world size 0"));
}

TEST_CASE("an arena larger than the available memory fails at set-up naming the sizes, not with SIGBUS later",
          "[store][errors]") {
  MemoryStore store;
  StoreOptions options;
  options.arena_bytes = std::size_t{1} << 50;  // 1 PiB
  REQUIRE_THROWS_WITH(StoreBackend::create(store, 0, 1, options),
                      Contains("rank 0: cannot reserve 1073741824 MiB") && Contains("of memory available") &&
                          Contains("StoreOptions::arena_bytes"));
}
