#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>

#include "axonml/distributed.hpp"

using namespace axonml::distributed;

TEST_CASE("from_vec keeps data and shape", "[tensor]") {
  Tensor t = Tensor::from_vec({1, 2, 3, 4, 5, 6}, {2, 3});
  REQUIRE(t.shape() == Shape{2, 3});
  REQUIRE(t.numel() == 6);
  REQUIRE(t.to_vec() == std::vector<float>{1, 2, 3, 4, 5, 6});
}

TEST_CASE("from_vec with a shape of another size states both numbers", "[tensor][errors]") {
  REQUIRE_THROWS_MATCHES(Tensor::from_vec({1, 2, 3}, {2, 2}), InvalidArgument,
                         Catch::Matchers::Message("Tensor::from_vec: shape [2, 2] has 4 elements but the data has 3"));
}

TEST_CASE("zeros and full fill every element", "[tensor]") {
  REQUIRE(Tensor::zeros({3}).to_vec() == std::vector<float>{0, 0, 0});
  REQUIRE(Tensor::full({2, 2}, 1.5f).to_vec() == std::vector<float>(4, 1.5f));
  REQUIRE(Tensor::zeros({0}).numel() == 0);
}

TEST_CASE("copies share storage and clone does not", "[tensor]") {
  Tensor a = Tensor::zeros({2});
  Tensor b = a;
  Tensor c = a.clone();
  b[0] = 7;
  REQUIRE(a[0] == 7);
  REQUIRE(c[0] == 0);
  REQUIRE(a.shares_storage_with(b));
  REQUIRE_FALSE(a.shares_storage_with(c));
}

// A moved-from tensor kept its element count over a null pointer: to_vec()
// read 4 floats from address 0 (a review).
TEST_CASE("a moved-from tensor is an empty tensor of shape [0], and a null view with elements is refused", "[tensor][errors]") {
  Tensor a = Tensor::full({4}, 1.0f);
  Tensor b = std::move(a);
  CHECK(a.numel() == 0);  // NOLINT(bugprone-use-after-move)
  CHECK(a.shape() == Shape{0});
  CHECK(a.to_vec().empty());
  CHECK(a.clone().numel() == 0);
  // A scalar moved from is no scalar any more: copying from it is refused.
  Tensor scalar = Tensor::full({}, 1.0f);
  Tensor taken = std::move(scalar);
  Tensor other = Tensor::full({}, 2.0f);
  CHECK_THROWS_AS(other.copy_from(scalar), InvalidArgument);  // NOLINT(bugprone-use-after-move)
  CHECK(other.to_vec() == std::vector<float>{2.0f});
  CHECK(b.to_vec() == std::vector<float>(4, 1.0f));
  Tensor c;
  c = std::move(b);
  CHECK(b.numel() == 0);  // NOLINT(bugprone-use-after-move)
  CHECK(c.numel() == 4);
  a = c;  // usable again once assigned
  CHECK(a.to_vec() == std::vector<float>(4, 1.0f));
  CHECK_THROWS_WITH(Tensor::view(nullptr, {3}), "Tensor::view: null data for shape [3] (3 elements)");
  CHECK(Tensor::view(nullptr, {0}).numel() == 0);
}

TEST_CASE("reshape is a view and checks the element count", "[tensor]") {
  Tensor a = Tensor::from_vec({1, 2, 3, 4, 5, 6}, {6});
  Tensor b = a.reshape({3, 2});
  b[5] = 60;
  REQUIRE(a[5] == 60);
  REQUIRE_THROWS_WITH(a.reshape({4}), "Tensor::reshape: cannot view [6] (6 elements) as [4] (4 elements)");
}

