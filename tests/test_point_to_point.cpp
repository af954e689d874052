// Point to point at its edges, on mock worlds: messages are matched by
// (communicator, src, tag); one rank's Backend objects (world, subgroups) may
// be used from different threads at once; a send that does not fit the
// mailbox completes while the receiver waits in a collective.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <numeric>
#include <thread>

#include "backends/point_to_point.hpp"
#include "shm/arena_layout.hpp"
#include "shm/wait.hpp"
#include "support/run_ranks.hpp"

using namespace axonml::distributed;
using axon_test::run_ranks;

namespace {

std::vector<float> pattern(std::size_t count, float salt) {
  std::vector<float> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = salt + static_cast<float>(i % 1000);
  return v;
}

// Ranks 0 and 1 bounce `count` floats back and forth `rounds` times on `b`
// with `tag`, each side adding 1 per hop; returns what rank 0 ends with.
float ping_pong(Backend& b, int tag, std::size_t count, int rounds) {
  std::vector<float> buffer(count, 0.0f);
  for (int k = 0; k < rounds; ++k) {
    if (b.rank() == 0) {
      b.send<float>(buffer, 1, tag);
      b.recv<float>(buffer, 1, tag);
    } else {
      b.recv<float>(buffer, 0, tag);
      for (float& x : buffer) x += 1.0f;
      b.send<float>(buffer, 0, tag);
    }
    if (b.rank() == 0) {
      for (float& x : buffer) x += 1.0f;
    }
  }
  return buffer[count - 1];
}

}  // namespace

TEST_CASE("a message sent on a subgroup is received on that subgroup, not on the world",
          "[p2p][groups][mock]") {
  run_ranks(2, [&](std::shared_ptr<Backend> world, int r) {
    std::shared_ptr<Backend> pair = world->new_group(std::vector<int>{0, 1});
    if (r == 0) {
      pair->send<const float>(std::vector<float>{1, 1, 1, 1}, 1, /*tag=*/0);
      world->send<const float>(std::vector<float>{2, 2, 2, 2}, 1, /*tag=*/0);
    } else {
      std::vector<float> on_world(4), on_pair(4);
      world->recv<float>(on_world, 0, 0);
      pair->recv<float>(on_pair, 0, 0);
      RANK_REQUIRE(on_world == std::vector<float>{2, 2, 2, 2});
      RANK_REQUIRE(on_pair == std::vector<float>{1, 1, 1, 1});
    }
  });
}

TEST_CASE("equal ranks and tags on two subgroups of the same members stay apart",
          "[p2p][groups][mock]") {
  // Subgroup rank numbering differs from the world's: {2, 0} makes world rank
  // 2 rank 0 of the group, so the same (src, tag) means different peers.
  run_ranks(3, [&](std::shared_ptr<Backend> world, int r) {
    std::shared_ptr<Backend> a = world->new_group(std::vector<int>{0, 2});
    std::shared_ptr<Backend> b = world->new_group(std::vector<int>{2, 0});
    if (r == 1) return;
    const std::size_t big = 50'000;  // several cells: the second message waits in the stash
    if (r == 0) {
      a->send<const float>(pattern(big, 10), 1, 7);
      b->send<const float>(pattern(3, 20), 0, 7);
      world->send<const float>(pattern(5, 30), 2, 7);
    } else {
      std::vector<float> from_world(5), from_b(3), from_a(big);
      world->recv<float>(from_world, 0, 7);
      b->recv<float>(from_b, 1, 7);
      a->recv<float>(from_a, 0, 7);
      RANK_REQUIRE(from_world == pattern(5, 30));
      RANK_REQUIRE(from_b == pattern(3, 20));
      RANK_REQUIRE(from_a == pattern(big, 10));
    }
  });
}

