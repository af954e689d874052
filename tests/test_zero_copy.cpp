// Zero copy: tensors from ProcessGroup::alloc_shared live in the arena, and
// all-reducing them skips the copy into the slots.
#include <catch2/catch.hpp>

#include <barrier>
#include <cstdint>
#include <cstring>
#include <future>
#include <span>
#include <string>

#include "axonml/distributed/error.hpp"
#include "collectives/algorithms.hpp"
#include "collectives/round_channel.hpp"
#include "support/run_ranks.hpp"

using namespace axonml::distributed;
using axon_test::error_of;
using axon_test::run_ranks;
using Catch::Matchers::Contains;

namespace {

float value_of(int rank, std::size_t i) {
  return static_cast<float>(static_cast<int>((i * 5 + static_cast<std::size_t>(rank) * 3) % 7) - 3);
}

float reference(ReduceOp op, int n, std::size_t i) {
  float acc = value_of(0, i);
  for (int r = 1; r < n; ++r) {
    const float x = value_of(r, i);
    if (op == ReduceOp::Sum || op == ReduceOp::Average) acc += x;
    if (op == ReduceOp::Product) acc *= x;
    if (op == ReduceOp::Min) acc = std::min(acc, x);
    if (op == ReduceOp::Max) acc = std::max(acc, x);
  }
  return op == ReduceOp::Average ? acc * (1.0f / static_cast<float>(n)) : acc;
}

// Member 1 of two, alone on one thread: its peer's buffer and its own lie in
// one heap block, the exchanges pass at once (the peer "published" its
// offset beforehand), and the job is "aborted" (the peer timed out and left
// the op) once throw_if_aborted() has been asked `checks_before_abort` times.
class LateMemberChannel final : public collectives::RoundChannel {
 public:
  LateMemberChannel(std::byte* region, std::uint64_t peer_offset, int checks_before_abort)
      : region_(region), checks_left_(checks_before_abort) {
    std::memcpy(peer_slot_, &peer_offset, sizeof peer_offset);
  }
  int rank() const override { return 1; }
  int size() const override { return 2; }
  std::size_t slot_bytes() const override { return sizeof my_slot_; }
  std::byte* outbox() override { return my_slot_; }
  const std::byte* inbox(int member) const override { return member == 0 ? peer_slot_ : my_slot_; }
  void exchange() override {
    ++exchanges;
    if (aborted) FAIL("an exchange was entered after the abort");
  }
  void synchronize() override { exchange(); }
  void throw_if_aborted() const override {
    if (checks_left_-- <= 0) aborted = true;
    if (aborted) throw PeerFailure("rank 1: job aborted: rank 0: timed out");
  }
  std::uint64_t offset_of(const std::byte* p) const override { return static_cast<std::uint64_t>(p - region_); }
  std::byte* address_of(std::uint64_t offset) const override { return region_ + offset; }

  int exchanges = 0;
  mutable bool aborted = false;

 private:
  std::byte* region_;
  mutable int checks_left_;
  alignas(8) std::byte my_slot_[8]{};
  alignas(8) std::byte peer_slot_[8]{};
};

}  // namespace

TEST_CASE("a member late to a shared all_reduce its peer has left stops within a piece and never enters its last round",
          "[zero-copy][errors]") {
  // A rank stopped (SIGSTOP) in the op and continued after its peer timed
  // out went on writing into the peer's buffer and returned success with
  // what the peer wrote there after failing (found by a review).
  constexpr std::size_t kCount = 1 << 20;      // f32: member 1's slice is 2 MiB, 64 pieces of 32 KiB
  constexpr std::size_t kPieceFloats = 8192;
  std::vector<float> region(2 * kCount);
  float* peer = region.data();
  float* mine = region.data() + kCount;
  const int pieces = static_cast<int>(kCount / 2 / kPieceFloats);
  const int checks = GENERATE(0, 1, 5, 64 - 1, 64);  // abort before the first piece ... after the last one
  std::fill(peer, peer + kCount, 1.0f);
  std::fill(mine, mine + kCount, 2.0f);
  LateMemberChannel channel(reinterpret_cast<std::byte*>(region.data()),
                            static_cast<std::uint64_t>(kCount * 0), checks);
  REQUIRE_THROWS_WITH(collectives::all_reduce_shared(channel, reinterpret_cast<std::byte*>(mine), kCount,
                                                     DataType::F32, ReduceOp::Sum),
                      Contains("job aborted"));
  REQUIRE(channel.exchanges == 1);  // the addresses' round only
  // Member 1 writes its slice [kCount/2, kCount) into the peer's buffer, a
  // piece per check that passed; nothing after the abort.
  const auto written = static_cast<std::size_t>(std::count(peer, peer + kCount, 3.0f));
  REQUIRE(written == static_cast<std::size_t>(std::min(checks, pieces)) * kPieceFloats);
  REQUIRE(std::count(peer, peer + kCount / 2, 1.0f) == static_cast<std::ptrdiff_t>(kCount / 2));  // slice 0 untouched
}

