// Who wakes whom: sleeping ranks are woken once per round, by the member
// that completes it, not by every member that publishes (with n sleepers
// that was n wake-ups of n threads each, per round: docs/scaling.md).
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

#include "axonml/distributed.hpp"
#include "shm/wait.hpp"

using namespace axonml::distributed;

TEST_CASE("a round wakes its sleepers once, from the member that completes it", "[shm][waiting]") {
  // Oversubscribed waiting: after 200 us of yields a waiting rank sleeps.
  setenv("AXON_OVERSUBSCRIBED", "1", 1);
  auto world = MockBackend::create_world(4);
  unsetenv("AXON_OVERSUBSCRIBED");
  auto run_all = [&](auto&& body) {
    std::vector<std::thread> threads;
    for (int r = 0; r < 4; ++r) threads.emplace_back([&, r] { body(r); });
    for (auto& t : threads) t.join();
  };
  run_all([&](int r) {  // warm up: every rank has attached and run a round
    std::vector<float> v{1.0f};
    world[static_cast<std::size_t>(r)]->all_reduce(std::span<float>(v), ReduceOp::Sum);
  });

  // Ranks arrive 30 ms apart, so ranks 0..2 are asleep when the next one
  // publishes. Only rank 3's publish completes the round.
  const std::uint64_t before = shm::futex_wake_calls();
  std::vector<float> results(4);
  run_all([&](int r) {
    std::this_thread::sleep_for(std::chrono::milliseconds(30 * r));
    std::vector<float> v{static_cast<float>(r)};
    world[static_cast<std::size_t>(r)]->all_reduce(std::span<float>(v), ReduceOp::Sum);
    results[static_cast<std::size_t>(r)] = v[0];
  });
  const std::uint64_t wakes = shm::futex_wake_calls() - before;
  CHECK(wakes == 1);
  for (float x : results) CHECK(x == 6.0f);
}

TEST_CASE("a peer counts as arrived once it entered the next collective or announced it, for that call only",
          "[shm][waiting][arrival]") {
  auto world = MockBackend::create_world(3);
  auto all_reduce_on_all = [&] {
    std::vector<std::thread> threads;
    for (std::size_t r = 0; r < 3; ++r) {
      threads.emplace_back([&, r] {
        std::vector<float> v{1.0f};
        world[r]->all_reduce(std::span<float>(v), ReduceOp::Sum);
      });
    }
    for (auto& t : threads) t.join();
  };
  CHECK_FALSE(world[0]->peers_arrived());
  world[1]->announce_next();
  CHECK_FALSE(world[0]->peers_arrived());  // rank 2 has neither entered nor announced
  world[2]->announce_next();
  CHECK(world[0]->peers_arrived());
  CHECK_FALSE(world[1]->peers_arrived());  // rank 0 has not announced
  all_reduce_on_all();
  // The announcements were for call #0: they say nothing of call #1.
  CHECK_FALSE(world[0]->peers_arrived());
  world[1]->announce_next();
  world[2]->announce_next();
  CHECK(world[0]->peers_arrived());
  all_reduce_on_all();
}
