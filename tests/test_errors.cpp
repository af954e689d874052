// Bad input and disagreeing ranks become clear errors, never hangs or
// corrupt data. Each case checks the message names what was wrong.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "base/collective_op.hpp"
#include "base/text.hpp"
#include "shm/arena_layout.hpp"
#include "support/run_ranks.hpp"

using namespace axonml::distributed;
using axon_test::PerRank;
using axon_test::error_of;
using axon_test::run_ranks;
using Catch::Matchers::Contains;

TEST_CASE("an invalid root names the op and the valid range", "[errors]") {
  auto world = MockBackend::create_world(1);
  std::vector<float> data(4);
  REQUIRE_THROWS_MATCHES(world[0]->broadcast(data, 9), InvalidArgument,
                         Catch::Matchers::Message("broadcast on rank 0 of 1: invalid src 9 (src should be in the 0..0 range)"));
  std::vector<float> recv(4);
  REQUIRE_THROWS_WITH(world[0]->reduce<float>(data, recv, -1, ReduceOp::Sum), Contains("reduce") && Contains("invalid dst -1"));
  REQUIRE_THROWS_WITH(world[0]->gather<float>(data, recv, 1), Contains("gather") && Contains("invalid dst 1"));
  REQUIRE_THROWS_WITH(world[0]->scatter<float>(data, recv, 2), Contains("scatter") && Contains("invalid src 2"));
  REQUIRE_THROWS_WITH(world[0]->send<float>(data, 1), Contains("send") && Contains("invalid dst 1"));
  REQUIRE_THROWS_WITH(world[0]->recv<float>(data, 5), Contains("recv") && Contains("invalid src 5"));
  REQUIRE_THROWS_WITH(world[0]->send<float>(data, 0, -3), Contains("invalid tag -3"));
}

TEST_CASE("an argument error on a subgroup names the group and the rank in the job", "[errors][groups]") {
  // "broadcast on rank 0: invalid src 5" on job rank 2 of a group [2, 1]
  // named neither (found by a review).
  run_ranks(3, [](std::shared_ptr<Backend> b, int r) {
    const std::vector<int> members{2, 1};
    auto group = b->new_group(members);
    if (r == 0) return;
    std::vector<float> data(4);
    const int in_group = r == 2 ? 0 : 1;
    RANK_REQUIRE(error_of([&] { group->broadcast<float>(data, 5); }) ==
                 "broadcast on rank " + std::to_string(in_group) + " of 2 in group [2, 1] (rank " + std::to_string(r) +
                     " of the job): invalid src 5 (src should be in the 0..1 range)");
    // The world says nothing of groups.
    RANK_REQUIRE(error_of([&] { b->broadcast<float>(data, 5); }) ==
                 "broadcast on rank " + std::to_string(r) + " of 3: invalid src 5 (src should be in the 0..2 range)");
  });
}

TEST_CASE("a buffer of elements at a null pointer is refused, naming the op and the count", "[errors]") {
  // It used to crash the rank with SIGSEGV (found by a review).
  run_ranks(2, [](std::shared_ptr<Backend> b, int r) {
    std::vector<float> some(8);
    const std::span<float> none(static_cast<float*>(nullptr), 8);
    RANK_REQUIRE(error_of([&] { b->all_reduce<float>(none, ReduceOp::Sum); }) ==
                 "all_reduce on rank " + std::to_string(r) + " of 2: data has 8 elements at a null pointer (a span of no memory)");
    RANK_REQUIRE_THAT(error_of([&] { b->broadcast<float>(none, 0); }), Contains("broadcast") && Contains("null pointer"));
    RANK_REQUIRE_THAT(error_of([&] { b->all_gather<float>(std::span<const float>(none.data(), 4), some); }),
                      Contains("all_gather") && Contains("send has 4 elements at a null pointer"));
    RANK_REQUIRE_THAT(error_of([&] { b->send<float>(none, 1 - r); }), Contains("send") && Contains("null pointer"));
    RANK_REQUIRE_THAT(error_of([&] { b->recv<float>(none, 1 - r); }), Contains("recv") && Contains("null pointer"));
    // An empty span may have no memory.
    b->all_reduce<float>(std::span<float>(), ReduceOp::Sum);
    b->barrier();  // nothing above reached the arena: the ranks still agree
  });
}

TEST_CASE("all_to_all buffers that do not split into one block per rank name the sizes", "[errors]") {
  run_ranks(2, [](std::shared_ptr<Backend> b, int r) {
    std::vector<float> odd(3), four(4), six(6);
    RANK_REQUIRE(error_of([&] { b->all_to_all<float>(odd, odd); }) ==
                 "all_to_all on rank " + std::to_string(r) +
                     " of 2: send has 3 elements, which do not split into 2 equal blocks (one per rank)");
    RANK_REQUIRE_THAT(error_of([&] { b->all_to_all<float>(four, six); }),
                      Contains("all_to_all") && Contains("recv has 6 elements but must have 4"));
  });
}

// A ReduceOp cast from a bad integer used to run as some reduction, not the
// same on every rank (found by a review); now it is refused before any
// exchange, so the buffers stay as they were and the group stays usable.
TEST_CASE("a reduce op outside ReduceOp's values is refused before any exchange, naming the op", "[errors]") {
  run_ranks(2, [](std::shared_ptr<Backend> b, int r) {
    const auto bad = static_cast<ReduceOp>(42);
    std::vector<float> data(4, float(r + 1)), half(2, -1.0f), out(4, -1.0f);
    RANK_REQUIRE(error_of([&] { b->all_reduce<float>(data, bad); }) ==
                 "all_reduce on rank " + std::to_string(r) +
                     " of 2: invalid reduce op 42 (ReduceOp is Sum, Product, Min, Max or Average)");
    RANK_REQUIRE_THAT(error_of([&] { b->reduce_scatter<float>(data, half, bad); }),
                      Contains("reduce_scatter on rank") && Contains("invalid reduce op 42"));
    RANK_REQUIRE_THAT(error_of([&] { b->reduce<float>(data, out, 0, bad); }),
                      Contains("reduce on rank") && Contains("invalid reduce op 42"));
    RANK_REQUIRE(data == std::vector<float>(4, float(r + 1)));
    RANK_REQUIRE(half == std::vector<float>(2, -1.0f));
    RANK_REQUIRE(out == std::vector<float>(4, -1.0f));
    b->all_reduce<float>(data, ReduceOp::Sum);
    RANK_REQUIRE(data == std::vector<float>(4, 3.0f));
  });
}

TEST_CASE("receive buffers of the wrong size name both sizes", "[errors]") {
  run_ranks(2, [](std::shared_ptr<Backend> b, int r) {
    std::vector<float> send(3), recv(5);
    const std::string all_gather_error = error_of([&] { b->all_gather<float>(send, recv); });
    RANK_REQUIRE(all_gather_error == "all_gather on rank " + std::to_string(r) +
                                         " of 2: recv has 5 elements but must have 6 (send count x world size)");
    const std::string reduce_scatter_error = error_of([&] { b->reduce_scatter<float>(recv, send, ReduceOp::Sum); });
    RANK_REQUIRE_THAT(reduce_scatter_error, Contains("reduce_scatter") && Contains("send has 5 elements but must have 6"));
    if (r == 0) {
      const std::string gather_error = error_of([&] { b->gather<float>(send, recv, 0); });
      const std::string reduce_error = error_of([&] { b->reduce<float>(send, recv, 0, ReduceOp::Sum); });
      RANK_REQUIRE_THAT(gather_error, Contains("recv has 5 elements but must have 6"));
      RANK_REQUIRE_THAT(reduce_error, Contains("recv has 5 elements but must have 3"));
    }
  });
}

TEST_CASE("a message of another size than the receive buffer is an error, and the receive consumes it", "[errors][p2p]") {
  run_ranks(2, [](std::shared_ptr<Backend> b, int r) {
    if (r == 0) {
      b->send<const float>(std::vector<float>(10), 1, 4);
      b->send<const float>(std::vector<float>(3, 7.0f), 1, 4);
    } else {
      std::vector<float> small(3);
      const std::string error = error_of([&] { b->recv<float>(small, 0, 4); });
      RANK_REQUIRE(error == "recv on rank 1 from rank 0 with tag 4: the message has 40 bytes but the buffer has 12");
      // As under MPI: the failed receive took its message; the next gets the next one.
      b->recv<float>(small, 0, 4);
      RANK_REQUIRE(small == std::vector<float>(3, 7.0f));
    }
  });
}

