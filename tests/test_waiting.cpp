// Who wakes whom: sleeping ranks are woken once per round, by the member
// that completes it, not by every member that publishes (with n sleepers
// that was n wake-ups of n threads each, per round: docs/scaling.md).
#include <catch2/catch.hpp>

#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <numeric>
#include <thread>
#include <vector>

#include "axonml/distributed.hpp"
#include "shm/arena_layout.hpp"
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

namespace {
// One all_reduce of one float on every rank of `world`, a thread each.
template <class World>
void all_reduce_on_every_rank(World& world) {
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < world.size(); ++r) {
    threads.emplace_back([&, r] {
      std::vector<float> v{1.0f};
      world[r]->all_reduce(std::span<float>(v), ReduceOp::Sum);
    });
  }
  for (auto& t : threads) t.join();
}
}  // namespace

TEST_CASE("a peer counts as arrived once it entered the next collective or announced it, for that call only",
          "[shm][waiting][arrival]") {
  auto world = MockBackend::create_world(3);
  auto all_reduce_on_all = [&] { all_reduce_on_every_rank(world); };
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

TEST_CASE("peers_arrived_within_spin gives peers_arrived's answer when no peer moves meanwhile",
          "[shm][waiting][arrival]") {
  // Its spin only lets a peer arrive meanwhile (a speed matter, measured
  // by benchmarks); it must never see a peer that is not there. Spinning
  // whatever the cores (three ranks outnumber two vCPUs, which spin none).
  setenv("AXON_SPIN_POLLS", "1000", 1);
  auto world = MockBackend::create_world(3);
  unsetenv("AXON_SPIN_POLLS");
  const auto spin = std::chrono::milliseconds(10);
  CHECK_FALSE(world[0]->peers_arrived_within_spin(spin));
  world[1]->announce_next();
  CHECK_FALSE(world[0]->peers_arrived_within_spin(spin));  // rank 2 is missing
  world[2]->announce_next();
  CHECK(world[0]->peers_arrived_within_spin(spin));
  CHECK_FALSE(world[1]->peers_arrived_within_spin(spin));  // rank 0 has not announced
  all_reduce_on_every_rank(world);
  CHECK_FALSE(world[0]->peers_arrived_within_spin(spin));  // those announcements were for the call made
}

TEST_CASE("peers_arrived_within_spin spins no longer than it is given, however long AXON_SPIN_POLLS asks",
          "[shm][waiting][arrival]") {
  // A million polls take tens of milliseconds; the PyTorch backend's
  // async ops give their 50 us patience and must not block longer (a
  // review measured 30 ms a call before the limit). The median of five
  // looks, so that one preemption does not decide.
  setenv("AXON_SPIN_POLLS", "1048576", 1);
  auto world = MockBackend::create_world(2);
  unsetenv("AXON_SPIN_POLLS");
  std::vector<double> ms;
  for (int i = 0; i < 5; ++i) {
    const auto start = std::chrono::steady_clock::now();
    CHECK_FALSE(world[0]->peers_arrived_within_spin(std::chrono::microseconds(50)));
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(ms.begin(), ms.end());
  CHECK(ms[2] < 5.0);
}

namespace {
// A formatted arena of `ranks` ranks (4 unless given) on the heap: WaitContext reads
// the ranks' controls (whether a peer has left) beside the header.
struct HeapArena {
  explicit HeapArena(int ranks = 4)
      : bytes(std::size_t{8} << (ranks <= 4 ? 20 : 22)),  // 32 MiB holds 24 ranks' slots
        memory(static_cast<std::byte*>(std::aligned_alloc(4096, bytes))) {
    shm::ArenaSpec spec;
    spec.world_size = static_cast<std::uint32_t>(ranks);
    spec.arena_bytes = bytes;
    shm::format_arena(memory, spec);
  }
  ~HeapArena() { std::free(memory); }
  shm::ArenaHeader& header() const { return *reinterpret_cast<shm::ArenaHeader*>(memory); }
  std::size_t bytes;
  std::byte* memory;
};

// The pids of `ranks` ranks, those in `children` as child processes that
// exit once `go_write_end` is closed, the others this process, which stays.
std::vector<int> ranks_as_children(int ranks, const std::vector<int>& children, int& go_write_end) {
  int go[2];
  REQUIRE(::pipe(go) == 0);
  std::vector<int> pids(static_cast<std::size_t>(ranks), static_cast<int>(::getpid()));
  for (const int r : children) {
    const pid_t child = ::fork();
    if (child == 0) {
      ::close(go[1]);
      char byte;
      while (::read(go[0], &byte, 1) > 0) {
      }
      ::_exit(0);
    }
    REQUIRE(child > 0);
    pids[static_cast<std::size_t>(r)] = static_cast<int>(child);
  }
  ::close(go[0]);
  go_write_end = go[1];
  return pids;
}

// Ranks 1 and 3 of four as children. Returns the four pids.
std::vector<int> ranks_1_and_3_as_children(int& go_write_end) { return ranks_as_children(4, {1, 3}, go_write_end); }
}  // namespace

TEST_CASE("a wait ignores a watched peer that left the arena for good before it exited",
          "[shm][waiting][errors]") {
  // Found by a review: a PyTorch rank that took no part and ended its program
  // (leaving its groups) made two other ranks' send and recv fail. A wait
  // that needs such a peer fails through first_ended(); others go on.
  HeapArena arena;
  int go = -1;
  const std::vector<int> pids = ranks_1_and_3_as_children(go);
  shm::WaitContext wait(arena.header(), 0, std::chrono::seconds(60), pids);
  shm::WaitContext as_rank_3(arena.header(), 3, std::chrono::seconds(60));
  as_rank_3.mark_left();  // what rank 3's process does at its end
  ::close(go);
  int status = 0;
  ::waitpid(pids[1], &status, 0);
  ::waitpid(pids[3], &status, 0);
  const std::string expected =
      "rank 1 (pid " + std::to_string(pids[1]) + ") exited or was killed while its peers still needed it";
  REQUIRE_THROWS_WITH(wait.check_alive(), Catch::Matchers::Contains("rank 0: job aborted: " + expected));
  CHECK(wait.first_ended({3}) == 3);  // a wait that needs rank 3 still learns it has gone
}

TEST_CASE("a wait that finds several watched peers gone names every one of them, not only the lowest",
          "[shm][waiting][errors]") {
  // Under torch.multiprocessing, spawn kills the other ranks once one has
  // failed; a survivor that looks only then must not blame rank 1 alone.
  HeapArena arena;
  shm::ArenaHeader& header = arena.header();
  int go = -1;
  const std::vector<int> pids = ranks_1_and_3_as_children(go);
  shm::WaitContext wait(header, 0, std::chrono::seconds(60), pids);
  ::close(go);
  int status = 0;
  ::waitpid(pids[1], &status, 0);
  ::waitpid(pids[3], &status, 0);
  const std::string expected = "ranks 1 (pid " + std::to_string(pids[1]) + "), 3 (pid " + std::to_string(pids[3]) +
                               ") exited or were killed while their peers still needed them";
  REQUIRE_THROWS_WITH(wait.check_alive(), Catch::Matchers::Contains("rank 0: job aborted: " + expected));
  CHECK(header.abort_rank == 1);
  CHECK(std::string(header.abort_reason) == expected);
}

TEST_CASE("a wait that finds many watched peers gone names them in runs, without their pids",
          "[shm][waiting][errors]") {
  // An abort's reason keeps about 1 000 characters; 64 ranks with their pids
  // filled it. Ranks 1-20 are children that exit; 0 and 21-23 this process.
  constexpr int kRanks = 24, kExiting = 20;
  HeapArena arena(kRanks);
  std::vector<int> children(kExiting);
  std::iota(children.begin(), children.end(), 1);
  int go = -1;
  const std::vector<int> pids = ranks_as_children(kRanks, children, go);
  shm::WaitContext wait(arena.header(), 0, std::chrono::seconds(60), pids);
  ::close(go);
  int status = 0;
  for (int r = 1; r <= kExiting; ++r) ::waitpid(pids[static_cast<std::size_t>(r)], &status, 0);
  const std::string expected = "ranks 1-20 exited or were killed while their peers still needed them";
  REQUIRE_THROWS_WITH(wait.check_alive(), Catch::Matchers::Contains("rank 0: job aborted: " + expected));
  CHECK(std::string(arena.header().abort_reason) == expected);
}

TEST_CASE("sleepers of an oversubscribed world above 64 ranks look for aborts less often, at most every second",
          "[shm][waiting]") {
  // 700 sleepers of 1024 ranks on 2 cores looking every 50 ms starved the
  // ranks still starting (axon-launch -n 1024: 42-65 s, now about 4).
  alignas(64) static shm::ArenaHeader header{};
  auto slice = [](std::uint32_t ranks, const char* oversubscribed) {
    header.world_size = ranks;
    setenv("AXON_OVERSUBSCRIBED", oversubscribed, 1);
    shm::WaitContext waits(header, 0, std::chrono::seconds(60));
    unsetenv("AXON_OVERSUBSCRIBED");
    return waits.sleep_slice();
  };
  using std::chrono::milliseconds;
  REQUIRE(slice(8, "1") == milliseconds(50));
  REQUIRE(slice(64, "1") == milliseconds(50));
  REQUIRE(slice(256, "1") == milliseconds(200));
  REQUIRE(slice(1024, "1") == milliseconds(800));
  REQUIRE(slice(4096, "1") == milliseconds(1000));
  REQUIRE(slice(1024, "0") == milliseconds(50));  // a core per rank: looking costs nothing
}

TEST_CASE("a world that is part of a larger job counts the job's processes when it asks whether ranks outnumber cores",
          "[shm][waiting]") {
  // A PyTorch subgroup's arena holds its members alone; new_group([0, 1]) of
  // eight processes on two cores spun and yielded 2 ms, as if it had them.
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  REQUIRE(sched_getaffinity(0, sizeof(cpus), &cpus) == 0);
  const int cores = CPU_COUNT(&cpus);
  alignas(64) static shm::ArenaHeader header{};
  header.world_size = 1;  // fewer than any machine's cores
  unsetenv("AXON_OVERSUBSCRIBED");
  unsetenv("AXON_SPIN_POLLS");
  shm::WaitContext alone(header, 0, std::chrono::seconds(60));
  CHECK_FALSE(alone.oversubscribed());
  CHECK(alone.spin_polls() > 0);
  CHECK(alone.yield_phase() == std::chrono::microseconds(2000));
  shm::WaitContext in_a_job(header, 0, std::chrono::seconds(60), {}, {}, cores + 1);
  CHECK(in_a_job.oversubscribed());
  CHECK(in_a_job.spin_polls() == 0);
  CHECK(in_a_job.yield_phase() == std::chrono::microseconds(200));
  shm::WaitContext job_of_its_own_size(header, 0, std::chrono::seconds(60), {}, {}, 1);
  CHECK_FALSE(job_of_its_own_size.oversubscribed());
  setenv("AXON_OVERSUBSCRIBED", "0", 1);  // axon-launch knows how it bound the ranks: it decides
  shm::WaitContext told(header, 0, std::chrono::seconds(60), {}, {}, cores + 1);
  unsetenv("AXON_OVERSUBSCRIBED");
  CHECK_FALSE(told.oversubscribed());
}

TEST_CASE("under mpirun, a rank bound to one core counts its parent's cores, and only mpirun's 1 says oversubscribed",
          "[shm][waiting]") {
  // mpirun binds each rank to a core of its own: counted alone, 2 ranks on
  // a 2-core machine were oversubscribed, and the node arena's waits kept
  // yielding beside a busy program (a review). Its
  // OMPI_MCA_mpi_oversubscribe=0 counts slots (a hostfile may give more
  // than there are cores), so only its 1 decides.
  cpu_set_t parent;
  CPU_ZERO(&parent);
  REQUIRE(sched_getaffinity(getppid(), sizeof(parent), &parent) == 0);
  const int parent_cores = CPU_COUNT(&parent);
  unsetenv("AXON_OVERSUBSCRIBED");
  unsetenv("OMPI_MCA_mpi_oversubscribe");
  bool pinned = false, alone = false, under_mpirun = false, mpirun_says_1 = false, mpirun_says_0 = false;
  std::thread bound([&] {  // a thread of its own: affinity is per thread (no Catch2 assertions here)
    cpu_set_t one;
    CPU_ZERO(&one);
    int cpu = 0;
    while (!CPU_ISSET(cpu, &parent)) ++cpu;
    CPU_SET(cpu, &one);
    pinned = sched_setaffinity(0, sizeof(one), &one) == 0;
    if (!pinned) return;
    alone = shm::ranks_outnumber_cores(2);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
    under_mpirun = shm::ranks_outnumber_cores(2);
    setenv("OMPI_MCA_mpi_oversubscribe", "1", 1);
    mpirun_says_1 = shm::ranks_outnumber_cores(1);
    setenv("OMPI_MCA_mpi_oversubscribe", "0", 1);
    mpirun_says_0 = shm::ranks_outnumber_cores(parent_cores + 1);
    unsetenv("OMPI_MCA_mpi_oversubscribe");
    unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  });
  bound.join();
  REQUIRE(pinned);
  CHECK(alone);  // outside mpirun, a process pinned to one core counts one
  CHECK(under_mpirun == (parent_cores < 2));
  CHECK(mpirun_says_1);
  CHECK(mpirun_says_0);  // its 0 does not override the count
}

namespace {

// Rank 0's sched_yield calls over `rounds` all_reduces at n=2 (threads of
// this process), its thread pinned to one CPU beside a thread that never
// waits (another program, a DataLoader worker, the rank's own compute), and
// rank 1 2 ms late to each. `oversubscribed`: the world's AXON_OVERSUBSCRIBED.
std::uint64_t yields_beside_a_busy_thread(int rounds, bool oversubscribed) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  REQUIRE(sched_getaffinity(0, sizeof(allowed), &allowed) == 0);
  int cpu = 0;
  while (!CPU_ISSET(cpu, &allowed)) ++cpu;
  auto pin_here = [cpu] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    REQUIRE(sched_setaffinity(0, sizeof(one), &one) == 0);  // this thread only
  };
  setenv("AXON_OVERSUBSCRIBED", oversubscribed ? "1" : "0", 1);
  auto world = MockBackend::create_world(2);
  unsetenv("AXON_OVERSUBSCRIBED");
  std::atomic<bool> stop{false};
  std::thread busy([&] {
    pin_here();
    while (!stop.load(std::memory_order_relaxed)) shm::detail::pause_cpu();
  });
  std::uint64_t yields = 0;
  std::vector<float> results;
  std::thread rank0([&] {
    pin_here();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the busy thread runs
    const std::uint64_t before = shm::detail::yield_calls();  // this thread's own
    for (int i = 0; i < rounds; ++i) {
      std::vector<float> v{1.0f};
      world[0]->all_reduce(std::span<float>(v), ReduceOp::Sum);
      results.push_back(v[0]);
    }
    yields = shm::detail::yield_calls() - before;
  });
  std::thread rank1([&] {
    for (int i = 0; i < rounds; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      std::vector<float> v{2.0f};
      world[1]->all_reduce(std::span<float>(v), ReduceOp::Sum);
    }
  });
  rank0.join();
  rank1.join();
  stop = true;
  busy.join();
  CHECK(std::all_of(results.begin(), results.end(), [](float x) { return x == 3.0f; }));
  return yields;
}

}  // namespace

