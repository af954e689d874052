// Zero copy: tensors from ProcessGroup::alloc_shared live in the arena, and
// all-reducing them skips the copy into the slots.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>

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

}  // namespace

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
  REQUIRE_THAT(errors[0], Contains("rank 0: all_reduce(f32, 100000, sum, shared buffer) vs rank 1: all_reduce(f32, 100000, sum)"));
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