TEST_CASE("narrow selects a range of any dimension", "[tensor]") {
  Tensor t = Tensor::from_vec({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {2, 3, 2});
  REQUIRE(t.narrow(0, 1, 1).to_vec() == std::vector<float>{6, 7, 8, 9, 10, 11});
  REQUIRE(t.narrow(1, 1, 2).shape() == Shape{2, 2, 2});
  REQUIRE(t.narrow(1, 1, 2).to_vec() == std::vector<float>{2, 3, 4, 5, 8, 9, 10, 11});
  REQUIRE(t.narrow(2, 1, 1).to_vec() == std::vector<float>{1, 3, 5, 7, 9, 11});
  REQUIRE_THROWS_WITH(t.narrow(1, 2, 2), "Tensor::narrow: start 2 and length 2 exceed size 3 of dim 1 in shape [2, 3, 2]");
  // A start near the top of size_t is named as given (the end wrapped to 1).
  REQUIRE_THROWS_WITH(t.narrow(1, SIZE_MAX, 2), "Tensor::narrow: start " + std::to_string(SIZE_MAX) +
                                                    " and length 2 exceed size 3 of dim 1 in shape [2, 3, 2]");
  REQUIRE_THROWS_WITH(t.narrow(3, 0, 1), "Tensor::narrow: dim 3 is out of range for shape [2, 3, 2]");
}

TEST_CASE("cat joins along any dimension and undoes narrow", "[tensor]") {
  Tensor t = Tensor::from_vec({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {2, 3, 2});
  for (std::size_t dim = 0; dim < 3; ++dim) {
    const std::size_t size = t.shape()[dim];
    Tensor joined = Tensor::cat({t.narrow(dim, 0, 1), t.narrow(dim, 1, size - 1)}, dim);
    REQUIRE(joined.shape() == t.shape());
    REQUIRE(joined.to_vec() == t.to_vec());
  }
  REQUIRE_THROWS_WITH(Tensor::cat({Tensor::zeros({2, 2}), Tensor::zeros({2, 3})}, 0),
                      "Tensor::cat: tensor 1 has shape [2, 3], which does not match [2, 2] outside dim 0");
}

TEST_CASE("bf16 and f16 round to nearest even", "[dtype]") {
  REQUIRE(static_cast<float>(bfloat16(1.0f)) == 1.0f);
  REQUIRE(static_cast<float>(bfloat16(1.00390625f)) == 1.0f);     // tie -> even
  REQUIRE(static_cast<float>(bfloat16(1.01171875f)) == 1.015625f);  // tie -> even (up)
  REQUIRE(static_cast<float>(float16(65504.0f)) == 65504.0f);
  REQUIRE(std::isinf(static_cast<float>(float16(70000.0f))));
  REQUIRE(static_cast<float>(float16(0x1p-24f)) == 0x1p-24f);  // smallest subnormal
  REQUIRE(static_cast<float>(float16(1.0f + 0x1p-11f)) == 1.0f);  // tie -> even
  REQUIRE(static_cast<float>(float16(-2.5f)) == -2.5f);
  for (std::uint32_t bits = 0; bits < 0x7c00; bits += 7) {  // every 7th finite half round-trips
    float16 h;
    h.bits = static_cast<std::uint16_t>(bits);
    REQUIRE(float16(static_cast<float>(h)).bits == h.bits);
  }
}

TEST_CASE("a shape whose element count overflows is refused naming the shape", "[tensor][errors]") {
  const std::size_t huge = (std::size_t{1} << 62) + 4;  // x 4 wraps around to 16
  REQUIRE_THROWS_AS(Tensor::zeros({huge, 4}), InvalidArgument);
  REQUIRE_THROWS_WITH(Tensor::zeros({huge, 4}),
                      Catch::Matchers::Contains("shape [4611686018427387908, 4] has more elements than can exist"));
  REQUIRE_THROWS_AS(numel_of({std::size_t{1} << 32, std::size_t{1} << 32}), InvalidArgument);
  // Fits in a size_t, but not as floats in an address space.
  REQUIRE_THROWS_AS(numel_of({std::size_t{1} << 62}), InvalidArgument);
  REQUIRE_THROWS_AS(Tensor::zeros({4, 4}).reshape({huge, 4}), InvalidArgument);
  // A zero size anywhere makes the product 0, whatever came before it.
  REQUIRE(numel_of({huge, 4, 0}) == 0);
  REQUIRE(Tensor::zeros({huge, 0}).numel() == 0);
}