TEST_CASE("a rank whose yields lose its core to a busy thread sleeps through its next waits instead of yielding",
          "[shm][waiting][contention]") {
  // A yield hands the busy thread the rest of its slice, milliseconds, each
  // round: a 64 MiB all_reduce at n=2 beside two busy processes took 0.3-1.3
  // s instead of 25-54 ms. After two such yields the rank's waits poll 50 us
  // and then sleep on the futex instead, for the next 100 ms, and the
  // peer's ring brings them back at once. Every round yields at least once
  // without the rule (each wait outlasts the spin: 55 yields in 30 rounds);
  // with it, two per 100 ms of the loop (about 80 ms, more under load).
  constexpr int kRounds = 40;
  const std::uint64_t yields = yields_beside_a_busy_thread(kRounds, false);
  INFO("rank 0's sched_yield calls in " << kRounds << " waits: " << yields);
  CHECK(yields < kRounds / 2);
}

TEST_CASE("oversubscribed ranks keep yielding beside a busy thread: there a long yield is a peer rank's turn",
          "[shm][waiting][contention]") {
  // Sleeping instead made 8 ranks on 2 cores 50x slower per collective (700
  // us, not 13). Each wait here yields at least once (no spin): the rank is
  // running when it enters each round, and its peer comes 2 ms later.
  constexpr int kRounds = 30;
  const std::uint64_t yields = yields_beside_a_busy_thread(kRounds, true);
  INFO("rank 0's sched_yield calls in " << kRounds << " waits: " << yields);
  CHECK(yields >= kRounds / 2);
}