TEST_CASE("threads ping-pong on the world and on a subgroup at once", "[p2p][groups][threads][mock]") {
  // One rank's Backend objects share its mailboxes; Backend promises that
  // different objects may be used concurrently (a thread per process group).
  const std::size_t count = GENERATE(std::size_t{1}, 100'000);
  CAPTURE(count);
  const int rounds = count == 1 ? 2000 : 20;
  run_ranks(3, [&](std::shared_ptr<Backend> world, int r) {
    std::shared_ptr<Backend> pair = world->new_group(std::vector<int>{0, 1});
    if (r == 2) return;
    float on_pair = 0, on_world = 0;
    std::string pair_error;
    std::thread other([&] {
      pair_error = axon_test::error_of([&] { on_pair = ping_pong(*pair, 2, count, rounds); });
    });
    const std::string world_error =
        axon_test::error_of([&] { on_world = ping_pong(*world, 1, count, rounds); });
    other.join();
    RANK_REQUIRE(world_error.empty());
    RANK_REQUIRE(pair_error.empty());
    // Rank 0 ends each round with 2 more; rank 1 is one hop behind.
    const float expected = 2.0f * static_cast<float>(rounds) - static_cast<float>(r);
    RANK_REQUIRE(on_world == expected);
    RANK_REQUIRE(on_pair == expected);
  });
}

TEST_CASE("threads on different groups send to the same peer at once", "[p2p][groups][threads][mock]") {
  // Two senders into one mailbox: the cells of their messages must not mix.
  run_ranks(2, [&](std::shared_ptr<Backend> world, int r) {
    std::shared_ptr<Backend> pair = world->new_group(std::vector<int>{1, 0});
    const std::size_t count = 40'000;
    auto run = [&](Backend& b, int peer, float salt) {
      for (int k = 0; k < 10; ++k) {
        if (r == 0) {
          b.send<const float>(pattern(count, salt + static_cast<float>(k)), peer, 3);
        } else {
          std::vector<float> got(count);
          b.recv<float>(got, peer, 3);
          RANK_REQUIRE(got == pattern(count, salt + static_cast<float>(k)));
        }
      }
    };
    std::thread other([&] { run(*pair, r == 0 ? 0 : 1, 500.0f); });  // pair ranks are reversed
    run(*world, r == 0 ? 1 : 0, 0.0f);
    other.join();
  });
}

TEST_CASE("a send larger than the mailbox completes while the receiver waits in a collective",
          "[p2p][collectives][mock]") {
  // The ring holds 4 cells of 16 KiB at n=2: 16,384 floats fit, 16,385 do not.
  const std::size_t count = GENERATE(std::size_t{16'384}, 16'385, 1'000'000);
  CAPTURE(count);
  run_ranks(2, [&](std::shared_ptr<Backend> b, int r) {
    if (r == 0) {
      b->send<const float>(pattern(count, 1), 1, 0);
      b->barrier();
      std::vector<float> sum(8, 1.0f);
      b->all_reduce(std::span<float>(sum), ReduceOp::Sum);
    } else {
      b->barrier();
      std::vector<float> sum(8, 1.0f);
      b->all_reduce(std::span<float>(sum), ReduceOp::Sum);
      std::vector<float> got(count);
      b->recv<float>(got, 0, 0);
      RANK_REQUIRE(got == pattern(count, 1));
      RANK_REQUIRE(sum[0] == 2.0f);
    }
  });
}

TEST_CASE("sends on a subgroup complete while the receiver waits in a collective of another group",
          "[p2p][collectives][groups][mock]") {
  run_ranks(3, [&](std::shared_ptr<Backend> world, int r) {
    std::shared_ptr<Backend> pair = world->new_group(std::vector<int>{0, 2});
    const std::size_t count = 300'000;
    if (r == 0) pair->send<const float>(pattern(count, 4), 1, 9);
    world->barrier();
    if (r == 2) {
      std::vector<float> got(count);
      pair->recv<float>(got, 0, 9);
      RANK_REQUIRE(got == pattern(count, 4));
    }
  });
}

TEST_CASE("a rank's send to itself is kept until its own recv takes it, small or larger than the mailbox",
          "[p2p][mock]") {
  const std::size_t count = GENERATE(std::size_t{1}, 16'385, 1'000'000);
  CAPTURE(count);
  run_ranks(2, [&](std::shared_ptr<Backend> b, int r) {
    const float salt = static_cast<float>(10 * r);
    b->send<const float>(pattern(count, salt), r, /*tag=*/7);
    b->barrier();  // the message waits across a collective
    std::vector<float> got(count);
    b->recv<float>(got, r, 7);
    RANK_REQUIRE(got == pattern(count, salt));
  });
}

TEST_CASE("a collective's look for point-to-point traffic reads the mailboxes only after a cell has come",
          "[p2p][waiting]") {
  // Collective waits call progress() at every look; a look at every
  // mailbox is O(ranks), and 1024 ranks on 2 cores, each making it at every
  // look, took 2 s for one all_reduce (a review; 0.1 s when only a cell that
  // came is looked for).
  constexpr std::size_t kBytes = std::size_t{8} << 20;
  std::unique_ptr<std::byte, decltype(&std::free)> memory(static_cast<std::byte*>(std::aligned_alloc(4096, kBytes)),
                                                          &std::free);
  shm::ArenaSpec spec;
  spec.world_size = 2;
  spec.arena_bytes = kBytes;
  shm::format_arena(memory.get(), spec);
  auto& header = *reinterpret_cast<shm::ArenaHeader*>(memory.get());
  shm::WaitContext waits_0(header, 0, std::chrono::seconds(60));
  shm::WaitContext waits_1(header, 1, std::chrono::seconds(60));
  PointToPoint rank_0(memory.get(), 0, waits_0);
  PointToPoint rank_1(memory.get(), 1, waits_1);

  CHECK_FALSE(rank_0.progress());  // nothing sent: no look
  const std::vector<float> sent = pattern(100, 3.0f);
  rank_1.send(/*comm=*/1, /*dst=*/0, /*tag=*/5, reinterpret_cast<const std::byte*>(sent.data()),
              sent.size() * sizeof(float), DataType::F32);
  CHECK_FALSE(rank_1.progress());  // rank 1 was sent nothing
  CHECK(rank_0.progress());        // the cell came: drained into the stash
  CHECK_FALSE(rank_0.progress());  // and nothing since
  std::vector<float> got(sent.size());
  rank_0.recv(1, 1, 5, reinterpret_cast<std::byte*>(got.data()), got.size() * sizeof(float), DataType::F32);
  CHECK(got == sent);
}
