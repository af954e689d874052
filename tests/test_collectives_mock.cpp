// The collective algorithms on a mock world (threads over a heap arena): every
// op, every ReduceOp, ranks {1,2,3,4,8}, sizes from empty to many slots.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "support/run_ranks.hpp"

using namespace axonml::distributed;
using axon_test::run_ranks;

namespace {

// Small integers keep sums, products, min and max exact in f32, so the
// reference equals the result to the bit.
float input_value(int rank, std::size_t i) {
  return static_cast<float>(static_cast<int>((i * 7 + static_cast<std::size_t>(rank) * 13) % 5) - 2 + rank % 3);
}

std::vector<float> input_of(int rank, std::size_t count) {
  std::vector<float> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = input_value(rank, i);
  return v;
}

float reference(ReduceOp op, int n, std::size_t i) {
  float acc = input_value(0, i);
  for (int r = 1; r < n; ++r) {
    const float x = input_value(r, i);
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Average: acc = acc + x; break;
      case ReduceOp::Product: acc = acc * x; break;
      case ReduceOp::Min: acc = std::min(acc, x); break;
      case ReduceOp::Max: acc = std::max(acc, x); break;
    }
  }
  if (op == ReduceOp::Average) acc = acc * (1.0f / static_cast<float>(n));
  return acc;
}

const MockOptions kSmallSlots{0, 4096};  // reach the chunked paths with small messages

}  // namespace

TEST_CASE("all_reduce gives every rank the reference result for every op", "[collectives][mock]") {
  const int n = GENERATE(1, 2, 3, 4, 8);
  const std::size_t count = GENERATE(std::size_t{0}, 1, 7, 1000, 1 << 20);
  const ReduceOp op = GENERATE(ReduceOp::Sum, ReduceOp::Product, ReduceOp::Min, ReduceOp::Max,
                               ReduceOp::Average);
  CAPTURE(n, count, to_string(op));
  std::vector<std::vector<float>> results(static_cast<std::size_t>(n));
  run_ranks(n, [&](std::shared_ptr<Backend> b, int r) {
    auto data = input_of(r, count);
    b->all_reduce(data, op);
    results[static_cast<std::size_t>(r)] = std::move(data);
  });
  for (int r = 0; r < n; ++r) {
    const auto& got = results[static_cast<std::size_t>(r)];
    REQUIRE(got.size() == count);
    for (std::size_t i = 0; i < count; ++i) {
      if (got[i] != reference(op, n, i)) FAIL("rank " << r << " element " << i << ": " << got[i] << " != " << reference(op, n, i));
    }
    REQUIRE(std::memcmp(got.data(), results[0].data(), count * sizeof(float)) == 0);
  }
}

TEST_CASE("all_reduce through small slots uses the pipelined path and stays exact", "[collectives][mock]") {
  const int n = GENERATE(2, 3, 8);
  const std::size_t count = GENERATE(std::size_t{1000}, 4099, 100003);
  const ReduceOp op = GENERATE(ReduceOp::Sum, ReduceOp::Max, ReduceOp::Average);
  CAPTURE(n, count, to_string(op));
  std::vector<std::vector<float>> results(static_cast<std::size_t>(n));
  run_ranks(n, [&](std::shared_ptr<Backend> b, int r) {
    auto data = input_of(r, count);
    b->all_reduce(data, op);
    results[static_cast<std::size_t>(r)] = std::move(data);
  }, kSmallSlots);
  for (int r = 0; r < n; ++r) {
    for (std::size_t i = 0; i < count; ++i) {
      if (results[static_cast<std::size_t>(r)][i] != reference(op, n, i)) FAIL("rank " << r << " element " << i);
    }
  }
}