TEST_CASE("a thread's yields count as losing the core for 100 ms after two lost it within 20 ms, then are tried again",
          "[shm][waiting][contention]") {
  std::thread fresh([] {  // the state is per thread: a new thread has none
    using namespace std::chrono_literals;
    const auto start = std::chrono::steady_clock::now();
    CHECK_FALSE(shm::detail::yields_lose_the_core(start));
    // One costly yield alone is an interruption, not a busy thread; two
    // more than 20 ms apart too.
    shm::detail::remember_costly_yield(start);
    CHECK_FALSE(shm::detail::yields_lose_the_core(start + 1ms));
    shm::detail::remember_costly_yield(start + 30ms);
    CHECK_FALSE(shm::detail::yields_lose_the_core(start + 31ms));
    const auto t0 = start + 40ms;  // a second one within 20 ms of the last
    shm::detail::remember_costly_yield(t0);
    CHECK(shm::detail::yields_lose_the_core(t0 + 1ms));
    CHECK(shm::detail::yields_lose_the_core(t0 + 99ms));
    CHECK_FALSE(shm::detail::yields_lose_the_core(t0 + 101ms));
    CHECK(shm::detail::kLostCoreMemory == 100ms);
    CHECK(shm::detail::kLostCoreConfirmation == 20ms);
  });
  fresh.join();
}
