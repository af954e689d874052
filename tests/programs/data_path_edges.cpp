// A rank program for axon-launch: one edge case of the shared-memory data
// path per run, on real processes. Exits 0 when the case behaves, 1 (with a
// message) when it does not.
//
//   axon-launch -n 2 data_path_edges cross-group        a message sent on a subgroup
//                                                       is not received on the world
//   axon-launch -n 2 data_path_edges threads            a thread per group ping-pongs
//                                                       100,000 floats on each at once
//   axon-launch -n 2 data_path_edges send-then-barrier  send(16,385 floats); barrier()
//                                                       against barrier(); recv()
//   axon-launch -n 3 --timeout 1 data_path_edges send-then-collective [ROUNDS]
//                                                       ROUNDS times (20): rank 0 sends 400 KB to
//                                                       rank 1, then all-reduces in {0, 1} and
//                                                       the world; rank 1 all-reduces, then receives
//   axon-launch -n 2 data_path_edges send-to-self       each rank sends 4 and 1,000,000
//                                                       floats to itself, then receives them
//   AXON_SLOT_BYTES=64 axon-launch -n 8 data_path_edges tiny-slots
//                                                       every collective through 64-byte slots
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "axonml/distributed.hpp"

using namespace axonml::distributed;

namespace {

void check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

std::vector<float> pattern(std::size_t count, float salt) {
  std::vector<float> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = salt + static_cast<float>(i % 1000);
  return v;
}

void cross_group(World& world) {
  auto pair = world.backend().new_group(std::vector<int>{0, 1});
  if (world.rank() == 0) {
    pair->send<const float>(std::vector<float>{1, 1, 1, 1}, 1, 0);
    world.backend().send<const float>(std::vector<float>{2, 2, 2, 2}, 1, 0);
  } else if (world.rank() == 1) {
    std::vector<float> on_world(4), on_pair(4);
    world.backend().recv<float>(on_world, 0, 0);
    pair->recv<float>(on_pair, 0, 0);
    check(on_world == std::vector<float>{2, 2, 2, 2}, "the world's recv got the subgroup's message");
    check(on_pair == std::vector<float>{1, 1, 1, 1}, "the subgroup's recv got the world's message");
  }
}

// Rank 0 and 1 bounce `count` floats `rounds` times, each adding 1 per hop.
float ping_pong(Backend& b, int tag, std::size_t count, int rounds) {
  std::vector<float> buffer(count, 0.0f);
  for (int k = 0; k < rounds; ++k) {
    if (b.rank() == 0) {
      b.send<float>(buffer, 1, tag);
      b.recv<float>(buffer, 1, tag);
      for (float& x : buffer) x += 1.0f;
    } else {
      b.recv<float>(buffer, 0, tag);
      for (float& x : buffer) x += 1.0f;
      b.send<float>(buffer, 0, tag);
    }
  }
  return buffer[count - 1];
}

void threads(World& world) {
  auto pair = world.backend().new_group(std::vector<int>{0, 1});
  if (world.rank() > 1) return;
  const std::size_t count = 100'000;
  const int rounds = 30;
  float on_pair = 0;
  std::exception_ptr pair_error;
  std::thread other([&] {
    try {
      on_pair = ping_pong(*pair, 2, count, rounds);
    } catch (...) {
      pair_error = std::current_exception();
    }
  });
  float on_world = 0;
  std::exception_ptr world_error;
  try {
    on_world = ping_pong(world.backend(), 1, count, rounds);
  } catch (...) {
    world_error = std::current_exception();
  }
  other.join();
  if (world_error) std::rethrow_exception(world_error);
  if (pair_error) std::rethrow_exception(pair_error);
  const float expected = 2.0f * rounds - static_cast<float>(world.rank());
  check(on_world == expected, "world ping-pong ended with " + std::to_string(on_world));
  check(on_pair == expected, "subgroup ping-pong ended with " + std::to_string(on_pair));
}

void send_then_barrier(World& world) {
  const std::size_t count = 16'385;  // one float more than the mailbox holds at n=2
  if (world.rank() == 0) {
    world.backend().send<const float>(pattern(count, 3), 1, 0);
    world.barrier();
  } else {
    world.barrier();
    if (world.rank() == 1) {
      std::vector<float> got(count);
      world.backend().recv<float>(got, 0, 0);
      check(got == pattern(count, 3), "the message arrived changed");
    }
  }
}

// A receiver waiting in a collective drains its mailbox for a sender
// blocked on it, also when it does not spin (oversubscribed): its look before
// each sleep drains. It drained only every 16th look, one per 50 ms sleep, and
// the 400 KB send took 0.3-1.6 s in most runs at n=3 on 2 vCPUs, over a
// 1 s timeout in 6 runs of 10 (a review). The test runs it under a short
// timeout with AXON_OVERSUBSCRIBED=1: such a stall fails it.
void send_then_collective(World& world, int rounds) {
  const std::size_t count = 100'000;  // 400 KB: six mailboxes full at n=3
  ProcessGroup pair = world.new_group({0, 1});
  for (int round = 0; round < rounds; ++round) {
    const float salt = static_cast<float>(round);
    std::vector<float> one(4, 1.0f);
    if (world.rank() == 0) {
      world.backend().send<const float>(pattern(count, salt), 1, round);
      pair.backend().all_reduce(std::span<float>(one), ReduceOp::Sum);
    } else if (world.rank() == 1) {
      pair.backend().all_reduce(std::span<float>(one), ReduceOp::Sum);
      std::vector<float> got(count);
      world.backend().recv<float>(got, 0, round);
      check(got == pattern(count, salt), "round " + std::to_string(round) + ": the message arrived changed");
    }
    if (world.rank() < 2) check(one == std::vector<float>(4, 2.0f), "round " + std::to_string(round) + ": wrong sum");
    // The same with the collective on the world, which rank 2 is in too.
    std::vector<float> all(4, 1.0f);
    if (world.rank() == 0) {
      world.backend().send<const float>(pattern(count, salt + 0.5f), 1, round);
      world.backend().all_reduce(std::span<float>(all), ReduceOp::Sum);
    } else {
      world.backend().all_reduce(std::span<float>(all), ReduceOp::Sum);
      if (world.rank() == 1) {
        std::vector<float> got(count);
        world.backend().recv<float>(got, 0, round);
        check(got == pattern(count, salt + 0.5f),
              "round " + std::to_string(round) + ": the world's message arrived changed");
      }
    }
    check(all == std::vector<float>(4, static_cast<float>(world.world_size())), "round " + std::to_string(round) +
          ": wrong sum on the world");
  }
}

void send_to_self(World& world) {
  Backend& b = world.backend();
  const float salt = static_cast<float>(10 * world.rank());
  for (std::size_t count : {std::size_t{4}, std::size_t{1'000'000}}) {
    b.send<const float>(pattern(count, salt), world.rank(), 5);
    world.barrier();  // the messages wait across a collective
  }
  for (std::size_t count : {std::size_t{4}, std::size_t{1'000'000}}) {
    std::vector<float> got(count);
    b.recv<float>(got, world.rank(), 5);
    check(got == pattern(count, salt), "the message to itself of " + std::to_string(count) + " floats arrived changed");
  }
}

template <typename T>
void tiny_slots_all_reduce(Backend& b, std::size_t count) {
  const int n = b.world_size();
  std::vector<T> data(count);
  for (std::size_t i = 0; i < count; ++i) data[i] = static_cast<T>(b.rank() + 1 + static_cast<int>(i % 3));
  b.all_reduce(std::span<T>(data), ReduceOp::Sum);
  for (std::size_t i = 0; i < count; ++i) {
    const T expected = static_cast<T>(n * (n + 1) / 2 + n * static_cast<int>(i % 3));
    check(data[i] == expected, "all_reduce of " + std::to_string(count) + " elements of " +
                                   std::to_string(sizeof(T)) + " bytes: element " + std::to_string(i));
  }
}

void tiny_slots(World& world) {
  Backend& b = world.backend();
  const auto n = static_cast<std::size_t>(b.world_size());
  for (std::size_t count : std::vector<std::size_t>{1, 7, 16, 100, 1000}) {
    tiny_slots_all_reduce<double>(b, count);
    tiny_slots_all_reduce<std::int64_t>(b, count);
    tiny_slots_all_reduce<float>(b, count);
    tiny_slots_all_reduce<std::int32_t>(b, count);
    // reduce_scatter and scatter carry n blocks per slot.
    std::vector<double> send(n * count), recv(count);
    for (std::size_t i = 0; i < send.size(); ++i) send[i] = static_cast<double>(i);
    b.reduce_scatter<double>(send, recv, ReduceOp::Sum);
    for (std::size_t i = 0; i < count; ++i) {
      check(recv[i] == static_cast<double>(n * (static_cast<std::size_t>(b.rank()) * count + i)),
            "reduce_scatter of " + std::to_string(count) + " f64 per rank");
    }
    std::vector<double> piece(count);
    b.scatter<double>(send, piece, 0);
    for (std::size_t i = 0; i < count; ++i) {
      check(piece[i] == static_cast<double>(static_cast<std::size_t>(b.rank()) * count + i),
            "scatter of " + std::to_string(count) + " f64 per rank");
    }
    std::vector<double> all(n * count);
    b.all_gather<double>(piece, all);
    check(all == send, "all_gather of " + std::to_string(count) + " f64 per rank");
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string_view which = argc > 1 ? argv[1] : "";
  try {
    World world = World::init();
    if (which == "cross-group") {
      cross_group(world);
    } else if (which == "threads") {
      threads(world);
    } else if (which == "send-then-barrier") {
      send_then_barrier(world);
    } else if (which == "send-then-collective") {
      send_then_collective(world, argc > 2 ? std::stoi(argv[2]) : 20);
    } else if (which == "send-to-self") {
      send_to_self(world);
    } else if (which == "tiny-slots") {
      tiny_slots(world);
    } else {
      std::fprintf(stderr, "data_path_edges: unknown case '%s'\n", std::string(which).c_str());
      return 2;
    }
    world.barrier();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "data_path_edges %s: %s\n", std::string(which).c_str(), e.what());
    return 1;
  }
  return 0;
}