TEST_CASE("all_reduce of shared tensors gives every rank the reference result", "[zero-copy][mock]") {
  const int n = GENERATE(2, 3, 8);
  const std::size_t count = GENERATE(std::size_t{1000}, 100003, (1 << 20) + 3);
  const ReduceOp op = GENERATE(ReduceOp::Sum, ReduceOp::Max, ReduceOp::Average);
  CAPTURE(n, count, to_string(op));
  std::vector<std::vector<float>> results(static_cast<std::size_t>(n));
  run_ranks(n, [&](std::shared_ptr<Backend> b, int r) {
    ProcessGroup pg(b);
    Tensor t = pg.alloc_shared({count});
    for (std::size_t i = 0; i < count; ++i) t[i] = value_of(r, i);
    for (int repeat = 0; repeat < 2; ++repeat) {  // reusing the buffer right away is safe
      if (repeat == 1) for (std::size_t i = 0; i < count; ++i) t[i] = value_of(r, i);
      pg.all_reduce_tensor(t, op);
    }
    results[static_cast<std::size_t>(r)] = t.to_vec();
  }, MockOptions{std::size_t{96} << 20, 0});
  for (int r = 0; r < n; ++r) {
    const auto& got = results[static_cast<std::size_t>(r)];
    for (std::size_t i = 0; i < count; ++i) {
      if (got[i] != reference(op, n, i)) FAIL("rank " << r << " element " << i << ": " << got[i]);
    }
    REQUIRE(std::memcmp(got.data(), results[0].data(), count * sizeof(float)) == 0);
  }
}

TEST_CASE("ranks that mix shared and private buffers get a mismatch naming it", "[zero-copy][errors]") {
  std::vector<std::string> errors(2);
  run_ranks(2, [&](std::shared_ptr<Backend> b, int r) {
    ProcessGroup pg(b);
    Tensor shared = pg.alloc_shared({100000});
    Tensor local = Tensor::zeros({100000});
    errors[static_cast<std::size_t>(r)] = error_of([&] { pg.all_reduce_tensor(r == 0 ? shared : local); });
  });
  REQUIRE_THAT(errors[0], Contains("rank 0: all_reduce(f32, 100000, sum, shared buffer) vs rank 1: all_reduce(f32, 100000, sum)") &&
                             Contains("(every rank must pass a buffer in the shared memory, or none;"));
  REQUIRE_THAT(errors[1], Contains("collective mismatch"));
}

TEST_CASE("alloc_shared beyond the arena's room names the sizes", "[zero-copy][errors]") {
  auto world = MockBackend::create_world(1);
  ProcessGroup pg(world[0]);
  REQUIRE_THROWS_WITH(pg.alloc_shared({std::size_t{1} << 30}),
                      Contains("alloc_shared on rank 0 of group [0]: the mock backend has no shared memory left for 4294967296 bytes") &&
                          Contains("--arena-mb"));
  Tensor small = pg.alloc_shared({4, 4});  // a failed request leaves room for later ones
  REQUIRE(small.shape() == Shape{4, 4});
}

TEST_CASE("alloc_shared of a shape whose byte count overflows is refused, not one page",
          "[zero-copy][errors]") {
  auto world = MockBackend::create_world(1);
  ProcessGroup pg(world[0]);
  // 2^62 + 1024 floats are 2^64 + 4096 bytes: wrapped, one page.
  REQUIRE_THROWS_AS(pg.alloc_shared({(std::size_t{1} << 62) + 1024}), InvalidArgument);
  REQUIRE_THROWS_WITH(pg.alloc_shared({(std::size_t{1} << 62) + 1024}), Contains("alloc_shared on rank 0 of group [0]: shape [4611686018427388928] has more elements"));
  // Byte counts near the top of size_t must not round up to a small size.
  REQUIRE(world[0]->allocate_shared(SIZE_MAX - 100) == nullptr);
  REQUIRE(world[0]->allocate_shared(SIZE_MAX) == nullptr);
  Tensor small = pg.alloc_shared({4});
  REQUIRE(small.numel() == 4);
}

