// mpi_promises MODE: one promise of the README per mode, checked by a program
// that runs unchanged under mpirun (MpiBackend) and under axon-launch (the
// shared-memory backend), so that both launchers are held to the same words.
// Every rank prints what failed; rank 0 ends with
// "mpi_promises MODE: N checks per rank, F failures" (tests match F = 0).
//
//   ring BYTES        each rank sends BYTES to the next rank, then receives
//                     from the previous one (completes with unlimited buffering)
//   threads ROUNDS    two threads all_reduce on two groups at once while a
//                     third sends and receives around a ring on the world
//   recv-timeout      rank 0 receives what nobody sends: Timeout naming the op
//                     and the peer within AXON_TIMEOUT (the test sets 1 s)
//   recv-size         rank 1 receives a message shorter and one longer than
//                     its buffer: InvalidArgument naming the sizes, pair and tag;
//                     the same on new_group({3, 2}), naming the job's ranks
//   collective-timeout  rank 1 skips a barrier: the others' Timeout names it
//   hung-peer         rank 1 stays alive 60 s without calling the barrier the
//                     others time out in; they return from main, and mpirun
//                     must end the job soon after (MPI_Finalize would wait for
//                     rank 1: after AXON_TIMEOUT they exit without it)
//   late-rank         rank 1 comes to an all_reduce 3 s late, after the
//                     others timed out (the test sets 2 s): it throws
//                     PeerFailure with their reason, and their next
//                     all_reduce throws PeerFailure
//   late-at-the-timeout  rank 1 waits in a recv while the others wait for it
//                     in an all_reduce, then calls it as they give up: it may
//                     finish that call or fail it, but its next fails at once
//   abort             rank 1 calls Backend::abort() and stays alive: every
//                     other rank's barrier (waiting for it) throws PeerFailure
//                     with rank 1's reason, not a Timeout after AXON_TIMEOUT
//                     (under MPI it did), and so does its next call, and
//                     rank 1's own, also on a subgroup (under MPI they
//                     waited out AXON_TIMEOUT)
//   abort-in-broadcast DIR  every rank loops over 64 MiB broadcasts from the
//                     last rank; rank 1's watchdog thread calls abort(): every
//                     other rank's loop ends with PeerFailure carrying rank
//                     1's reason, not a Timeout (on pretend nodes, a rank
//                     waiting in its node's arena for a node-mate whose
//                     cross-node wait gave up waited out AXON_TIMEOUT). The
//                     ranks then meet through files in DIR before exiting:
//                     under MPI, a rank whose broadcast was abandoned calls
//                     MPI_Abort at exit, which would kill the others before
//                     they print
//   exit-with-thread DIR  every rank's thread loops all_reduces on a group
//                     of its own; rank 0's main returns with its thread
//                     still at it: the others' loops end with PeerFailure
//                     naming rank 0's exit, and rank 0's with the reason
//                     (under MPI it crashed in a finalized MPI). Ranks 1..
//                     meet through files in DIR before exiting, as above
//   exit-with-static-world  every rank's World has static storage duration
//                     (made before the first call), and a detached thread
//                     loops all_reduces on its default group; main returns
//                     after 300 ms: each thread's loop ends with its own
//                     process's refusal ("this process is exiting") or a
//                     peer's exit (PeerFailure), and no process crashes in
//                     its World, destroyed at exit (under axon-launch rank 0
//                     did, 6 runs of 45). Each thread prints "[rank R] the
//                     static World's thread ended as promised" (or FAILED).
//                     `group`: the thread loops on a static ProcessGroup
//                     made after the first call; `retrying`: it calls again
//                     at once after every error
//   exit-with-waiting-thread  rank 0's thread waits in a recv nobody
//                     answers when its main returns: the exit ends that
//                     wait within two seconds (the test gives the job 30 s of its
//                     AXON_TIMEOUT=60; the exit waited the timeout out)
//   refused-on-one-rank  rank 1's all_gather is refused (its recv is one
//                     short); it goes on to the next all_gather: every rank
//                     gets a CollectiveMismatch saying the ranks are out of
//                     step, and no rank another step's data (it paired with
//                     the others' pending call, a review)
//   two-threads-one-group  on every rank a second thread is refused beside
//                     the first, inside the same all_reduce on one group:
//                     the next call fails on every rank, each mark naming its
//                     own rank (a review: refusals alike on every rank, only
//                     counted, kept the threads' data pairing crosswise)
//   init-twice        a second World::init() throws InvalidArgument
//   mismatch KIND     rank 0 calls one collective, the others another:
//                     CollectiveMismatch on every rank showing both sides.
//                     KIND: barrier-vs-all-reduce, count-0-vs-1, gather-roots,
//                     sizes (all_reduce of 100 vs 200 f32), large-sizes
//                     (100000 vs 200000 f32)
//   after-exit        an atexit handler registered before World::init() (so
//                     it runs after the library's own exit handling) calls an
//                     all_reduce: under mpirun, after MPI_Finalize, it throws
//                     InvalidArgument naming the op and why (Open MPI aborted
//                     the job from inside the call); under axon-launch it
//                     still completes. The handler prints what it got.
//   rank-order        all_reduce / reduce_scatter / reduce of random floats
//                     equal, bit for bit, the rank-order reduction of the
//                     library's kernels (what the shared-memory backend computes);
//                     and an all_reduce on a group of one hands its buffer back
//                     untouched, NaN payloads too, in both backends alike
#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <mpi.h>

#include "axonml/distributed.hpp"
#include "kernels/reduce.hpp"

using namespace axonml::distributed;