TEST_CASE("a message of another element type than the receive buffer is an error, even of equal bytes", "[errors][p2p]") {
  run_ranks(2, [](std::shared_ptr<Backend> b, int r) {
    if (r == 0) {
      b->send<const float>(std::vector<float>{1.5f, 2.5f}, 1, 4);
      b->send<const std::int32_t>(std::vector<std::int32_t>{7, 8}, 1, 4);
      // Posted before the message comes or not (either may happen), the same error.
      b->barrier();
      b->send<const double>(std::vector<double>{0.25}, 1, 6);
    } else {
      std::vector<std::int32_t> ints(2);
      const std::string error = error_of([&] { b->recv<std::int32_t>(ints, 0, 4); });
      RANK_REQUIRE(error ==
                   "recv on rank 1 from rank 0 with tag 4: the message has 8 bytes of f32 but the buffer has 8 bytes "
                   "of i32");
      b->recv<std::int32_t>(ints, 0, 4);
      RANK_REQUIRE(ints == std::vector<std::int32_t>{7, 8});
      b->barrier();
      std::vector<std::int64_t> word(1);
      RANK_REQUIRE_THAT(error_of([&] { b->recv<std::int64_t>(word, 0, 6); }),
                        Contains("the message has 8 bytes of f64 but the buffer has 8 bytes of i64"));
    }
  });
}

TEST_CASE("a receive mismatch in a subgroup names the group beside the job's ranks", "[errors][p2p][groups]") {
  run_ranks(3, [](std::shared_ptr<Backend> b, int r) {
    const std::vector<int> members{2, 1};  // job rank 2 is its rank 0
    auto pair = b->new_group(members);
    if (r == 2) {
      pair->send<const float>(std::vector<float>{1.5f, 2.5f}, 1, 3);
    } else if (r == 1) {
      std::vector<std::int32_t> ints(2);
      RANK_REQUIRE(error_of([&] { pair->recv<std::int32_t>(ints, 0, 3); }) ==
                   "recv on rank 1 from rank 2 with tag 3 in group [2, 1]: the message has 8 bytes of f32 but the "
                   "buffer has 8 bytes of i32");
    }
  });
}

TEST_CASE("subgroup lists with duplicate or out-of-range ranks are rejected", "[errors][groups]") {
  auto b = MockBackend::single();
  World world(b);
  REQUIRE_THROWS_MATCHES(world.new_group({0, 1}), InvalidArgument,
                         Catch::Matchers::Message("new_group on rank 0 of 1: rank 1 is out of range (ranks are 0..0)"));
  REQUIRE_THROWS_MATCHES(world.new_group({0, 0}), InvalidArgument,
                         Catch::Matchers::Message("new_group on rank 0 of 1: rank 0 is listed twice"));
  REQUIRE_THROWS_WITH(world.new_group({}), Contains("the list of ranks is empty"));
}

// The ranks compare new_group lists by hash; each rank's message also gives
// the list it passed, which the hashes alone do not. A later call on the
// broken group repeats that message as it was: it named the later call's
// list beside the first call's descriptors (a review).
TEST_CASE("new_group with different lists on different ranks is a mismatch naming this rank's list, repeated as it was",
          "[errors][groups][mismatch]") {
  run_ranks(3, [](std::shared_ptr<Backend> b, int r) {
    const std::vector<int> list = r == 1 ? std::vector<int>{0, 1} : std::vector<int>{2, 0, 1};
    const std::string error = error_of([&] { (void)b->new_group(list); });
    RANK_REQUIRE_THAT(error, Contains("collective mismatch in group [0, 1, 2] at call #") &&
                                 Contains("new_group(2 ranks, list hash ") && Contains("new_group(3 ranks, list hash ") &&
                                 Contains(std::string("; this rank's new_group list is ") +
                                          (r == 1 ? "[0, 1]" : "[2, 0, 1]")));
    RANK_REQUIRE(error_of([&] { (void)b->new_group(std::vector<int>{0}); }) == error);
    RANK_REQUIRE(error_of([&] { b->barrier(); }) == error.substr(0, error.find("; this rank's new_group list")));
  });
}

TEST_CASE("a group or world made from a null backend is refused, not a crash", "[errors][groups]") {
  REQUIRE_THROWS_MATCHES(ProcessGroup(nullptr), InvalidArgument, Catch::Message("ProcessGroup: null backend"));
  REQUIRE_THROWS_MATCHES(World(nullptr), InvalidArgument, Catch::Message("World: null backend"));
  REQUIRE_THROWS_MATCHES(ProcessGroup::with_ranks(nullptr, {0}), InvalidArgument,
                         Catch::Message("ProcessGroup::with_ranks: null backend"));
}

TEST_CASE("a collective on a group the caller is not in names the rank and the group", "[errors][groups]") {
  run_ranks(3, [](std::shared_ptr<Backend> b, int r) {
    ProcessGroup pair = ProcessGroup::with_ranks(b, {0, 2});
    if (r != 1) return;
    Tensor t = Tensor::zeros({2});
    const std::string all_reduce_error = error_of([&] { pair.all_reduce_tensor(t); });
    const std::string barrier_error = error_of([&] { pair.barrier(); });
    RANK_REQUIRE(all_reduce_error == "all_reduce: rank 1 is not a member of group [0, 2]");
    RANK_REQUIRE(barrier_error == "barrier: rank 1 is not a member of group [0, 2]");
  });
}

// A subgroup of a subgroup named the caller and the members in its parent's
// numbering, so the message named another process as the non-member (a
// review): ranks are the job's, with the parent's numbering beside them.
TEST_CASE("a collective on a nested subgroup the caller is not in names the job's ranks and the parent's numbering",
          "[errors][groups]") {
  run_ranks(3, [](std::shared_ptr<Backend> b, int r) {
    ProcessGroup world(b);
    ProcessGroup outer = world.new_group({2, 1, 0});
    ProcessGroup inner = outer.new_group({0, 1});  // job ranks 2 and 1
    RANK_REQUIRE(outer.describe() == "group [2, 1, 0]");
    RANK_REQUIRE(inner.describe() == "group [2, 1] (ranks [0, 1] of its parent group [2, 1, 0])");
    if (r == 0) {
      RANK_REQUIRE(error_of([&] { inner.barrier(); }) ==
                   "barrier: rank 0 is not a member of group [2, 1] (ranks [0, 1] of its parent group [2, 1, 0])");
      return;
    }
    ProcessGroup innermost = inner.new_group({1});  // job rank 1
    RANK_REQUIRE(innermost.describe() == "group [1] (ranks [1] of its parent group [2, 1])");
    if (r == 2) {
      RANK_REQUIRE(error_of([&] { innermost.barrier(); }) ==
                   "barrier: rank 2 is not a member of group [1] (ranks [1] of its parent group [2, 1])");
    }
  });
}

// A moved-from group crashed (null parent) instead of throwing (a review).
TEST_CASE("a moved-from ProcessGroup refuses collectives with InvalidArgument saying it was moved from",
          "[errors][groups]") {
  ProcessGroup moved = ProcessGroup::mock();
  ProcessGroup kept = std::move(moved);
  Tensor t = Tensor::zeros({2});
  CHECK_THROWS_AS(moved.all_reduce_tensor(t), InvalidArgument);  // NOLINT(bugprone-use-after-move)
  CHECK_THROWS_WITH(moved.barrier(), "barrier: this ProcessGroup is empty (it was moved from)");
  CHECK_THROWS_WITH(moved.new_group({0}), Contains("moved from"));
  // ... and so do comm.hpp's functions over it (they crashed the same way).
  CHECK_THROWS_WITH(scatter_tensor(t, 0, moved), "scatter_tensor: this ProcessGroup is empty (it was moved from)");
  CHECK_THROWS_WITH(gather_tensor(t, 0, moved), Contains("moved from"));
  std::vector<Tensor> grads{Tensor::zeros({2})};
  CHECK_THROWS_WITH(sync_gradients(grads, moved), Contains("moved from"));
  CHECK(moved.rank() == -1);
  CHECK_FALSE(moved.is_member());
  kept.all_reduce_tensor(t);  // the group itself moved on intact
  CHECK(kept.is_member());
}

namespace {

// Two ranks all-reduce `counts[r]` floats after a barrier; each must throw
// CollectiveMismatch and leave its buffer as it was. Returns the messages.
std::vector<std::string> mismatch_of_counts(std::array<std::size_t, 2> counts) {
  std::vector<std::string> messages(2);
  run_ranks(2, [&](std::shared_ptr<Backend> b, int r) {
    std::vector<float> data(counts[static_cast<std::size_t>(r)], 1.0f + static_cast<float>(r));
    const std::vector<float> before = data;
    b->barrier();
    try {
      b->all_reduce(data, ReduceOp::Sum);
      RANK_FAIL("no mismatch reported on rank " << r);
    } catch (const CollectiveMismatch& e) {
      messages[static_cast<std::size_t>(r)] = e.what();
    }
    RANK_REQUIRE(data == before);
  });
  return messages;
}

}  // namespace