namespace {

// Each rank's element i of a shared all-reduce whose members write into every
// buffer; every call writes fresh inputs first and checks every element after.
template <typename T> void shared_all_reduce_of_every_element(int n, std::size_t count, ReduceOp op) {
  CAPTURE(n, count, to_string(op), to_string(data_type_v<T>));
  auto value = [](int rank, std::size_t i, int call) {
    return static_cast<double>(static_cast<int>((i * 7 + static_cast<std::size_t>(rank) * 5 + static_cast<std::size_t>(call)) % 9) - 4);
  };
  std::vector<std::string> failures(static_cast<std::size_t>(n));
  run_ranks(n, [&](std::shared_ptr<Backend> b, int r) {
    std::shared_ptr<std::byte> memory = b->allocate_shared(count * sizeof(T));
    REQUIRE(memory);
    std::span<T> data(reinterpret_cast<T*>(memory.get()), count);
    for (int call = 0; call < 3; ++call) {
      for (std::size_t i = 0; i < count; ++i) data[i] = T(value(r, i, call));
      b->all_reduce(data, op);
      for (std::size_t i = 0; i < count; ++i) {
        double want = value(0, i, call);
        for (int m = 1; m < n; ++m) {
          const double x = value(m, i, call);
          want = op == ReduceOp::Sum ? want + x : op == ReduceOp::Min ? std::min(want, x) : std::max(want, x);
        }
        if (!(data[i] == T(want))) {
          failures[static_cast<std::size_t>(r)] = "call " + std::to_string(call) + " element " + std::to_string(i);
          return;
        }
      }
    }
  }, MockOptions{std::size_t{64} << 20, 0});
  for (int r = 0; r < n; ++r) {
    CAPTURE(r);
    REQUIRE(failures[static_cast<std::size_t>(r)].empty());
  }
}

}  // namespace

TEST_CASE("shared all_reduce is right in every element for every dtype, slices not on cache lines included",
          "[zero-copy][mock]") {
  // 2-byte elements slice on 32-byte boundaries, so two members write halves
  // of one cache line; odd counts leave the last member a short slice.
  const int n = GENERATE(2, 3, 5);
  const std::size_t count = GENERATE(std::size_t{4099}, 300001);
  shared_all_reduce_of_every_element<bfloat16>(n, count, ReduceOp::Sum);
  shared_all_reduce_of_every_element<float16>(n, count, ReduceOp::Max);
  shared_all_reduce_of_every_element<double>(n, count, ReduceOp::Min);
  shared_all_reduce_of_every_element<std::int32_t>(n, count, ReduceOp::Sum);
  shared_all_reduce_of_every_element<std::int64_t>(n, count, ReduceOp::Max);
}

TEST_CASE("ranks that pass overlapping shared buffers are told which, and the group goes on",
          "[zero-copy][errors]") {
  // Threads of one process can name the same shared memory; ranks of a job
  // cannot by accident, but a wrong pointer must not corrupt anyone's data.
  constexpr std::size_t kCount = 100000;
  std::vector<std::string> errors(3);
  std::vector<float> after(3);
  std::promise<float*> common_promise;
  std::shared_future<float*> common = common_promise.get_future().share();
  run_ranks(3, [&](std::shared_ptr<Backend> b, int r) {
    ProcessGroup pg(b);
    Tensor own = pg.alloc_shared({kCount});
    Tensor big = pg.alloc_shared({2 * kCount});
    if (r == 0) common_promise.set_value(big.data().data());
    // Ranks 1 and 2 reduce the two halves-and-a-bit of rank 0's big buffer.
    std::span<float> data = r == 0 ? own.data()
                                   : std::span<float>(common.get() + (r == 1 ? 0 : kCount - 1), kCount);
    errors[static_cast<std::size_t>(r)] = error_of([&] { b->all_reduce(data, ReduceOp::Sum); });
    std::vector<float> one{1.0f};
    b->all_reduce(std::span<float>(one), ReduceOp::Sum);
    after[static_cast<std::size_t>(r)] = one[0];
  });
  for (int r = 0; r < 3; ++r) {
    CAPTURE(r);
    REQUIRE_THAT(errors[static_cast<std::size_t>(r)],
                 Contains("all_reduce on rank " + std::to_string(r) + " (rank " + std::to_string(r) +
                          " of 3 in group [0, 1, 2]): the shared buffers of rank 1 and rank 2 overlap"));
    REQUIRE(after[static_cast<std::size_t>(r)] == 3.0f);
  }
}