namespace {

int failures = 0;
int checks = 0;
int me = 0;

void expect(bool ok, const std::string& what) {
  ++checks;
  if (!ok) {
    ++failures;
    std::fprintf(stderr, "[rank %d] FAILED: %s\n", me, what.c_str());
  }
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

void ring(Backend& b, std::size_t bytes) {
  const int n = b.world_size(), r = b.rank();
  const std::size_t count = bytes / sizeof(std::int32_t);
  auto value = [](std::size_t i, int rank) { return static_cast<std::int32_t>(i * 7 + static_cast<std::size_t>(rank)); };
  std::vector<std::int32_t> out(count), in(count);
  for (std::size_t i = 0; i < count; ++i) out[i] = value(i, r);
  b.send(std::span<const std::int32_t>(out), (r + 1) % n, 3);
  out.assign(count, 0);  // send() has returned: the buffer is ours again
  b.recv(std::span<std::int32_t>(in), (r + n - 1) % n, 3);
  bool right = true;
  for (std::size_t i = 0; i < count; ++i) right = right && in[i] == value(i, (r + n - 1) % n);
  expect(right, "ring of " + std::to_string(bytes) + " bytes delivers the previous rank's data");
  b.barrier();
}

// Two threads run all_reduces at once, one on the world and one on a
// subgroup, while a third sends and receives around a ring on the world,
// beside the world's collectives (Backend's promises; under MPI they need
// MPI_THREAD_MULTIPLE, which review 9 found was only SERIALIZED). Every
// result is checked.
void threads(Backend& b, int rounds) {
  const int n = b.world_size(), r = b.rank();
  if (b.name() == "mpi") {
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    expect(level == MPI_THREAD_MULTIPLE, "MPI was started at MPI_THREAD_MULTIPLE (level " + std::to_string(level) + ")");
  }
  std::vector<int> everyone;
  for (int q = 0; q < n; ++q) everyone.push_back(q);
  auto subgroup = b.new_group(everyone);
  std::vector<int> wrong(3, 0);
  auto reduce_on = [&](Backend& group, int which) {
    for (int i = 0; i < rounds; ++i) {
      const std::size_t count = 1 + static_cast<std::size_t>((i * 37 + which * 11) % 3000);
      std::vector<double> v(count, static_cast<double>(r + i + which));
      group.all_reduce(std::span<double>(v), ReduceOp::Sum);
      const double want = static_cast<double>(n * (i + which)) + static_cast<double>(n * (n - 1) / 2);
      for (const double x : v) wrong[static_cast<std::size_t>(which)] += x != want;
    }
  };
  auto ring_on_world = [&] {
    for (int i = 0; i < rounds; ++i) {
      std::vector<std::int64_t> out(1 + static_cast<std::size_t>(i % 500), r * 1000 + i), in(out.size());
      b.send(std::span<const std::int64_t>(out), (r + 1) % n, 9);
      b.recv(std::span<std::int64_t>(in), (r + n - 1) % n, 9);
      for (const auto x : in) wrong[2] += x != ((r + n - 1) % n) * 1000 + i;
    }
  };
  std::string failed;
  auto guarded = [&](auto&& body) {
    return [&failed, body] {
      try {
        body();
      } catch (const std::exception& e) {
        failed = e.what();
      }
    };
  };
  std::thread t1(guarded([&] { reduce_on(b, 0); }));
  std::thread t2(guarded([&] { reduce_on(*subgroup, 1); }));
  std::thread t3(guarded(ring_on_world));
  t1.join();
  t2.join();
  t3.join();
  expect(failed.empty(), "the world's and a subgroup's all_reduces and a send/recv ring on the world, from three "
                         "threads at once: " + failed);
  expect(wrong[0] == 0 && wrong[1] == 0 && wrong[2] == 0,
         "... every element right (" + std::to_string(wrong[0]) + ", " + std::to_string(wrong[1]) + ", " +
             std::to_string(wrong[2]) + " wrong)");
  b.barrier();
}

void recv_timeout(Backend& b) {
  if (b.rank() == 0) {
    std::vector<float> four(4);
    const auto started = std::chrono::steady_clock::now();
    std::string error;
    try {
      b.recv(std::span<float>(four), 1, 5);
    } catch (const Timeout& e) {
      error = e.what();
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    std::printf("[rank 0] %s\n", error.c_str());
    expect(contains(error, "recv") && contains(error, "rank 1") && contains(error, "tag 5") &&
               contains(error, "AXON_TIMEOUT"),
           "recv from a rank that never sends throws Timeout naming op, peer and tag: '" + error + "'");
    expect(seconds < 30, "the Timeout comes after AXON_TIMEOUT, not never (" + std::to_string(seconds) + " s)");
  }
  b.barrier();
}

// A receive whose buffer is not the message's size throws InvalidArgument
// naming both sizes (shorter message) or that the message is longer, and
// the rank pair and tag, under both launchers. Rank 0 sends, rank 1 receives.
void recv_size(Backend& b) {
  if (b.rank() == 0) {
    std::vector<float> three(3, 1.0f), ten(10, 2.0f);
    b.send(std::span<const float>(three), 1, 4);
    b.send(std::span<const float>(ten), 1, 4);
    std::vector<float> floats{1.5f, 2.5f, 3.5f, 4.5f};
    std::vector<std::int32_t> ints{1, 2, 3, 4};
    b.send(std::span<const float>(floats), 1, 5);
    b.send(std::span<const std::int32_t>(ints), 1, 5);
  } else if (b.rank() == 1) {
    for (const char* which : {"shorter", "longer"}) {
      std::vector<float> buffer(10, -1.0f);
      std::string error;
      try {
        if (std::strcmp(which, "shorter") == 0) {
          b.recv(std::span<float>(buffer), 0, 4);   // 12 bytes into 40
        } else {
          b.recv(std::span<float>(buffer.data(), 3), 0, 4);  // 40 bytes into 12
        }
      } catch (const InvalidArgument& e) {
        error = e.what();
      } catch (const std::exception& e) {
        error = std::string("another exception: ") + e.what();
      }
      std::printf("[rank 1] %s\n", error.c_str());
      const std::string head = "recv on rank 1 from rank 0 with tag 4: the message has ";
      const bool named = std::strcmp(which, "shorter") == 0 ? error == head + "12 bytes but the buffer has 40"
                                                              : error == head + "40 bytes but the buffer has 12";
      expect(named, std::string("a ") + which + " message than the buffer throws InvalidArgument naming both sizes: '" +
                        error + "'");
      // Under MPI a receive posted with the buffer would have filled it.
      expect(std::all_of(buffer.begin(), buffer.end(), [](float x) { return x == -1.0f; }),
             std::string("a ") + which + " message than the buffer leaves the buffer untouched");
    }
    // Bits of another type, even as many bytes, are not handed over to be
    // read as ints; the failed receive takes the message, the next gets the next.
    std::vector<std::int32_t> ints(4);
    std::string error;
    try {
      b.recv(std::span<std::int32_t>(ints), 0, 5);
    } catch (const InvalidArgument& e) {
      error = e.what();
    }
    std::printf("[rank 1] %s\n", error.c_str());
    expect(error == "recv on rank 1 from rank 0 with tag 5: the message has 16 bytes of f32 but the buffer has "
                    "16 bytes of i32",
           "a message of another element type throws InvalidArgument naming both: '" + error + "'");
    // Under MPI the bits used to land in the buffer all the same (review 12).
    expect(ints == std::vector<std::int32_t>(4, 0), "a message of another element type leaves the buffer untouched");
    b.recv(std::span<std::int32_t>(ints), 0, 5);
    expect(ints == std::vector<std::int32_t>{1, 2, 3, 4}, "the receive after a type mismatch gets the next message");
  }
  b.barrier();
}

// The same on a subgroup numbered apart from the job: in new_group({3, 2})
// the job's rank 3 is the group's rank 0, and the message names job ranks,
// as every other message does (MpiBackend named the group's rank here), and
// the group.
void recv_size_in_subgroup(Backend& b) {
  if (b.world_size() < 4) return;
  const std::vector<int> members{3, 2};
  auto pair = b.new_group(members);
  if (pair && pair->rank() == 0) {
    std::vector<float> three(3, 1.0f);
    pair->send(std::span<const float>(three), 1, 4);
  } else if (pair) {
    std::vector<float> buffer(10);
    std::string error;
    try {
      pair->recv(std::span<float>(buffer), 0, 4);
    } catch (const InvalidArgument& e) {
      error = e.what();
    }
    std::printf("[rank %d] %s\n", me, error.c_str());
    expect(error == "recv on rank 2 from rank 3 with tag 4 in group [3, 2]: the message has 12 bytes but the buffer has 40",
           "a short message on new_group({3, 2}) names the job's ranks: '" + error + "'");
  }
  b.barrier();
}

// Rank 1 stays away from a barrier for `away` (collective-timeout: long
// enough for the others to give up; hung-peer: alive past their timeout and
// more, ending by itself should mpirun not end it).
void barrier_without_rank_1(Backend& b, std::chrono::milliseconds away) {
  if (b.rank() == 1) {
    std::this_thread::sleep_for(away);
    return;
  }
  std::string error;
  try {
    b.barrier();
  } catch (const PeerFailure& e) {
    // Timeout; or, in the shared-memory backend, where the first rank to
    // time out aborts the job, PeerFailure carrying that rank's Timeout.
    error = e.what();
  }
  if (b.rank() == 0) std::printf("[rank 0] %s\n", error.c_str());
  expect(contains(error, "barrier") && contains(error, "waiting for rank(s) 1") && contains(error, "AXON_TIMEOUT"),
         "a barrier that rank 1 skips throws Timeout naming it (or another rank's): '" + error + "'");
}

// A sum all_reduce of `v`: "no error", a PeerFailure's (Timeout included)
// message, or "not a PeerFailure: ..." for any other exception.
std::string all_reduce_error(Backend& b, std::vector<float>& v) {
  try {
    b.all_reduce(std::span<float>(v), ReduceOp::Sum);
  } catch (const PeerFailure& e) {
    return e.what();
  } catch (const std::exception& e) {
    return "not a PeerFailure: " + std::string(e.what());
  }
  return "no error";
}

// Rank 1 comes to an all_reduce `away` after the others, which give it up
// after AXON_TIMEOUT: it must fail with their reason rather than finish a
// call they abandoned, and their group's next collective is a PeerFailure
// (under MPI it was a CollectiveMismatch, and rank 1 finished the call).
void late_rank(Backend& b, std::chrono::milliseconds away) {
  std::vector<float> v(4, static_cast<float>(b.rank() + 1));
  auto error_of = [&] { return all_reduce_error(b, v); };
  if (b.rank() == 1) {
    std::this_thread::sleep_for(away);
    const std::string error = error_of();
    std::printf("[rank 1] %s\n", error.c_str());
    // "rank 1: job aborted: rank 2: timed out ...: all_reduce(f32, 4, sum)
    // call #1 ...", or, where MPI's notice was seen at the call's entry,
    // "rank 1: all_reduce(f32, 4, sum) in group [...]: job aborted: rank 2:
    // timed out ..." (there it named only "all_reduce"; the MPI review).
    expect((contains(error, "rank 1: job aborted: rank ") ||
            contains(error, "rank 1: all_reduce(f32, 4, sum) in group ")) &&
               contains(error, ": job aborted: rank ") && contains(error, "timed out") &&
               contains(error, "all_reduce(f32, 4, sum)"),
           "a rank late to an all_reduce the others gave up throws PeerFailure with their reason: '" + error + "'");
    return;
  }
  const std::string first = error_of();
  expect(contains(first, "waiting for rank(s) 1"), "the all_reduce rank 1 is late to times out naming it: '" + first + "'");
  const std::string second = error_of();
  expect(second != "no error" && !contains(second, "not a PeerFailure"),
         "after the timeout the group's next all_reduce throws PeerFailure: '" + second + "'");
}

// Rank 1 waits in a recv nobody answers while the others wait for it in an
// all_reduce; both waits give up at about the same moment, and then rank 1
// calls the all_reduce. Arriving as the others give up, it may finish that
// call (with every rank's data, whose sum it then holds) or fail it; either
// way its next call must fail at once with the others' reason, not wait a
// timeout of its own (found by a review: under MPI it waited one out).
void late_at_the_timeout(Backend& b) {
  std::vector<float> v(4, static_cast<float>(b.rank() + 1));
  const float sum = static_cast<float>(b.world_size() * (b.world_size() + 1) / 2);
  auto error_of = [&] { return all_reduce_error(b, v); };
  if (b.rank() == 1) {
    std::vector<float> never(1);
    try {
      b.recv(std::span<float>(never), 0, 7);
    } catch (const PeerFailure&) {
    }
    const std::string first = error_of();
    std::printf("[rank 1] first: %s\n", first.c_str());
    expect(first == "no error" ? v == std::vector<float>(4, sum) : !contains(first, "not a PeerFailure"),
           "the all_reduce rank 1 came to as the others gave up finished with every rank's data or failed: '" + first +
               "'");
    const auto started = std::chrono::steady_clock::now();
    const std::string second = error_of();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    std::printf("[rank 1] second, after %.3f s: %s\n", seconds, second.c_str());
    expect(contains(second, "job aborted") && contains(second, "timed out"),
           "rank 1's next all_reduce throws PeerFailure with the others' reason: '" + second + "'");
    expect(seconds < 1.0, "... at once, not after a timeout of its own (AXON_TIMEOUT=2): " + std::to_string(seconds) +
                              " s");
    return;
  }
  const std::string first = error_of();
  expect(first != "no error" && !contains(first, "not a PeerFailure"),
         "the all_reduce rank 1 is late to fails: '" + first + "'");
}

// Backend::abort() "marks the whole job failed: every rank's current and
// future waits throw PeerFailure carrying `reason`", under either launcher
// (found by a review: under mpirun the others waited out AXON_TIMEOUT and
// then blamed rank 1 for never calling the barrier).
//
// Rank 1's own calls after it, also on a subgroup: under MPI each group has
// a backend of its own, and only the world's knew of the abort; a subgroup's
// all_reduce and recv waited out AXON_TIMEOUT (a review).
void abort_reaches_every_rank(Backend& b) {
  const std::vector<int> first_two{0, 1};
  const std::shared_ptr<Backend> pair = b.new_group(first_two);  // collective on the world: every rank makes it
  if (b.rank() == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    b.abort("rank 1 gives up on purpose");
    std::this_thread::sleep_for(std::chrono::seconds(3));  // alive, calling nothing
    // Each call in a thread of its own, given 5 s: one that waits out
    // AXON_TIMEOUT (60 s) would outlast the others, whose exit then ends
    // the job before this rank could say so.
    auto own_error = [&](const char* what, const std::function<void()>& call) {
      std::atomic<bool> done{false};
      std::string own = "no error";
      std::thread caller([&] {
        try {
          call();
        } catch (const PeerFailure& e) {
          own = e.what();
        } catch (const std::exception& e) {
          own = std::string("not a PeerFailure: ") + e.what();
        }
        done.store(true);
      });
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (!done.load() && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      if (!done.load()) {
        std::fprintf(stderr, "[rank 1] FAILED: rank 1's own %s after its abort() still waits after 5 s\n", what);
        std::fflush(nullptr);
        std::_Exit(1);
      }
      caller.join();
      expect(contains(own, "rank 1 gives up on purpose"),
             std::string("rank 1's own ") + what + " after its abort() throws PeerFailure with its reason: '" + own + "'");
    };
    std::vector<float> x(4, 1.0f);
    own_error("barrier", [&] { b.barrier(); });
    own_error("all_reduce on the subgroup [0, 1]", [&] { pair->all_reduce(std::span<float>(x), ReduceOp::Sum); });
    own_error("recv on the subgroup [0, 1]", [&] { pair->recv(std::span<float>(x), 0, 1); });
    return;
  }
  auto error_of = [&] {
    try {
      b.barrier();
    } catch (const PeerFailure& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const auto started = std::chrono::steady_clock::now();
  const std::string current = error_of();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const std::string next = error_of();
  if (b.rank() == 0) std::printf("[rank 0] after %.2f s: %s\n[rank 0] next: %s\n", seconds, current.c_str(), next.c_str());
  expect(contains(current, "job aborted: rank 1 aborted: rank 1 gives up on purpose") && !contains(current, "timed out"),
         "a barrier waiting for rank 1 when it aborts throws PeerFailure with its reason: '" + current + "'");
  expect(contains(next, "rank 1 aborted: rank 1 gives up on purpose"),
         "the next call throws PeerFailure with rank 1's reason: '" + next + "'");
  // Under MPI the next call sees the notice at its entry, where it named
  // only "barrier on rank R" (the MPI review): now the call and its group.
  const std::string entry = "rank " + std::to_string(b.rank()) + ": barrier() in group [";
  expect(b.name() != "mpi" || contains(next, entry),
         "under MPI the next call's error names the call and its group ('" + entry + "...'): '" + next + "'");
}

// The job's own name for the files of meet_through_files(): rank 0's
// random number, broadcast while the job is well.
std::uint64_t job_token(Backend& b) {
  std::int64_t token = b.rank() == 0 ? static_cast<std::int64_t>(std::random_device()() >> 1) << 32 | std::random_device()() : 0;
  b.broadcast(std::span<std::int64_t>(&token, 1), 0);
  return static_cast<std::uint64_t>(token);
}

// Each rank leaves a file "<dir>/mpi_promises.<token>.<rank>" and waits (up
// to 60 s) until every rank's is there: no collective, for a job that has
// been aborted.
void meet_through_files(const std::string& dir, std::uint64_t token, int rank, int size) {
  auto name = [&](int r) { return dir + "/mpi_promises." + std::to_string(token) + "." + std::to_string(r); };
  std::fclose(std::fopen(name(rank).c_str(), "w"));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (int r = 0; r < size && std::chrono::steady_clock::now() < deadline;) {
    if (std::FILE* f = std::fopen(name(r).c_str(), "r")) {
      std::fclose(f);
      ++r;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
}

// Whether every "rank R aborted: TEXT" in `error` is rank 1's abort() or rank
// R relaying its own error (TEXT starts "rank R:"). A node arena once named
// its ranks by their number on the node: "rank 1 aborted: rank 2: ..." was
// the job's rank 2 passing on its error (a review).
bool abort_relays_name_their_rank(const std::string& error) {
  const std::string marker = " aborted: ";
  for (std::size_t at = error.find(marker); at != std::string::npos; at = error.find(marker, at + 1)) {
    const std::size_t digits_end = at;
    std::size_t digits_begin = digits_end;
    while (digits_begin > 0 && std::isdigit(static_cast<unsigned char>(error[digits_begin - 1]))) --digits_begin;
    if (digits_begin == digits_end || digits_begin < 5 || error.compare(digits_begin - 5, 5, "rank ") != 0) {
      continue;  // "job aborted: ", as every receiver says
    }
    const std::string rank = error.substr(digits_begin, digits_end - digits_begin);
    const std::string text = error.substr(at + marker.size());
    if (rank == "1" && text.rfind("rank 1's watchdog gives up", 0) == 0) continue;
    if (text.rfind("rank " + rank + ":", 0) != 0) return false;
  }
  return true;
}

void abort_in_broadcast(Backend& b) {
  std::thread watchdog;
  if (b.rank() == 1) {
    watchdog = std::thread([&b] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      b.abort("rank 1's watchdog gives up");
    });
  }
  // Large: each call spends long in the cross-node step, where the node's
  // other rank waits in the node arena.
  std::vector<float> v(std::size_t{1} << 24, 1.0f);
  std::string error = "no error";
  try {
    for (int i = 0; i < 100000; ++i) b.broadcast(std::span<float>(v), b.world_size() - 1);
  } catch (const PeerFailure& e) {
    error = e.what();
  }
  if (watchdog.joinable()) watchdog.join();
  if (b.rank() == 1) return;  // its own loop ends however its abort found it
  std::printf("[rank %d] %s\n", b.rank(), error.c_str());
  expect(contains(error, "rank 1's watchdog gives up") && !contains(error, "timed out"),
         "a broadcast loop ends with PeerFailure carrying rank 1's reason: '" + error + "'");
  expect(abort_relays_name_their_rank(error),
         "every 'rank R aborted: ' in the error is rank 1's own abort or rank R passing on its own error: '" + error + "'");
}

// What a thread looping all_reduces on `group` ended with ("no error" if it
// never did), the sums checked on the way. Small (inline under MPI) and
// 256 KiB calls alternate, so that exit finds the thread inside a wait too.
std::string loop_all_reduces_until_an_error(Backend& group, int rank) {
  try {
    for (long i = 0; i < 10'000'000; ++i) {
      std::vector<float> v(i % 2 == 0 ? 1000 : 65536, 1.0f);
      group.all_reduce(std::span<float>(v), ReduceOp::Sum);
      if (v.front() != static_cast<float>(group.world_size()) || v.back() != v.front()) {
        std::printf("[rank %d] FAILED: all_reduce %ld gave %g, %g\n", rank, i, v.front(), v.back());
        std::fflush(stdout);
      }
    }
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

// Rank 0's main returns while its thread is in, or between, all_reduces
// with the others' threads.
void exit_with_thread(Backend& b, const std::string& dir, std::uint64_t token) {
  std::vector<int> everyone;
  for (int q = 0; q < b.world_size(); ++q) everyone.push_back(q);
  const std::shared_ptr<Backend> group = b.new_group(everyone);
  const int rank = b.rank();
  auto error = std::make_shared<std::string>();
  std::thread loop([group, rank, error] {
    *error = loop_all_reduces_until_an_error(*group, rank);
    std::printf("[rank %d] the thread's loop ended with: %s\n", rank, error->c_str());
    // Rank 0 may be gone before this prints; the others' checks decide.
    if (rank == 0 && error->find("this process is exiting") == std::string::npos &&
        error->find("job aborted") == std::string::npos) {
      std::printf("[rank 0] FAILED: rank 0's loop ended with neither its exit nor the job's abort\n");
    }
    std::fflush(stdout);
    // The thread's copy of the group goes when it ends: a little later, so
    // that on rank 0 it goes while the exit meets the others or finalizes
    // MPI (freeing its communicators during MPI_Finalize could crash; they
    // now wait for it or are left to it: mpi::finalize_mutex).
    if (rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(std::random_device()() % 8));
  });
  if (rank == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    loop.detach();
    std::fclose(std::fopen((dir + "/mpi_promises." + std::to_string(token) + ".0").c_str(), "w"));
    return;  // main returns with the thread still looping
  }
  loop.join();
  // MPI: "job aborted: rank 0 is exiting (its main returned, ...) while a
  // thread of it still called all_reduce in group [...]"; shared memory:
  // "rank 0 exited (status 0) while this rank still waited for it", or
  // "job aborted: " and that as another rank saw it.
  // Or rank 0's own wait, ended by its exit and relayed: "job aborted: rank
  // 0: all_reduce(...) ...: this process is exiting (its main returned, ...".
  expect(contains(*error, "rank 0") &&
             (contains(*error, "exiting (its main returned") || contains(*error, "rank 0 exited (status 0)")),
         "a loop of all_reduces with a rank whose main returned with its thread still looping ends with "
         "PeerFailure naming that exit: '" + *error + "'");
}

// The reviewer's program, on every rank: `static World w = World::init();`
// (here a function's static, made before the first call and destroyed at
// exit all the same), a detached thread looping all_reduces on its default
// group (by reference: nothing but the static keeps the backend alive), and
// main returning after 300 ms. The thread's calls are of 1 and 4 MiB of
// 1.0s under Max, whose result needs no refill: it spends a few hundred
// microseconds in each (in waits too) and next to nothing between them. A
// thread between calls as the exit begins is not covered (README): with
// calls of 4 KB and 256 KiB, about 1 job in 100 here had one (a crash in
// the destroyed World).
// Its verdict is its own line: its loop ends during this process's exit.
//
// Variants (shared memory only; a review found each crashing): `group`: the
// thread loops on a static ProcessGroup of every rank, made by new_group
// after the first call (so destroyed before the exit's steps; it is kept,
// not freed, while a call is in it); `retrying`: the thread catches every
// error and calls again at once, 4 KiB calls, past the exit's steps (the
// exit keeps the World alive: its calls are refused until the process ends).
int exit_with_static_world(const std::string& variant) {
  static World w = World::init();
  me = w.rank();
  Backend* target = &w.default_group().backend();
  if (variant == "group") {
    static ProcessGroup g = w.new_group(w.default_group().ranks());
    target = &g.backend();
  }
  std::thread([rank = me, variant, target] {
    std::string error = "no error";
    Backend& group = *target;
    auto verdict = [&] {
      // Its own refusal or ended wait ("...: this process is exiting (its
      // main returned, ..."); or a peer's: "job aborted: rank R is exiting
      // (its main returned, ...) while a thread of it still called ...";
      // or, where that peer's thread was between calls as its exit began
      // (README: nothing refuses it; its process ends), the peer's exit as
      // shared memory saw it: "rank R exited (status 0) while ...".
      const bool as_promised = contains(error, "this process is exiting (its main returned") ||
                               (contains(error, "job aborted: rank ") && contains(error, " is exiting (its main returned")) ||
                               contains(error, " exited (status 0) while ");
      std::printf("[rank %d] the static World's thread's loop ended with: %s\n", rank, error.c_str());
      std::printf(as_promised ? "[rank %d] the static World's thread ended as promised\n"
                              : "[rank %d] FAILED: the static World's thread ended with neither its exit's refusal "
                                "nor a peer's exit\n",
                  rank);
      std::fflush(stdout);
    };
    if (variant == "retrying") {
      std::vector<float> v(1024, 1.0f);
      for (bool told = false;;) {
        try {
          group.all_reduce(std::span<float>(v), ReduceOp::Max);
        } catch (const std::exception& e) {
          if (!told) error = e.what(), verdict(), told = true;
        }
      }
    }
    try {
      std::vector<float> small(std::size_t{1} << 18, 1.0f);
      std::vector<float> large(std::size_t{1} << 20, 1.0f);
      for (long i = 0; i < 100'000'000; ++i) {
        std::vector<float>& v = i % 2 == 0 ? small : large;
        group.all_reduce(std::span<float>(v), ReduceOp::Max);
        if (v.front() != 1.0f || v.back() != 1.0f) {
          std::printf("[rank %d] FAILED: all_reduce %ld gave %g, %g\n", rank, i, v.front(), v.back());
          std::fflush(stdout);
        }
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
    verdict();
  }).detach();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  if (me == 0) {
    std::printf("mpi_promises exit-with-static-world: main returns\n");
    std::fflush(stdout);
  }
  return 0;
}

// Every rank runs 20 barriers and 20 checked all_reduces; rank 1 then
// returns status 1 (main does), having done its part in all of them. Under
// MPI its exit's abort notice could overtake its last messages, and the
// others threw PeerFailure from a last call rank 1 had finished (a review:
// 2-3 runs in 8). The others must finish every call. No tally: a call after
// rank 1's exit fails, as promised; each rank prints its own failures.
void exit_nonzero_after_its_part(Backend& b) {
  const int n = b.world_size();
  std::string error = "no error";
  int wrong = 0;
  try {
    for (int i = 0; i < 20; ++i) b.barrier();
    for (int i = 0; i < 20; ++i) {
      std::vector<float> v(3, static_cast<float>(b.rank() + i));
      b.all_reduce(std::span<float>(v), ReduceOp::Sum);
      const float expected = static_cast<float>(n * (n - 1) / 2 + n * i);
      for (float x : v) wrong += x != expected;
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  expect(error == "no error" && wrong == 0,
         "every call rank 1 took part in before it exited with status 1 finishes, with the right sums (" +
             std::to_string(wrong) + " wrong): " + error);
}

void exit_with_waiting_thread(std::shared_ptr<Backend> b) {
  if (b->rank() != 0) return;
  std::thread waiting([b] {  // a copy: the World in main goes before the thread's wait ends
    std::vector<float> never(4);
    try {
      b->recv(std::span<float>(never), 1, 99);
    } catch (const std::exception& e) {
      std::printf("[rank 0] the thread's recv ended with: %s\n", e.what());
      std::fflush(stdout);
    }
  });
  waiting.detach();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
}

void refused_on_one_rank(Backend& b) {
  const int n = b.world_size(), r = b.rank();
  auto group = b.new_group([&] {
    std::vector<int> all;
    for (int q = 0; q < n; ++q) all.push_back(q);
    return all;
  }());
  for (int step = 1; step <= 2; ++step) {
    std::vector<float> send(2, static_cast<float>(100 * step + r));
    std::vector<float> recv(static_cast<std::size_t>(2 * n - (r == 1 && step == 1 ? 1 : 0)), -1.0f);
    std::string error = "no error";
    try {
      group->all_gather<float>(send, recv);
    } catch (const std::exception& e) {
      error = e.what();
    }
    if (r == 1 && step == 1) {
      expect(contains(error, "recv has " + std::to_string(2 * n - 1) + " elements"),
             "rank 1's all_gather with a short recv is refused: '" + error + "'");
      continue;
    }
    if (r != 1 && step == 2) continue;  // the group broke at step 1
    if (r == 0) std::printf("[rank 0] %s\n", error.c_str());
    expect(contains(error, "collective mismatch") && contains(error, "out of step") &&
               contains(error, r == 1 ? "this rank has made 1 more collective" : "rank 1 has made 1 more collective"),
           "rank 1's next all_gather and the others' pending one are a mismatch saying the ranks are out of step: '" +
               error + "'");
    expect(recv == std::vector<float>(recv.size(), -1.0f), "no rank got another step's data");
  }
}

// Every rank's second thread is refused beside its first, inside the same
// 16 MB all_reduce on one group: the rank's next call on the group fails on
// every rank, each mark naming its own rank. (Refusals alike on every rank,
// only counted, kept the ranks in step and the threads' data pairing
// crosswise, a review.) The second thread calls count_refused_collective()
// once the first is seen inside: refused then; had the first already come
// out, it only counts, the ranks find themselves out of step, and the
// attempt is tried again on a fresh group.
void two_threads_one_group(Backend& b) {
  const int n = b.world_size(), r = b.rank();
  std::vector<int> all;
  for (int q = 0; q < n; ++q) all.push_back(q);
  for (int attempt = 0; attempt < 10; ++attempt) {
    auto group = b.new_group(all);
    std::atomic<bool> started{false}, finished{false};
    std::thread first([&] {
      std::vector<float> big(std::size_t{4} << 20, 1.0f);
      started = true;
      for (;;) {  // refused only if the probe below held the group at that instant: then it counted
        std::string error;
        try {
          group->all_reduce<float>(big, ReduceOp::Sum);
        } catch (const std::exception& e) {
          error = e.what();
        }
        if (!contains(error, "holds this group's collectives: probe")) break;
      }
      finished = true;
    });
    while (!started.load()) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // the first thread claims the group meanwhile
    const auto me = std::this_thread::get_id();
    bool inside = false;
    while (!inside && !finished.load()) {
      try {
        group->hold_collectives_for(me, "probe");
        group->release_collectives(me);
      } catch (const InvalidArgument&) {
        inside = true;
      }
    }
    int refused = 0;
    if (inside) {
      try {
        group->count_refused_collective();
      } catch (const InvalidArgument&) {
        refused = 1;
      }
    }
    first.join();
    b.all_reduce(std::span<int>(&refused, 1), ReduceOp::Sum);
    std::string error = "no error";
    try {
      std::vector<float> data(4, 1.0f);
      group->all_reduce<float>(data, ReduceOp::Sum);
    } catch (const std::exception& e) {
      error = e.what();
    }
    if (refused != n) continue;
    const std::string own = "rank " + std::to_string(r) + ": all_reduce(f32, 4, sum) after another thread's call "
                            "on this group was refused on rank " + std::to_string(r);
    const std::string peer = "after another thread's call on this group was refused on rank " +
                             std::to_string(r == 0 ? 1 : 0) + " ";
    expect(contains(error, "collective mismatch") && contains(error, own) && contains(error, peer),
           "every rank refused beside the same call: the next call fails, naming this rank's refusal and a peer's: '" +
               error + "'");
    return;
  }
  expect(false, "in 10 attempts every rank's second thread was never refused beside its first: nothing was tested");
}

// World::init() attaches a process once, under either launcher.
// alloc_shared: a tensor in the arena under axon-launch; under mpirun, whose
// backend has no shared memory, an error that says so rather than naming
// axon-launch's --arena-mb as if the arena had run out.
void alloc_shared(const World& world) {
  const ProcessGroup& group = world.default_group();
  std::string error;
  try {
    Tensor t = group.alloc_shared({16});
    t.data()[0] = 1.0f;
    group.all_reduce_tensor(t, ReduceOp::Sum);
    expect(t.data()[0] == static_cast<float>(world.world_size()), "an all_reduce of an alloc_shared tensor sums");
  } catch (const InvalidArgument& e) {
    error = e.what();
  }
  if (world.backend().name() == "mpi") {
    expect(contains(error, "alloc_shared on rank " + std::to_string(me) + " of group [") &&
               contains(error, "the mpi backend has no shared memory to place 64 bytes in") &&
               !contains(error, "--arena-mb"),
           "alloc_shared under mpirun says the backend has no shared memory: '" + error + "'");
  } else {
    expect(error.empty(), "alloc_shared under axon-launch gives a tensor: '" + error + "'");
  }
}

void init_twice() {
  std::string error;
  try {
    World again = World::init();
  } catch (const InvalidArgument& e) {
    error = e.what();
  }
  expect(contains(error, "rank " + std::to_string(me)) && contains(error, "World::init()") &&
             contains(error, "already called"),
         "a second World::init() throws InvalidArgument naming the rank: '" + error + "'");
}

void mismatch(Backend& b, const std::string& kind) {
  const int n = b.world_size(), r = b.rank();
  std::string mine, theirs;  // rank 0's call and the others'
  std::string error;
  try {
    if (kind == "barrier-vs-all-reduce") {
      mine = "barrier()", theirs = "all_reduce(f32, 4, sum)";
      std::vector<float> v(4, 1.0f);
      if (r == 0) b.barrier(); else b.all_reduce(std::span<float>(v), ReduceOp::Sum);
    } else if (kind == "count-0-vs-1") {
      mine = "all_reduce(f32, 0, sum)", theirs = "all_reduce(f32, 1, sum)";
      std::vector<float> v(r == 0 ? 0 : 1, 1.0f);
      b.all_reduce(std::span<float>(v), ReduceOp::Sum);
    } else if (kind == "gather-roots") {
      mine = "gather(f32, 4, root 0)", theirs = "gather(f32, 4, root 1)";
      const int root = r == 0 ? 0 : 1;
      std::vector<float> v(4, 1.0f), all(r == root ? 4 * static_cast<std::size_t>(n) : 0);
      b.gather(std::span<const float>(v), std::span<float>(all), root);
    } else if (kind == "sizes" || kind == "large-sizes") {
      const std::size_t base = kind == "sizes" ? 100 : 100000;
      mine = "all_reduce(f32, " + std::to_string(base) + ", sum)";
      theirs = "all_reduce(f32, " + std::to_string(2 * base) + ", sum)";
      std::vector<float> v(r == 0 ? base : 2 * base, 1.0f);
      b.all_reduce(std::span<float>(v), ReduceOp::Sum);
    } else {
      expect(false, "unknown mismatch kind " + kind);
      return;
    }
  } catch (const CollectiveMismatch& e) {
    error = e.what();
  }
  const std::string both = r == 0 ? "rank 0: " + mine + " vs rank 1: " + theirs
                                   : "rank " + std::to_string(r) + ": " + theirs + " vs rank 0: " + mine;
  if (r <= 1) std::printf("[rank %d] %s\n", r, error.c_str());
  expect(contains(error, both), "mismatch " + kind + " throws CollectiveMismatch with '" + both + "': '" + error + "'");
}

template <typename T> std::vector<T> random_values(int rank, std::size_t count, unsigned salt) {
  std::mt19937 random(static_cast<unsigned>(rank) * 7919u + salt);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  std::vector<T> v(count);
  for (auto& x : v) x = static_cast<T>(uniform(random) * (1 + (random() % 1000)));
  return v;
}

template <typename T> std::vector<T> rank_order(int n, std::size_t count, unsigned salt, ReduceOp op) {
  std::vector<std::vector<T>> all;
  std::vector<const std::byte*> sources;
  for (int q = 0; q < n; ++q) all.push_back(random_values<T>(q, count, salt));
  for (const auto& v : all) sources.push_back(reinterpret_cast<const std::byte*>(v.data()));
  std::vector<T> out(count);
  if (count > 0) kernels::reduce(data_type_v<T>, op, sources, reinterpret_cast<std::byte*>(out.data()), count);
  return out;
}

template <typename T> bool same_bits(const std::vector<T>& a, const T* b, std::size_t count) {
  return a.size() == count && (count == 0 || std::memcmp(a.data(), b, count * sizeof(T)) == 0);
}

// Every rank, in turn, makes a group of itself alone (new_group is collective
// over the world) and all-reduces NaNs with payloads and a signalling NaN in it.
void group_of_one_untouched(Backend& b) {
  const std::vector<std::uint32_t> bits{0xffc12345u, 0x7f800001u, 0x3f800000u, 0x7fc00001u};
  for (int q = 0; q < b.world_size(); ++q) {
    auto alone = b.new_group(std::vector<int>{q});
    if (q != me) continue;
    for (const ReduceOp op : {ReduceOp::Sum, ReduceOp::Product, ReduceOp::Average, ReduceOp::Min, ReduceOp::Max}) {
      std::vector<float> data(bits.size());
      std::memcpy(data.data(), bits.data(), bits.size() * sizeof(float));
      alone->all_reduce(std::span<float>(data), op);
      expect(std::memcmp(data.data(), bits.data(), bits.size() * sizeof(float)) == 0,
             "all_reduce (" + std::string(to_string(op)) + ") on a group of one leaves its buffer's bits as they were");
      // reduce and reduce_scatter likewise, out of place and in place.
      std::vector<float> recv(bits.size(), 0.0f);
      alone->reduce<float>(data, recv, 0, op);
      expect(std::memcmp(recv.data(), bits.data(), bits.size() * sizeof(float)) == 0,
             "reduce (" + std::string(to_string(op)) + ") on a group of one gives its input's bits");
      std::fill(recv.begin(), recv.end(), 0.0f);
      alone->reduce_scatter<float>(data, recv, op);
      expect(std::memcmp(recv.data(), bits.data(), bits.size() * sizeof(float)) == 0,
             "reduce_scatter (" + std::string(to_string(op)) + ") on a group of one gives its input's bits");
      alone->reduce<float>(data, data, 0, op);
      alone->reduce_scatter<float>(data, data, op);
      expect(std::memcmp(data.data(), bits.data(), bits.size() * sizeof(float)) == 0,
             "reduce and reduce_scatter (" + std::string(to_string(op)) + ") in place on a group of one leave the bits");
    }
  }
}

template <typename T> void rank_order_type(Backend& b) {
  const int n = b.world_size(), r = b.rank();
  const std::string type(to_string(data_type_v<T>));
  unsigned salt = 0;
  // Around the inline limit (4 KiB) and well beyond it.
  for (const std::size_t count : {std::size_t{3}, std::size_t{1000}, std::size_t{1500}, std::size_t{100003}}) {
    for (const ReduceOp op : {ReduceOp::Sum, ReduceOp::Average}) {
      const std::string at = type + " count " + std::to_string(count) + " " + std::string(to_string(op));
      ++salt;
      auto data = random_values<T>(r, count, salt);
      b.all_reduce(std::span<T>(data), op);
      expect(same_bits(rank_order<T>(n, count, salt, op), data.data(), count),
             "all_reduce of random " + at + " equals the rank-order reduction bit for bit");

      ++salt;
      const auto send = random_values<T>(r, count * static_cast<std::size_t>(n), salt);
      std::vector<T> block(count);
      b.reduce_scatter(std::span<const T>(send), std::span<T>(block), op);
      const auto whole = rank_order<T>(n, count * static_cast<std::size_t>(n), salt, op);
      expect(same_bits(std::vector<T>(whole.begin() + static_cast<std::ptrdiff_t>(count) * r,
                                      whole.begin() + static_cast<std::ptrdiff_t>(count) * (r + 1)),
                       block.data(), count),
             "reduce_scatter of random " + at + " equals the rank-order reduction bit for bit");

      ++salt;
      const auto mine = random_values<T>(r, count, salt);
      std::vector<T> result(r == n - 1 ? count : 0);
      b.reduce(std::span<const T>(mine), std::span<T>(result), n - 1, op);
      if (r == n - 1) {
        expect(same_bits(rank_order<T>(n, count, salt, op), result.data(), count),
               "reduce of random " + at + " equals the rank-order reduction bit for bit");
      }
    }
  }
}

std::shared_ptr<Backend> after_exit_backend;

void all_reduce_after_exit() {
  try {
    int one = 1;
    after_exit_backend->all_reduce(std::span<int>(&one, 1), ReduceOp::Sum);
    std::printf("[rank %d] after exit: all_reduce completed: %d\n", me, one);
  } catch (const InvalidArgument& e) {
    std::printf("[rank %d] after exit: InvalidArgument: %s\n", me, e.what());
  } catch (const std::exception& e) {
    std::printf("[rank %d] after exit: another exception: %s\n", me, e.what());
  }
  std::fflush(stdout);
  after_exit_backend.reset();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const std::string arg = argc > 2 ? argv[2] : "";
  if (mode == "after-exit") std::atexit(all_reduce_after_exit);  // before the library's own
  if (mode == "exit-with-static-world") {  // a World of its own, static
    try {
      return exit_with_static_world(arg.empty() ? "world" : arg);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "[rank %d] error: %s\n", me, e.what());
      return 2;
    }
  }
  try {
    World world = World::init();
    me = world.rank();
    Backend& b = world.backend();
    std::vector<int> everyone;
    for (int q = 0; q < world.world_size(); ++q) everyone.push_back(q);
    // A group of its own for the tally: the modes may leave the world unusable.
    auto tally = b.new_group(everyone);
    std::uint64_t token = 0;  // abort-in-broadcast's
    if (mode == "ring") {
      ring(b, std::stoul(arg));
    } else if (mode == "threads") {
      threads(b, std::stoi(arg));
    } else if (mode == "recv-timeout") {
      recv_timeout(b);
    } else if (mode == "recv-size") {
      recv_size(b);
      recv_size_in_subgroup(b);
    } else if (mode == "collective-timeout") {
      barrier_without_rank_1(b, std::chrono::milliseconds(2500));
    } else if (mode == "hung-peer") {
      barrier_without_rank_1(b, std::chrono::seconds(60));
    } else if (mode == "late-rank") {
      late_rank(b, std::chrono::milliseconds(3000));
    } else if (mode == "late-at-the-timeout") {
      late_at_the_timeout(b);
    } else if (mode == "abort") {
      abort_reaches_every_rank(b);
    } else if (mode == "abort-in-broadcast") {
      token = job_token(b);
      abort_in_broadcast(b);
    } else if (mode == "exit-with-thread") {
      token = job_token(b);
      exit_with_thread(b, arg, token);
    } else if (mode == "exit-with-waiting-thread") {
      exit_with_waiting_thread(world.default_group().backend_ptr());
    } else if (mode == "exit-nonzero-after-its-part") {
      exit_nonzero_after_its_part(b);
      if (me == 1) return 1;
    } else if (mode == "refused-on-one-rank") {
      refused_on_one_rank(b);
    } else if (mode == "two-threads-one-group") {
      two_threads_one_group(b);
    } else if (mode == "init-twice") {
      init_twice();
    } else if (mode == "alloc-shared") {
      alloc_shared(world);
    } else if (mode == "mismatch") {
      mismatch(b, arg);
    } else if (mode == "after-exit") {
      after_exit_backend = world.default_group().backend_ptr();
    } else if (mode == "rank-order") {
      rank_order_type<float>(b);
      rank_order_type<double>(b);
      group_of_one_untouched(b);
    } else {
      std::fprintf(stderr, "usage: mpi_promises ring BYTES | threads ROUNDS | recv-timeout | recv-size | collective-timeout | hung-peer | "
                           "abort | abort-in-broadcast DIR | exit-with-thread DIR | exit-with-static-world [group|retrying] | exit-with-waiting-thread | exit-nonzero-after-its-part | refused-on-one-rank | two-threads-one-group | late-rank | late-at-the-timeout | init-twice | alloc-shared | mismatch KIND | after-exit | rank-order\n");
      return 2;
    }
    int total = failures;
    // Under axon-launch a timeout aborts the whole job, the tally's group too.
    const bool job_aborted = mode == "collective-timeout" || mode == "hung-peer" || mode == "abort" ||
                             mode == "abort-in-broadcast" || mode == "exit-with-thread" ||
                             mode == "exit-nonzero-after-its-part" ||
                             ((mode == "late-rank" || mode == "late-at-the-timeout") && b.name() != "mpi");
    if (!job_aborted) {
      tally->all_reduce(std::span<int>(&total, 1), ReduceOp::Sum);
    }
    if (me == 0) {
      std::printf("mpi_promises %s%s%s: %d checks per rank, %d failures\n", mode.c_str(), arg.empty() ? "" : " ",
                  arg.c_str(), checks, total);
      std::fflush(stdout);
    }
    if (mode == "abort-in-broadcast" || (mode == "exit-with-thread" && me != 0)) {
      meet_through_files(arg, token, me, world.world_size());
    }
    return total == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] error: %s\n", me, e.what());
    return 2;
  }
}