TEST_CASE("ranks that all-reduce different counts both get a mismatch error", "[errors][mismatch]") {
  const auto messages = mismatch_of_counts({100, 200});
  REQUIRE(messages[0] == "collective mismatch in group [0, 1] at call #1: rank 0: all_reduce(f32, 100, sum) vs rank 1: all_reduce(f32, 200, sum)");
  REQUIRE(messages[1] == "collective mismatch in group [0, 1] at call #1: rank 1: all_reduce(f32, 200, sum) vs rank 0: all_reduce(f32, 100, sum)");
}

// A layer above (the PyTorch backend) runs collectives of its own, which
// paired silently with a peer's user call of the same op and size: that
// peer got the layer's numbers as its data (a review). Marked, they are a
// mismatch on both ranks, and the receiving buffer stays as it was.
TEST_CASE("a collective marked as a layer's internal step meets a user call of its shape as a mismatch, named on both",
          "[errors][mismatch]") {
  name_internal_step(201, "a test layer's agreement");
  std::vector<std::string> messages(2);
  run_ranks(2, [&](std::shared_ptr<Backend> b, int r) {
    const std::vector<std::int64_t> mine{1, 2, 3, 4};
    std::vector<std::int64_t> all(8, -1);
    b->barrier();
    // Marked on both: they meet; the mark goes with the call it marked.
    b->label_next_collective(201);
    b->all_gather(std::span<const std::int64_t>(mine), std::span<std::int64_t>(all));
    RANK_REQUIRE(all == std::vector<std::int64_t>{1, 2, 3, 4, 1, 2, 3, 4});
    b->all_gather(std::span<const std::int64_t>(mine), std::span<std::int64_t>(all));
    if (r == 0) b->label_next_collective(201);
    std::fill(all.begin(), all.end(), -1);
    try {
      b->all_gather(std::span<const std::int64_t>(mine), std::span<std::int64_t>(all));
      RANK_FAIL("no mismatch reported on rank " << r);
    } catch (const CollectiveMismatch& e) {
      messages[static_cast<std::size_t>(r)] = e.what();
    }
    RANK_REQUIRE(all == std::vector<std::int64_t>(8, -1));
  });
  REQUIRE(messages[0] == "collective mismatch in group [0, 1] at call #3: rank 0: all_gather(i64, 4, internal step 201: "
                         "a test layer's agreement) vs rank 1: all_gather(i64, 4)");
  REQUIRE(messages[1] == "collective mismatch in group [0, 1] at call #3: rank 1: all_gather(i64, 4) vs rank 0: "
                         "all_gather(i64, 4, internal step 201: a test layer's agreement)");
}

// A scalar's payload travels beside the round counter, a larger one in the
// slot: ranks that disagree on the count look in different places, and must
// get the mismatch before either reads the other's data.
TEST_CASE("a scalar all-reduce against a larger one is a mismatch, and neither buffer changes", "[errors][mismatch]") {
  const auto messages = mismatch_of_counts({1, 100});
  REQUIRE(messages[0] == "collective mismatch in group [0, 1] at call #1: rank 0: all_reduce(f32, 1, sum) vs rank 1: all_reduce(f32, 100, sum)");
  REQUIRE(messages[1] == "collective mismatch in group [0, 1] at call #1: rank 1: all_reduce(f32, 100, sum) vs rank 0: all_reduce(f32, 1, sum)");
}

// begin() folds a descriptor's fields once and reuses the fold while they
// repeat: a call that differs from the calls before it in any one field
// (reduce op, dtype, count, root) must still be told apart.
TEST_CASE("after identical calls, a call that differs in one field is still a mismatch", "[errors][mismatch]") {
  const std::string field = GENERATE("reduce op", "dtype", "count", "root");
  CAPTURE(field);
  std::vector<std::string> messages(2);
  run_ranks(2, [&](std::shared_ptr<Backend> b, int r) {
    std::vector<float> one(1, 1.0f), two(2, 1.0f);
    std::vector<std::int32_t> integer(1, 1);
    for (int i = 0; i < 3; ++i) {  // calls #0..#2 agree
      if (field == "root") b->broadcast(one, 0);
      else b->all_reduce(one, ReduceOp::Sum);
    }
    try {
      if (r == 0 || field == "root") {
        if (field == "reduce op") b->all_reduce(one, ReduceOp::Max);
        if (field == "dtype") b->all_reduce(std::span<std::int32_t>(integer), ReduceOp::Sum);
        if (field == "count") b->all_reduce(two, ReduceOp::Sum);
        if (field == "root") b->broadcast(one, r);
      } else {
        b->all_reduce(one, ReduceOp::Sum);
      }
      RANK_FAIL("no mismatch reported on rank " << r);
    } catch (const CollectiveMismatch& e) {
      messages[static_cast<std::size_t>(r)] = e.what();
    }
  });
  const std::string rank0 = field == "reduce op" ? "all_reduce(f32, 1, max)"
                            : field == "dtype"   ? "all_reduce(i32, 1, sum)"
                            : field == "count"   ? "all_reduce(f32, 2, sum)"
                                                 : "broadcast(f32, 1, root 0)";
  const std::string rank1 = field == "root" ? "broadcast(f32, 1, root 1)" : "all_reduce(f32, 1, sum)";
  REQUIRE(messages[0] == "collective mismatch in group [0, 1] at call #3: rank 0: " + rank0 + " vs rank 1: " + rank1);
  REQUIRE(messages[1] == "collective mismatch in group [0, 1] at call #3: rank 1: " + rank1 + " vs rank 0: " + rank0);
}

TEST_CASE("a broadcast against an all_gather, or different roots, is reported", "[errors][mismatch]") {
  std::vector<std::string> messages(3);
  run_ranks(3, [&](std::shared_ptr<Backend> b, int r) {
    std::vector<float> data(8), gathered(24);
    try {
      if (r == 2) {
        b->all_gather<float>(data, gathered);
      } else {
        b->broadcast(data, r);  // ranks 0 and 1 also disagree on the root
      }
      RANK_FAIL("no mismatch reported on rank " << r);
    } catch (const CollectiveMismatch& e) {
      messages[static_cast<std::size_t>(r)] = e.what();
    }
  });
  REQUIRE_THAT(messages[0], Contains("rank 0: broadcast(f32, 8, root 0) vs rank 1: broadcast(f32, 8, root 1)"));
  REQUIRE_THAT(messages[2], Contains("rank 2: all_gather(f32, 8) vs rank 0: broadcast(f32, 8, root 0)"));
}

TEST_CASE("a barrier against another collective fails on every rank, not by timeout", "[errors][mismatch]") {
  // The barrier's members wait on one predecessor at a time: the one beside
  // the odd rank sees its descriptor, the rest learn it through the relays.
  const int n = GENERATE(2, 3, 5, 8);
  const int odd = GENERATE_COPY(0, n - 1, n / 2);
  const bool flat = GENERATE(false, true);  // both barrier algorithms
  CAPTURE(flat);
  std::vector<std::string> messages(static_cast<std::size_t>(n));
  setenv("AXON_TIMEOUT", "120", 1);  // a hang becomes a Timeout, which fails below
  MockOptions options;
  options.flat_barrier = flat;
  run_ranks(n, [&](std::shared_ptr<Backend> b, int r) {
    std::vector<float> data(4);
    b->all_reduce(data, ReduceOp::Sum);  // call #0 matches
    try {
      if (r == odd) b->all_reduce(data, ReduceOp::Sum);
      else b->barrier();
      RANK_FAIL("no mismatch reported on rank " << r);
    } catch (const CollectiveMismatch& e) {
      messages[static_cast<std::size_t>(r)] = e.what();
    }
  }, options);
  unsetenv("AXON_TIMEOUT");
  for (int r = 0; r < n; ++r) {
    const std::string& m = messages[static_cast<std::size_t>(r)];
    CAPTURE(n, odd, r, m);
    REQUIRE_THAT(m, Contains("collective mismatch in group") && Contains("at call #1"));
    if (r == odd) REQUIRE_THAT(m, Contains("all_reduce(f32, 4, sum) vs rank") && Contains(": barrier()"));
    else REQUIRE_THAT(m, Contains("barrier()"));
  }
  // Whoever waits on the odd rank names it.
  const int next = (odd + 1) % n;
  REQUIRE_THAT(messages[static_cast<std::size_t>(next)],
               Contains("barrier() vs rank " + std::to_string(odd) + ": all_reduce(f32, 4, sum)"));
}