TEST_CASE("overlapping shared buffers in a subgroup are named by the job's ranks", "[zero-copy][errors][groups]") {
  // In new_group({1, 2, 3}) the job's ranks 2 and 3 are the group's 1 and 2:
  // the message used to name the group's numbers as "ranks 1 and 2".
  constexpr std::size_t kCount = 100000;
  std::vector<std::string> errors(4);
  std::promise<float*> common_promise;
  std::shared_future<float*> common = common_promise.get_future().share();
  run_ranks(4, [&](std::shared_ptr<Backend> b, int r) {
    ProcessGroup world(b);
    ProcessGroup group = world.new_group({1, 2, 3});
    if (r == 0) return;
    Tensor own = group.alloc_shared({kCount});
    Tensor big = group.alloc_shared({2 * kCount});
    if (r == 1) common_promise.set_value(big.data().data());
    std::span<float> data = r == 1 ? own.data()
                                   : std::span<float>(common.get() + (r == 2 ? 0 : kCount - 1), kCount);
    errors[static_cast<std::size_t>(r)] = error_of([&] { group.backend().all_reduce(data, ReduceOp::Sum); });
  });
  for (int r = 1; r < 4; ++r) {
    CAPTURE(r);
    REQUIRE_THAT(errors[static_cast<std::size_t>(r)],
                 Contains("all_reduce on rank " + std::to_string(r) + " (rank " + std::to_string(r - 1) +
                          " of 3 in group [1, 2, 3]): the shared buffers of rank 2 and rank 3 overlap"));
  }
}

namespace {

// Runs one shared all_reduce of kCount floats per rank on 3 ranks (rank 2's
// of `rank2_count`), then, once every rank has dropped its buffer, lets rank
// 0 alone allocate the same size again: the ranks share one allocator in
// this process, so only one may allocate for the answer to be certain.
// Returns each rank's error and whether rank 0's new buffer overlaps any old one.
struct ReuseAfterAllReduce {
  std::vector<std::string> errors;
  bool reused = false;
};

ReuseAfterAllReduce reuse_after_all_reduce(std::size_t rank2_count) {
  constexpr std::size_t kCount = 200000;
  constexpr int kRanks = 3;
  ReuseAfterAllReduce out{std::vector<std::string>(kRanks), false};
  std::vector<std::pair<const std::byte*, std::size_t>> old(kRanks);
  std::barrier dropped(kRanks);
  run_ranks(kRanks, [&](std::shared_ptr<Backend> b, int r) {
    const std::size_t count = r == 2 ? rank2_count : kCount;
    std::shared_ptr<std::byte> buffer = b->allocate_shared(count * sizeof(float));
    REQUIRE(buffer);
    old[static_cast<std::size_t>(r)] = {buffer.get(), count * sizeof(float)};
    std::span<float> data(reinterpret_cast<float*>(buffer.get()), count);
    out.errors[static_cast<std::size_t>(r)] = error_of([&] { b->all_reduce(data, ReduceOp::Sum); });
    buffer.reset();
    dropped.arrive_and_wait();
    if (r != 0) return;
    std::shared_ptr<std::byte> next = b->allocate_shared(kCount * sizeof(float));
    REQUIRE(next);
    for (const auto& [p, bytes] : old) {
      if (next.get() < p + bytes && p < next.get() + kCount * sizeof(float)) out.reused = true;
    }
  });
  return out;
}

}  // namespace

TEST_CASE("a shared all_reduce that fails keeps the ranks' shared buffers allocated, since peers may still write them",
          "[zero-copy][errors]") {
  // Peers write their reduced slices into every rank's buffer; one that is
  // still copying when this rank's wait fails must not find that memory
  // handed to a new buffer. A mismatch is the failure a test can place
  // inside the collective every time: each rank sees it after publishing.
  const ReuseAfterAllReduce got = reuse_after_all_reduce(200016);
  for (const std::string& error : got.errors) REQUIRE_THAT(error, Contains("collective mismatch"));
  REQUIRE_FALSE(got.reused);
}

TEST_CASE("a shared buffer dropped after a good all_reduce goes back to the allocator", "[zero-copy]") {
  const ReuseAfterAllReduce got = reuse_after_all_reduce(200000);
  for (const std::string& error : got.errors) REQUIRE(error.empty());
  REQUIRE(got.reused);
}