// In the dissemination barrier a member may still wait on a predecessor that
// has finished that barrier, moved on, and found a mismatch in the next call:
// its broken relay must not fail the barrier all agreed on (it did 3% of the
// time: the error named call #0 and came out of the wrong call, and the other
// ranks then waited for that rank until the timeout). Repeated, since it
// takes one rank to fall behind.
TEST_CASE("a mismatch right after a barrier is reported at its own call, never in the barrier all agreed on",
          "[errors][mismatch]") {
  const int world = GENERATE(5, 8);
  const bool subgroup = GENERATE(false, true);  // members 1.. of the world
  CAPTURE(world, subgroup);
  setenv("AXON_TIMEOUT", "20", 1);  // a hang becomes a Timeout, which fails below
  MockOptions options;
  options.flat_barrier = false;
  for (int attempt = 0; attempt < 60; ++attempt) {
    CAPTURE(attempt);
    std::vector<std::string> in_barrier(static_cast<std::size_t>(world)), after(static_cast<std::size_t>(world));
    run_ranks(world, [&](std::shared_ptr<Backend> b, int r) {
      if (subgroup) {
        std::vector<int> members;
        for (int m = 1; m < world; ++m) members.push_back(m);
        b = b->new_group(members);
        if (r == 0) return;
      }
      try {
        b->barrier();  // call #0: everyone agrees
      } catch (const std::exception& e) {
        in_barrier[static_cast<std::size_t>(r)] = e.what();
      }
      try {
        if (r == world - 1) {
          std::vector<float> one(1, 1.0f);
          b->all_reduce(one, ReduceOp::Sum);
        } else {
          b->barrier();
        }
        after[static_cast<std::size_t>(r)] = "no error";
      } catch (const CollectiveMismatch& e) {
        after[static_cast<std::size_t>(r)] = e.what();
      }
    }, options);
    for (int r = subgroup ? 1 : 0; r < world; ++r) {
      CAPTURE(r, in_barrier[static_cast<std::size_t>(r)], after[static_cast<std::size_t>(r)]);
      REQUIRE(in_barrier[static_cast<std::size_t>(r)].empty());
      REQUIRE_THAT(after[static_cast<std::size_t>(r)], Contains("collective mismatch") && Contains("at call #1"));
    }
  }
  unsetenv("AXON_TIMEOUT");
}

TEST_CASE("a group stays unusable after a mismatch instead of exchanging garbage", "[errors][mismatch]") {
  run_ranks(2, [&](std::shared_ptr<Backend> b, int r) {
    std::vector<float> data(static_cast<std::size_t>(r) + 1);
    bool mismatch = false;
    try {
      b->all_reduce(data, ReduceOp::Max);
    } catch (const CollectiveMismatch&) {
      mismatch = true;
    }
    const std::string later = error_of([&] { b->barrier(); });
    RANK_REQUIRE(mismatch);
    RANK_REQUIRE_THAT(later, Contains("collective mismatch"));
  });
}

TEST_CASE("a rank that never arrives becomes a timeout naming the op and the missing rank", "[errors][timeout]") {
  setenv("AXON_TIMEOUT", "0.3", 1);
  auto world = MockBackend::create_world(3);
  unsetenv("AXON_TIMEOUT");
  std::vector<std::string> messages(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      std::vector<float> data(5);
      try {
        world[static_cast<std::size_t>(r)]->all_reduce(data, ReduceOp::Sum);
      } catch (const PeerFailure& e) {  // Timeout, or the abort of the rank that timed out first
        messages[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& message : messages) {
    REQUIRE_THAT(message, Contains("timed out after 0.3 s") &&
                              Contains("all_reduce(f32, 5, sum) call #0 in group [0, 1, 2]: waiting for rank(s) 2"));
  }
}

// Every rank of a mock world makes the groups of `lists`, in order, each on
// a thread of its own (new_group is collective on the world); the result's
// [i][r] is rank r's endpoint of group i (null where r is not a member).
std::vector<std::vector<std::shared_ptr<Backend>>> make_groups(const std::vector<std::shared_ptr<MockBackend>>& world,
                                                               const std::vector<std::vector<int>>& lists) {
  std::vector<std::vector<std::shared_ptr<Backend>>> groups(lists.size(),
                                                            std::vector<std::shared_ptr<Backend>>(world.size()));
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < world.size(); ++r) {
    threads.emplace_back([&, r] {
      for (std::size_t i = 0; i < lists.size(); ++i) groups[i][r] = world[r]->new_group(lists[i]);
    });
  }
  for (auto& t : threads) t.join();
  return groups;
}

TEST_CASE("a timeout says what the rank it waited for itself waits for and so names a stopped rank further down",
          "[errors][timeout]") {
  // Rank 1 never comes (stopped, or busy outside any collective); rank 2
  // waits for it in {1, 2}, and rank 0 for rank 2 in {0, 2}. Rank 0's
  // timeout named only rank 2 (a review, with SIGSTOP).
  setenv("AXON_TIMEOUT", "2", 1);
  auto world = MockBackend::create_world(3);
  unsetenv("AXON_TIMEOUT");
  const auto groups = make_groups(world, {{0, 2}, {1, 2}});
  const auto& with_0_2 = groups[0];
  const auto& with_1_2 = groups[1];
  std::vector<std::thread> threads;
  std::string rank_0_error;
  threads.emplace_back([&] {
    std::vector<float> send(3), recv(6);
    rank_0_error = error_of([&] { with_0_2[0]->all_gather<float>(send, recv); });
  });
  threads.emplace_back([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(400));  // rank 0 times out first
    std::vector<float> data(7);
    (void)error_of([&] { with_1_2[2]->broadcast<float>(data, 0); });
  });
  for (auto& t : threads) t.join();
  REQUIRE_THAT(rank_0_error, Contains("rank 0: timed out after 2.0 s (AXON_TIMEOUT): all_gather(f32, 3) call #0 in group "
                                      "[0, 2]: waiting for rank(s) 2") &&
                                 Contains("; rank 2 itself is waiting for rank(s) 1 in broadcast(f32, 7, root 0) call #0 "
                                          "in group [1, 2]"));
}

TEST_CASE("the note a timeout quotes names the ranks still missing at the timeout, not those missing when first written",
          "[errors][timeout]") {
  // Rank 1 waits in {1, 2, 3} from 0.2 s (its note is first written at 1.2
  // s, rank 2 and 3 missing); rank 2 comes at 1.5 s; rank 3 never does; rank
  // 0 times out waiting for rank 1 in {0, 1} at 2 s (a review found rank 2
  // still named).
  setenv("AXON_TIMEOUT", "2", 1);
  auto world = MockBackend::create_world(4);
  unsetenv("AXON_TIMEOUT");
  const auto groups = make_groups(world, {{0, 1}, {1, 2, 3}});
  const auto& pair = groups[0];
  const auto& trio = groups[1];
  std::vector<std::thread> threads;
  std::string rank_0_error;
  threads.emplace_back([&] {
    std::vector<float> data(4);
    rank_0_error = error_of([&] { pair[0]->all_reduce<float>(data, ReduceOp::Sum); });
  });
  for (int r : {1, 2}) {
    threads.emplace_back([&, r] {
      std::this_thread::sleep_for(std::chrono::milliseconds(r == 1 ? 200 : 1500));
      std::vector<float> data(4);
      (void)error_of([&] { trio[static_cast<std::size_t>(r)]->all_reduce<float>(data, ReduceOp::Sum); });
    });
  }
  for (auto& t : threads) t.join();
  REQUIRE_THAT(rank_0_error, Contains("waiting for rank(s) 1") &&
                                 Contains("; rank 1 itself is waiting for rank(s) 3 in all_reduce(f32, 4, sum) call #0 in "
                                          "group [1, 2, 3]"));
}

TEST_CASE("a timeout breaks the group: a late rank fails instead of finishing the op with a rank that left it",
          "[errors][timeout]") {
  setenv("AXON_TIMEOUT", "0.3", 1);
  auto world = MockBackend::create_world(2);
  unsetenv("AXON_TIMEOUT");
  std::vector<float> early(4, 1.0F);
  std::string early_error;
  std::thread first([&] {
    try {
      world[0]->all_reduce(early, ReduceOp::Sum);
    } catch (const Timeout& e) {
      early_error = e.what();
    }
  });
  first.join();  // rank 0 has given up (and reused its buffer) before rank 1 comes
  REQUIRE_THAT(early_error, Contains("rank 0: timed out after 0.3 s") && Contains("waiting for rank(s) 1"));
  std::vector<float> late(4, 2.0F);
  REQUIRE_THROWS_WITH(world[1]->all_reduce(late, ReduceOp::Sum),
                      Contains("rank 1: job aborted") && Contains("rank 0: timed out after 0.3 s"));
  REQUIRE(late == std::vector<float>(4, 2.0F));
}

TEST_CASE("abort makes every waiting rank fail with the reason", "[errors][abort]") {
  std::vector<std::string> messages(3);
  auto world = MockBackend::create_world(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        world[static_cast<std::size_t>(r)]->barrier();
      } catch (const PeerFailure& e) {
        messages[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  world[2]->abort("out of memory");
  for (auto& t : threads) t.join();
  REQUIRE(messages[0] == "rank 0: job aborted: rank 2 aborted: out of memory");
  REQUIRE(messages[1] == "rank 1: job aborted: rank 2 aborted: out of memory");
}

TEST_CASE("an abort's reason reaches the peers whole up to 1015 characters and marked where it was cut beyond",
          "[errors]") {
  // 240 bytes cut a timeout's notes off, among them the one naming the
  // culprit (a review).
  for (const std::size_t length : {std::size_t{999}, std::size_t{1000}, std::size_t{3000}}) {
    auto world = MockBackend::create_world(2);
    std::string reason(length, 'x');
    reason.replace(0, 5, "start");
    world[1]->abort(reason);
    const std::string error = error_of([&] { world[0]->barrier(); });
    const std::string stored = "rank 1 aborted: " + reason;  // 16 + 999 = 1015 fits
    const std::string expected = stored.size() <= 1015 ? stored : stored.substr(0, 1012) + "...";
    REQUIRE(error == "rank 0: job aborted: " + expected);
  }
}

TEST_CASE("a mock world of an impossible size is refused", "[errors]") {
  REQUIRE_THROWS_WITH(MockBackend::create_world(0), Contains("world size 0 is outside 1..1024"));
  REQUIRE_THROWS_WITH(MockBackend::create_world(2, MockOptions{1 << 16, 0}),
                      Contains("is too small for 2 ranks") && Contains("--arena-mb"));
  // The minimum is what --arena-mb must be raised to: whole MiB, rounded up.
  REQUIRE_THROWS_WITH(MockBackend::create_world(2, MockOptions{1 << 16, 0}),
                      Contains("arena: 64 KiB is too small for 2 ranks, which need at least 2 MiB"));
}

TEST_CASE("a mock world's slot or arena size above its limit is refused rather than wrapped around", "[errors]") {
  // SIZE_MAX rounded up to a cache line wrapped to slots of 0 bytes, and
  // 2^63 made a world group larger than the arena it was said to fit in.
  for (std::size_t slot : {std::numeric_limits<std::size_t>::max(), std::size_t{1} << 63, (std::size_t{1} << 30) + 1}) {
    REQUIRE_THROWS_WITH(MockBackend::create_world(2, MockOptions{0, slot}),
                        Contains("MockBackend::create_world: MockOptions::slot_bytes of " + std::to_string(slot) +
                                 " bytes is above the limit of 1024 MiB"));
  }
  REQUIRE_THROWS_WITH(MockBackend::create_world(2, MockOptions{std::numeric_limits<std::size_t>::max(), 0}),
                      Contains("MockBackend::create_world: MockOptions::arena_bytes of 18446744073709551615 bytes is "
                               "above the limit of 1073741824 MiB"));
  // The largest slot allowed is sized without wrapping around (a world of
  // it would take 12 GiB here, so only the arithmetic is checked).
  CHECK(shm::default_arena_bytes(2, std::size_t{1} << 30) > (std::size_t{6} * 2 * 2) << 30);
  REQUIRE_THROWS_WITH(shm::default_arena_bytes(2, (std::size_t{1} << 30) + 1),
                      "arena: the slot size of 1073741825 bytes is above the limit of 1024 MiB");
}

TEST_CASE("sizes in messages are written one way: bytes, then KiB or MiB with one decimal", "[errors]") {
  CHECK(format_bytes(512) == "512 bytes");
  CHECK(format_bytes(10 * 1024) == "10 KiB");
  CHECK(format_bytes(260 * 1024 + 512) == "260.5 KiB");
  CHECK(format_bytes(std::size_t{3} << 20) == "3 MiB");
  CHECK(format_bytes((std::size_t{7} << 19)) == "3.5 MiB");
  // A refused request says exactly how much it asked for when the rounding
  // would make it look equal to a free block.
  CHECK(format_bytes_exactly((std::size_t{2} << 20) + 8192) == "2.0 MiB (2105344 bytes)");
  CHECK(format_bytes_exactly(std::size_t{2} << 20) == "2 MiB");
  CHECK(format_bytes_exactly(512) == "512 bytes");
}

TEST_CASE("rank lists in messages: one by one up to 16 ranks, runs of three or more as first-last above", "[errors]") {
  CHECK(bracketed_ranks(std::vector<int>{0, 1, 2, 3}) == "[0, 1, 2, 3]");
  std::vector<int> sixteen(16), all(256);
  for (int r = 0; r < 16; ++r) sixteen[static_cast<std::size_t>(r)] = r;
  for (int r = 0; r < 256; ++r) all[static_cast<std::size_t>(r)] = r;
  CHECK(bracketed_ranks(sixteen) == "[" + joined(sixteen) + "]");
  CHECK(bracketed_ranks(all) == "[0-255]");
  // A gap, a pair (not a run), a single rank and a run out of order.
  std::vector<int> mixed;
  for (int r = 0; r < 10; ++r) mixed.push_back(r);
  for (int r : {12, 13, 20, 40, 41, 42, 7, 8, 9}) mixed.push_back(r);
  CHECK(joined_ranks(mixed) == "0-9, 12, 13, 20, 40-42, 7-9");
  CHECK(joined_ranks(std::vector<int>{}).empty());
  std::vector<int> seventeen(17), descending;
  for (int r = 0; r < 17; ++r) seventeen[static_cast<std::size_t>(r)] = r;
  for (int r = 16; r >= 0; --r) descending.push_back(r);
  CHECK(bracketed_ranks(seventeen) == "[0-16]");
  CHECK(joined_ranks(descending) == joined(descending));  // runs go upwards only
}

TEST_CASE("axon-launch reads rank lists back as messages wrote them, runs too, and only ranks of the job", "[errors]") {
  auto read = [](std::string text, int limit) {
    std::string_view list = text;
    std::vector<int> ranks = read_ranks(list, limit);
    return std::make_pair(ranks, std::string(list));
  };
  std::vector<int> mixed{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 20, 40, 41, 42, 7, 8, 9};
  CHECK(read(joined_ranks(mixed) + "] rest", 100) == std::make_pair(mixed, std::string("] rest")));
  CHECK(read("1, 3 (round 7)", 4) == std::make_pair(std::vector<int>{1, 3}, std::string(" (round 7)")));
  // A reason may hold any text (abort()'s): what is no rank of the job, or
  // no run of them, ends the list there.
  CHECK(read("0-3, 9-2]", 10).first == std::vector<int>{0, 1, 2, 3});
  CHECK(read("0-2147483647]", 1024).first.empty());
  CHECK(read("2, 1024, 3]", 1024).first == std::vector<int>{2});
  CHECK(read("5-x", 10) == std::make_pair(std::vector<int>{5}, std::string("-x")));
  CHECK(read("0, 1, 2, 3,", 10).second == ",");  // cut short: the caller finds no "]"
}

TEST_CASE("seconds in messages keep every digit: one decimal when exact, else the shortest exact text", "[errors]") {
  CHECK(format_seconds(3.0) == "3.0");
  CHECK(format_seconds(0.3) == "0.3");
  CHECK(format_seconds(0.05) == "0.05");  // not "0.0"
  CHECK(format_seconds(1.005) == "1.005");
  CHECK(format_seconds(123456.789) == "123456.789");
  CHECK(shortest_text(123456.789) == "123456.789");  // %g: 123457
  CHECK(shortest_text(1000001) == "1000001");        // %g: 1e+06
  CHECK(shortest_text(1e6) == "1e+06");
  CHECK(shortest_text(0.3) == "0.3");
}

TEST_CASE("an arena with no room for another group says so on every rank, with the sizes", "[errors][groups]") {
  const std::size_t tight = 1 << 20;
  run_ranks(2, [&](std::shared_ptr<Backend> b, int) {
    std::vector<std::shared_ptr<Backend>> held;  // groups in use keep their areas
    const std::string error = error_of([&] {
      for (int i = 0; i < 100; ++i) held.push_back(b->new_group(std::vector<int>{0, 1}));
    });
    // Two members, 64 KiB slots: 4 KiB of controls + 2 * 2 * 64 KiB of slots.
    RANK_REQUIRE_THAT(error, Contains("new_group of 2 ranks on rank ") &&
                                 Contains("no room in the arena for a group area of 260 KiB: ") &&
                                 Contains(" free of the 1 MiB arena, the largest free block ") &&
                                 Contains("raise --arena-mb"));
  }, MockOptions{tight, 64 << 10});
}

TEST_CASE("new_group right after every rank dropped the groups that filled the arena gets their room, "
          "whichever rank dropped last",
          "[errors][groups]") {
  const std::size_t tight = 1 << 20;
  PerRank<std::size_t> filled(2);
  PerRank<std::string> errors(2);
  run_ranks(2, [&](std::shared_ptr<Backend> b, int r) {
    for (int round = 0; round < 3; ++round) {
      std::vector<std::shared_ptr<Backend>> held;
      error_of([&] {
        for (int i = 0; i < 100; ++i) held.push_back(b->new_group(std::vector<int>{0, 1}));
      });
      filled[r] = held.size();
      // Rank 1 drops its copies late: the areas go back only then, after
      // the leader (rank 0) has already reached the next new_group.
      if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      held.clear();
      errors[r] += error_of([&] {
        auto group = b->new_group(std::vector<int>{0, 1});
        std::vector<float> data{1.0f};
        group->all_reduce(data, ReduceOp::Sum);
        if (data[0] != 2.0f) throw std::runtime_error("wrong sum");
      });
    }
  }, MockOptions{tight, 64 << 10});
  CHECK(filled[0] >= 1);
  CHECK(errors[0] == "");
  CHECK(errors[1] == "");
}

TEST_CASE("buffer sizes whose byte or total counts overflow are refused before any exchange",
          "[errors]") {
  // Spans that claim more elements than exist: the checks must throw before
  // anything reads them (the pointer is a real but small buffer).
  std::vector<float> small(4);
  const std::size_t half = (std::size_t{1} << 63) + 2;  // x 2 ranks wraps around to 4
  std::vector<std::string> errors(2);
  run_ranks(2, [&](std::shared_ptr<Backend> b, int r) {
    errors[static_cast<std::size_t>(r)] = error_of([&] {
      b->all_gather<float>(std::span<const float>(small.data(), half), std::span<float>(small));
    });
    RANK_REQUIRE_THAT(error_of([&] { b->all_reduce(std::span<float>(small.data(), SIZE_MAX / 2), ReduceOp::Sum); }),
                      Contains("all_reduce on rank") && Contains("more than can exist"));
    RANK_REQUIRE_THAT(error_of([&] {
                        b->reduce_scatter<float>(std::span<const float>(small), std::span<float>(small.data(), half),
                                                 ReduceOp::Sum);
                      }),
                      Contains("reduce_scatter on rank") && Contains("overflows"));
    RANK_REQUIRE_THAT(error_of([&] { b->send<float>(std::span<float>(small.data(), SIZE_MAX / 4), 1 - r); }),
                      Contains("send on rank") && Contains("more than can exist"));
    // Divisible into 2 blocks, but 4 bytes each overflows size_t.
    const std::size_t blocks = (SIZE_MAX / 4 / 2 + 1) * 2;
    RANK_REQUIRE_THAT(error_of([&] {
                        b->all_to_all<float>(std::span<const float>(small.data(), blocks),
                                             std::span<float>(small.data(), blocks));
                      }),
                      Contains("all_to_all on rank") && Contains("more than can exist"));
    b->barrier();  // nothing above reached the arena: the ranks still agree
  });
  REQUIRE_THAT(errors[0], Contains("all_gather on rank 0 of 2: send has 9223372036854775810 elements"));
  REQUIRE_THAT(errors[1], Contains("overflows"));
}

TEST_CASE("bucket sizes that cannot exist are refused", "[errors][ddp]") {
  REQUIRE_THROWS_AS(GradientBucket(std::size_t{1} << 62), InvalidArgument);
  REQUIRE_THROWS_WITH(GradientSynchronizer(GradSyncStrategy::Synchronous, SIZE_MAX / 2),
                      Contains("more than can exist"));
}

TEST_CASE("a rank that left for good fails its peers' recv and collective at once, after what it sent arrives",
          "[errors][p2p]") {
  // 3 ranks: rank 0 sends a message larger than the mailbox (it completes
  // only as rank 1 takes it) and leaves; rank 1 still receives it, then waits
  // for a message rank 0 never sent; rank 2 waits in a barrier rank 0 never
  // calls, once rank 1 is done (its wait, seeing rank 0 gone, aborts the
  // job). Neither may wait for the timeout (AXON_TIMEOUT, 300 s by default).
  std::atomic<bool> rank_1_done{false};
  run_ranks(3, [&](std::shared_ptr<Backend> b, int r) {
    auto& arena = dynamic_cast<ArenaBackend&>(*b);
    std::vector<float> sent(1 << 18, 7.0f);  // 1 MiB
    if (r == 0) {
      b->send<float>(sent, 1, 3);
      arena.leave_for_good();
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const auto start = std::chrono::steady_clock::now();
    std::string error;
    if (r == 1) {
      std::vector<float> got(sent.size());
      b->recv<float>(got, 0, 3);
      RANK_REQUIRE(got == sent);
      std::vector<float> never(4);
      error = error_of([&] { b->recv<float>(never, 0, 4); });
      rank_1_done.store(true);
      RANK_REQUIRE_THAT(error, Contains("rank 1: rank 0 left the group") &&
                                   Contains("recv of 16 bytes with tag 4 from rank 0"));
    } else {
      const auto deadline = start + std::chrono::seconds(10);  // rank 1 may have failed
      while (!rank_1_done.load() && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      error = error_of([&] { b->barrier(); });
      RANK_REQUIRE_THAT(error, Contains("rank 2: job aborted: rank 0 left the group"));
    }
    RANK_REQUIRE(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
  });
}

TEST_CASE("a rank that left for good saying why is explained to the peers that come to wait for it afterwards, "
          "by its first reason cut to 191 bytes",
          "[errors][p2p]") {
  // Rank 0 leaves before rank 1 comes to the barrier: no one waits for it
  // as it leaves, so its reason reaches rank 1 only through the arena (a
  // PyTorch rank that ended on an exception before its peers came; a
  // review).
  const std::string why = "its program ended on an uncaught ValueError: " + std::string(200, 'x');
  run_ranks(2, [&](std::shared_ptr<Backend> b, int r) {
    auto& arena = dynamic_cast<ArenaBackend&>(*b);
    b->barrier();
    if (r == 0) {
      arena.leave_for_good(why);
      arena.leave_for_good("a second reason, not told");
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const std::string error = error_of([&] { b->barrier(); });
    RANK_REQUIRE_THAT(error, Contains("rank 1: rank 0 left the group (" + why.substr(0, 191) + ") while this rank "
                                      "still waited for it"));
  });
}

TEST_CASE("a rank that left for good is refused its own later ops, on its group and on subgroups, naming each",
          "[errors][p2p]") {
  run_ranks(2, [&](std::shared_ptr<Backend> b, int r) {
    const std::vector<int> both{0, 1};
    auto subgroup = b->new_group(both);
    b->barrier();
    dynamic_cast<ArenaBackend&>(*b).leave_for_good();
    std::vector<float> data(4, 1.0f);
    // Catch2 v2 composes matchers by reference: no composed matcher is kept
    // in a variable.
    const auto refused = Contains("has left for good (leave_for_good()) and takes part in nothing more; "
                                  "nothing was done");
    RANK_REQUIRE_THAT(error_of([&] { b->all_reduce<float>(data, ReduceOp::Sum); }),
                      Contains("all_reduce") && Contains("rank " + std::to_string(r)) && refused);
    RANK_REQUIRE_THAT(error_of([&] { subgroup->template broadcast<float>(data, 0); }), Contains("broadcast") && refused);
    RANK_REQUIRE_THAT(error_of([&] { b->barrier(); }), Contains("barrier") && refused);
    // A layer's own step says which (its mark is in the refused call's words).
    name_internal_step(202, "a test layer's refused step");
    b->label_next_collective(202);
    RANK_REQUIRE_THAT(error_of([&] { b->all_reduce<float>(data, ReduceOp::Sum); }),
                      Contains("all_reduce(f32, 4, sum, internal step 202: a test layer's refused step)") && refused);
    RANK_REQUIRE_THAT(error_of([&] { b->send<float>(data, 1 - r); }), Contains("send of 16 bytes") && refused);
    RANK_REQUIRE_THAT(error_of([&] { b->recv<float>(data, 1 - r); }), Contains("recv of 16 bytes") && refused);
    RANK_REQUIRE_THAT(error_of([&] { b->new_group(both); }), Contains("new_group") && refused);
    RANK_REQUIRE_THAT(error_of([&] { (void)b->allocate_shared(64); }),
                      Contains("allocating 64 bytes of shared memory on rank " + std::to_string(r)) && refused);
    RANK_REQUIRE(data == std::vector<float>(4, 1.0f));
    bool invalid_argument = false;
    try {
      b->barrier();
    } catch (const InvalidArgument&) {
      invalid_argument = true;
    }
    RANK_REQUIRE(invalid_argument);
  });
}

TEST_CASE("a child forked after its rank joined is refused collectives and point-to-point, and its end leaves the "
          "rank's part alone",
          "[errors][p2p]") {
  // The child used to run as rank 0 for rank 1, and rank 0 itself then got
  // a CollectiveMismatch whose two sides read the same (found by a review).
  // Its end (dropping a subgroup, leaving for good, as a program's end does)
  // gave the subgroup's area back under the parent and told rank 1 that
  // rank 0 had left (found by the next review).
  run_ranks(2, [&](std::shared_ptr<Backend> b, int r) {
    const std::vector<int> both{0, 1};
    auto pair = b->new_group(both);
    b->barrier();
    const std::string free_before = b->describe_shared_memory();
    std::vector<float> data(4, static_cast<float>(r + 1));
    if (r == 0) {
      const pid_t child = ::fork();
      if (child == 0) {
        // No Catch2 here: report through the exit status only.
        const std::string collective = error_of([&] { b->all_reduce<float>(data, ReduceOp::Sum); });
        const std::string send = error_of([&] { b->send<float>(data, 1); });
        // Its block would never go back to the arena (only the rank gives blocks back).
        const std::string alloc = error_of([&] { (void)b->allocate_shared(64); });
        const bool ok = collective.find("all_reduce(f32, 4, sum) in group [0, 1] on rank 0: this process (pid ") == 0 &&
                        collective.find("was forked from rank 0's process (pid ") != std::string::npos &&
                        collective.find("nothing was done") != std::string::npos &&
                        send.find("send of 16 bytes to rank 1 on rank 0: this process") == 0 &&
                        alloc.find("allocating 64 bytes of shared memory on rank 0: this process") == 0;
        pair.reset();
        dynamic_cast<ArenaBackend&>(*b).leave_for_good();
        b->abort("a forked child's abort");
        ::_exit(ok ? 0 : 1);
      }
      int status = -1;
      ::waitpid(child, &status, 0);
      RANK_REQUIRE(WIFEXITED(status));
      RANK_REQUIRE(WEXITSTATUS(status) == 0);
    }
    // Rank 1 waits here for rank 0 while the child ends.
    b->all_reduce<float>(data, ReduceOp::Sum);
    RANK_REQUIRE(data == std::vector<float>(4, 3.0f));
    pair->all_reduce<float>(data, ReduceOp::Sum);
    RANK_REQUIRE(data == std::vector<float>(4, 6.0f));
    if (r == 1) pair.reset();
    b->barrier();
    // Rank 0 still holds the subgroup: its area is not free.
    if (r == 0) RANK_REQUIRE(b->describe_shared_memory() == free_before);
  });
}

TEST_CASE("a collective from a second thread while one runs on the same group throws on that thread, "
          "the running one completes, and the next call fails on every rank, naming the refusal",
          "[errors][threads][mismatch]") {
  auto world = MockBackend::create_world(2);
  std::atomic<bool> rank1_may_enter{false};
  std::string second_thread_error, hold_error, rank1_error;
  std::vector<float> data{1.0f, 2.0f};
  std::thread rank1([&] {
    while (!rank1_may_enter.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    world[1]->barrier();
    rank1_error = error_of([&] { world[1]->all_reduce(data, ReduceOp::Sum); });
  });
  std::thread inside([&] { world[0]->barrier(); });  // waits for rank 1 inside the barrier
  // Probe until the first thread is inside its barrier: holding the endpoint
  // for this thread succeeds only while nobody is inside a collective. A
  // probe's hold at the instant the barrier claims would refuse the barrier
  // (a review): it claims within microseconds of its start, so wait first.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const auto me = std::this_thread::get_id();
  for (;;) {
    hold_error = error_of([&] { world[0]->hold_collectives_for(me, "probe"); });
    if (!hold_error.empty()) break;
    world[0]->release_collectives(me);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // Holding the group for the thread inside a call of its own is no hold:
  // refused. (Taken as one, the call's end freed the group but left the
  // reason, and the refusal below read as under a hold: counted, not marked,
  // a review.)
  const std::string hold_for_inside = error_of([&] { world[0]->hold_collectives_for(inside.get_id(), "not a hold"); });
  std::vector<float> mine{10.0f, 20.0f};
  second_thread_error = error_of([&] { world[0]->all_reduce(mine, ReduceOp::Sum); });
  rank1_may_enter = true;
  inside.join();
  // Two threads called at once on rank 0, so the ranks' calls may have paired
  // crosswise: rank 0's next call is marked, and fails on both ranks. Made
  // here by a thread the group is held for, whose calls pass as nested
  // claims: the hold acts on the mark as it is taken (a review: the mark
  // waited until after the held series).
  std::string rank0_error;
  std::atomic<bool> held{false};
  std::thread series([&] {
    while (!held.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    rank0_error = error_of([&] { world[0]->all_reduce(mine, ReduceOp::Sum); });
  });
  world[0]->hold_collectives_for(series.get_id(), "a series");
  held = true;
  series.join();
  world[0]->release_collectives(series.get_id());
  rank1.join();
  CHECK_THAT(hold_error, Contains("another thread of this rank is inside a collective"));
  CHECK_THAT(hold_for_inside, Contains("hold_collectives_for on rank 0 of 2: another thread of this rank is inside a "
                                       "collective"));
  CHECK_THAT(second_thread_error, Contains("all_reduce on rank 0 of 2") &&
                                      Contains("another thread of this rank is inside a collective on the same group") &&
                                      Contains("this rank's next collective on the group fails on every rank"));
  const std::string marked = "collective mismatch in group [0, 1] at call #1: rank 0: all_reduce(f32, 2, sum) after "
                             "another thread's call on this group was refused on rank 0 (two threads called "
                             "collectives on the group at once) vs rank 1: all_reduce(f32, 2, sum)";
  const std::string marked_seen_by_1 = "collective mismatch in group [0, 1] at call #1: rank 1: all_reduce(f32, 2, "
                                       "sum) vs rank 0: all_reduce(f32, 2, sum) after another thread's call on this "
                                       "group was refused on rank 0";
  CHECK_THAT(rank0_error, Contains(marked));
  CHECK_THAT(rank1_error, Contains(marked_seen_by_1));
  CHECK_THAT(rank0_error + rank1_error, !Contains("out of step"));
  CHECK(mine == std::vector<float>{10.0f, 20.0f});  // neither rank took the other's step
  CHECK(data == std::vector<float>{1.0f, 2.0f});
}

// Two threads calling on one group: each rank refuses whichever came second
// there, and the calls that got through paired across ranks by arrival, one
// thread's data with the other's, with no error for as long as the threads
// went on (a review: 300 wrong sums of 300 at n=3). Counting the refusals did
// not help where every rank refused alike, as here: the ranks stayed in step.
// The marks of the next call must differ between ranks (each names its own),
// so that it fails everywhere. Each rank's second thread calls
// count_refused_collective() once its first is seen inside a 16 MB
// all_reduce: refused then (and marked); had the first already come out,
// that call only counts, every rank's next call says "out of step", and the
// attempt is tried again on a fresh world.
TEST_CASE("every rank refusing a second thread beside the same call fails the next call on every rank, each mark "
          "naming its own rank",
          "[errors][threads][mismatch]") {
  constexpr int kRanks = 3;
  bool every_rank_refused = false;
  for (int attempt = 0; attempt < 10 && !every_rank_refused; ++attempt) {
    std::atomic<int> refused{0}, done{0};
    PerRank<std::string> next(kRanks);
    run_ranks(kRanks, [&](std::shared_ptr<Backend> b, int r) {
      std::atomic<bool> started{false}, finished{false};
      std::thread first([&] {
        std::vector<float> big(std::size_t{4} << 20, 1.0f);
        started = true;
        for (;;) {  // refused only if the probe below held the group at that instant: then it counted
          const std::string error = error_of([&] { b->all_reduce<float>(big, ReduceOp::Sum); });
          if (error.find("holds this group's collectives: probe") == std::string::npos) break;
        }
        finished = true;
      });
      while (!started.load()) std::this_thread::yield();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // the first thread claims the group meanwhile
      const auto me = std::this_thread::get_id();
      bool inside = false;
      while (!inside && !finished.load()) {
        inside = !error_of([&] { b->hold_collectives_for(me, "probe"); }).empty();
        if (!inside) b->release_collectives(me);
      }
      if (inside && !error_of([&] { b->count_refused_collective(); }).empty()) ++refused;
      first.join();
      ++done;
      while (done.load() < kRanks) std::this_thread::yield();
      std::vector<float> data(4, 1.0f);
      next[r] = error_of([&] { b->all_reduce<float>(data, ReduceOp::Sum); });
    });
    if (refused.load() != kRanks) continue;
    every_rank_refused = true;
    for (int r = 0; r < kRanks; ++r) {
      INFO("rank " << r);
      const std::string own = "rank " + std::to_string(r) + ": all_reduce(f32, 4, sum) after another thread's call "
                              "on this group was refused on rank " + std::to_string(r);
      const std::string peer = "after another thread's call on this group was refused on rank " +
                               std::to_string((r + 1) % kRanks) + " ";
      const std::string other_peer = "after another thread's call on this group was refused on rank " +
                                     std::to_string((r + 2) % kRanks) + " ";
      CHECK_THAT(next[r], Contains("collective mismatch") && Contains(own) &&
                              (Contains(peer) || Contains(other_peer)));
    }
  }
  CHECK(every_rank_refused);  // 10 attempts, and never every rank's second thread beside its first: nothing tested
}

TEST_CASE("a collective refused on one rank only because its group was held for another thread puts that rank "
          "out of step, never pairing a later call with the peers' refused one",
          "[errors][threads][mismatch]") {
  run_ranks(3, [](std::shared_ptr<Backend> b, int r) {
    std::thread other([] {});
    if (r == 1) b->hold_collectives_for(other.get_id(), "the test holds it");
    std::vector<float> first(4, float(r + 1));
    const std::string refused = error_of([&] { b->all_reduce<float>(first, ReduceOp::Sum); });
    if (r == 1) b->release_collectives(other.get_id());
    other.join();
    std::vector<float> second(4, float(100 * (r + 1)));
    const std::string next = error_of([&] { b->all_reduce<float>(second, ReduceOp::Sum); });
    if (r == 1) {
      RANK_REQUIRE_THAT(refused, Contains("another thread of this rank holds this group's collectives: the test "
                                          "holds it; the refused call counts as made on this rank"));
      RANK_REQUIRE_THAT(next, Contains("out of step") &&
                                  Contains("this rank has made 1 more collective in this group than rank"));
      RANK_REQUIRE(second == std::vector<float>(4, 200.0f));  // untouched: nobody's first step
    } else {
      // Ranks 0 and 2 are in their first call when rank 1 comes with its second.
      RANK_REQUIRE_THAT(refused, Contains("out of step") &&
                                     Contains("rank 1 has made 1 more collective in this group than this rank"));
      RANK_REQUIRE(first == std::vector<float>(4, float(r + 1)));
    }
  });
}

// Step 255 marks a call after a refused second thread: a layer that labelled
// one so got a false "refused on rank N" on every rank (a review).
TEST_CASE("label_next_collective refuses step 255, the runtime's own", "[errors][threads]") {
  run_ranks(2, [](std::shared_ptr<Backend> b, int r) {
    RANK_REQUIRE_THAT(error_of([&] { b->label_next_collective(255); }),
                      Contains("label_next_collective on rank " + std::to_string(r) +
                               ": step 255 is the runtime's own (a call after a refused second thread); a layer "
                               "labels 1-254"));
    std::vector<float> data(2, 1.0f);
    b->all_reduce<float>(data, ReduceOp::Sum);  // nothing was marked
    RANK_REQUIRE(data == std::vector<float>(2, 2.0f));
  });
}

TEST_CASE("a collective every rank refused because its group was held for another thread leaves the ranks in "
          "step, and the group goes on",
          "[errors][threads]") {
  run_ranks(3, [](std::shared_ptr<Backend> b, int r) {
    std::thread other([] {});
    b->hold_collectives_for(other.get_id(), "every rank holds it");
    std::vector<float> data(4, float(r + 1));
    const std::string refused = error_of([&] { b->all_reduce<float>(data, ReduceOp::Sum); });
    b->release_collectives(other.get_id());
    other.join();
    RANK_REQUIRE_THAT(refused, Contains("every rank holds it"));
    b->all_reduce<float>(data, ReduceOp::Sum);
    RANK_REQUIRE(data == std::vector<float>(4, 6.0f));
  });
}

TEST_CASE("a group held for another thread refuses this thread's collectives, quoting why, until released",
          "[errors][threads]") {
  auto world = MockBackend::create_world(1);
  std::thread other([] {});
  const std::thread::id holder = other.get_id();
  world[0]->hold_collectives_for(holder, "the test holds it");
  world[0]->hold_collectives_for(holder, "held");
  world[0]->hold_collectives_for(holder, "the test holds it");  // again for the same thread: held, the new reason
  std::vector<float> data{1.0f};
  CHECK_THROWS_AS(world[0]->barrier(), InvalidArgument);
  CHECK_THAT(error_of([&] { world[0]->broadcast(data, 0); }),
             Contains("broadcast on rank 0 of 1: another thread of this rank holds this group's "
                      "collectives: the test holds it"));
  CHECK_THAT(error_of([&] { (void)world[0]->new_group(std::vector<int>{0}); }), Contains("new_group"));
  world[0]->release_collectives(std::this_thread::get_id());  // not the holder: nothing changes
  CHECK_THROWS_AS(world[0]->barrier(), InvalidArgument);
  world[0]->release_collectives(holder);
  CHECK_THAT(error_of([&] { world[0]->hold_collectives_for(std::thread::id{}, "nobody"); }),
             Contains("hold_collectives_for on rank 0: the holder is no thread (a default std::thread::id)"));
  world[0]->all_reduce(data, ReduceOp::Sum);
  CHECK(data == std::vector<float>{1.0f});
  other.join();
}

// A call refused on one rank only (its arguments failed a check there) was
// not counted: when that rank caught the error and went on, its next call
// paired with the call the others were still in, and every rank got another
// step's data with no error (found by a review). It counts now, so the next
// call is a mismatch saying the ranks are out of step.
TEST_CASE("a collective refused on one rank only still counts there: its next call is a mismatch saying the ranks "
          "are out of step, never another step's data",
          "[errors][mismatch]") {
  run_ranks(3, [](std::shared_ptr<Backend> b, int r) {
    for (int step = 1; step <= 2; ++step) {
      std::vector<float> send(2, float(100 * step + r));
      std::vector<float> recv(r == 1 && step == 1 ? 5 : 6, -1.0f);  // one short on rank 1 at step 1
      const std::string error = error_of([&] { b->all_gather<float>(send, recv); });
      if (r == 1 && step == 1) {
        RANK_REQUIRE_THAT(error, Contains("all_gather on rank 1 of 3: recv has 5 elements but must have 6"));
        continue;
      }
      if (r != 1 && step == 2) {
        RANK_REQUIRE_THAT(error, Contains("unusable") || Contains("collective mismatch"));  // the group broke at step 1
        continue;
      }
      // Rank 1's step 2 against the others' step 1.
      RANK_REQUIRE_THAT(error, Contains("collective mismatch in group [0, 1, 2]") && Contains("out of step") &&
                                   Contains(r == 1 ? "this rank has made 1 more collective in this group than rank"
                                                   : "rank 1 has made 1 more collective in this group than this rank"));
      RANK_REQUIRE(recv == std::vector<float>(6, -1.0f));  // nothing of another step's data
    }
  });
}

TEST_CASE("new_group refused on one rank only still counts there: its next call is a mismatch, not a pairing",
          "[errors][mismatch][groups]") {
  run_ranks(2, [](std::shared_ptr<Backend> b, int r) {
    const std::vector<int> members = r == 0 ? std::vector<int>{0, 1} : std::vector<int>{0, 7};
    const std::string refused = error_of([&] { (void)b->new_group(members); });
    RANK_REQUIRE_THAT(refused, Contains(r == 1 ? "rank 7 is out of range" : "rank 1 has made 1 more collective"));
    std::vector<float> data(3, 1.0f);
    const std::string next = error_of([&] { b->all_reduce(data, ReduceOp::Sum); });  // not under RANK_REQUIRE's lock
    RANK_REQUIRE_THAT(next, Contains("collective mismatch") || Contains("out of step"));
  });
}

// ProcessGroup::reduce_scatter_tensor checks the split itself, before the
// backend: rank 1's refused call was not counted, and its next call paired
// with rank 0's pending one (rank 0 got 1 + 100, the next step's data; a
// review).
TEST_CASE("a ProcessGroup reduce_scatter_tensor refused on one rank only counts there too", "[errors][mismatch]") {
  run_ranks(2, [](std::shared_ptr<Backend> b, int r) {
    ProcessGroup pg(b);
    const std::string first = error_of([&] { (void)pg.reduce_scatter_tensor(Tensor::full({r == 1 ? 5u : 4u}, 1.0f), ReduceOp::Sum); });
    if (r == 1) {
      RANK_REQUIRE_THAT(first, Contains("do not split evenly"));
      const std::string next =
          error_of([&] { (void)pg.reduce_scatter_tensor(Tensor::full({4}, 100.0f), ReduceOp::Sum); });
      RANK_REQUIRE_THAT(next, Contains("out of step"));
    } else {
      RANK_REQUIRE_THAT(first, Contains("out of step") && Contains("rank 1 has made 1 more collective"));
    }
  });
}
