// The reduce kernels: every vector kernel this CPU can run gives bitwise the
// scalar kernel's result, and the scalar kernel keeps the documented
// semantics (order, wrapping integers, NaN in min/max, one rounding).
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "axonml/distributed/error.hpp"
#include "kernels/reduce.hpp"
#include "kernels/reduce_isa.hpp"

using namespace axonml::distributed;
using kernels::Isa;

namespace {

const ReduceOp kAllOps[] = {ReduceOp::Sum, ReduceOp::Product, ReduceOp::Min, ReduceOp::Max,
                            ReduceOp::Average};

// Bytes of `count` elements of `type` that mix ordinary values with the
// awkward ones: NaNs with payloads, infinities, signed zeros, subnormals,
// values near the rounding and overflow edges, wrapping integers.
std::vector<std::byte> awkward_values(DataType type, std::size_t count, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::size_t es = size_of(type);
  std::vector<std::byte> bytes(count * es);
  for (std::size_t i = 0; i < count; ++i) {
    std::byte* at = bytes.data() + i * es;
    const std::uint64_t bits = rng();
    const bool ordinary = (bits & 3) != 0;  // three in four are plain numbers
    const float moderate = static_cast<float>(static_cast<std::int64_t>(bits >> 40) % 2001 - 1000) / 8.0f;
    switch (type) {
      case DataType::F32: {
        const float v = ordinary ? moderate : std::bit_cast<float>(static_cast<std::uint32_t>(bits >> 32));
        std::memcpy(at, &v, es);
        break;
      }
      case DataType::F64: {
        const double v = ordinary ? static_cast<double>(moderate) / 3.0 : std::bit_cast<double>(bits);
        std::memcpy(at, &v, es);
        break;
      }
      case DataType::BF16:
      case DataType::F16: {
        // Every 16-bit pattern occurs: NaNs, infinities, subnormals.
        const std::uint16_t v = static_cast<std::uint16_t>(bits >> 48);
        std::memcpy(at, &v, es);
        break;
      }
      case DataType::I32: {
        const std::int32_t v = ordinary ? static_cast<std::int32_t>(moderate * 8)
                                        : static_cast<std::int32_t>(bits >> 32);
        std::memcpy(at, &v, es);
        break;
      }
      case DataType::I64: {
        const std::int64_t v = ordinary ? static_cast<std::int64_t>(moderate * 8)
                                        : static_cast<std::int64_t>(bits);
        std::memcpy(at, &v, es);
        break;
      }
    }
  }
  return bytes;
}

// Sources and a destination at chosen element offsets from 64-byte alignment.
struct Inputs {
  std::vector<std::vector<std::byte>> storage;
  std::vector<const std::byte*> sources;
  std::vector<std::byte> dest_storage;
  std::byte* dest;

  Inputs(DataType type, std::size_t count, std::size_t n, std::size_t source_offset,
         std::size_t dest_offset, std::uint64_t seed) {
    const std::size_t es = size_of(type);
    for (std::size_t s = 0; s < n; ++s) {
      const auto values = awkward_values(type, count, seed * 131 + s);
      storage.emplace_back(count * es + 128 + source_offset * es);
      std::byte* base = aligned(storage.back().data()) + source_offset * es;
      if (!values.empty()) std::memcpy(base, values.data(), values.size());
      sources.push_back(base);
    }
    dest_storage.resize(count * es + 128 + dest_offset * es);
    dest = aligned(dest_storage.data()) + dest_offset * es;
  }

  static std::byte* aligned(std::byte* p) {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    return p + (64 - a % 64) % 64;
  }
};

std::vector<std::byte> scalar_result(DataType type, ReduceOp op, const Inputs& in, std::size_t count) {
  std::vector<std::byte> out(count * size_of(type));
  kernels::reduce_with(Isa::Scalar, type, op, in.sources, out.data(), count);
  return out;
}

bool is_nan(DataType type, const std::byte* at) {
  switch (type) {
    case DataType::F32: { float v; std::memcpy(&v, at, 4); return std::isnan(v); }
    case DataType::F64: { double v; std::memcpy(&v, at, 8); return std::isnan(v); }
    case DataType::BF16: { bfloat16 v; std::memcpy(&v, at, 2); return std::isnan(static_cast<float>(v)); }
    case DataType::F16: { float16 v; std::memcpy(&v, at, 2); return std::isnan(static_cast<float>(v)); }
    default: return false;
  }
}

// The first element that differs bitwise, or count when none does. NaNs
// included: an add or multiply that yields NaN gives the canonical NaN in
// every kernel, so even their payloads must agree.
std::size_t first_difference(DataType type, ReduceOp, const std::byte* a, const std::byte* b,
                             std::size_t count) {
  const std::size_t es = size_of(type);
  for (std::size_t i = 0; i < count; ++i) {
    if (std::memcmp(a + i * es, b + i * es, es) != 0) {
      UNSCOPED_INFO("element " << i << (is_nan(type, a + i * es) ? " (a NaN)" : ""));
      return i;
    }
  }
  return count;
}

std::vector<Isa> vector_isas() {
  std::vector<Isa> isas;
  for (Isa isa : {Isa::Avx2, Isa::Avx512})
    if (kernels::isa_supported(isa)) isas.push_back(isa);
  return isas;
}

// dest_source: the source that dest is (the collectives reduce in place into
// their own part, which may be any source), or -1 for a separate dest.
void check_matches_scalar(Isa isa, DataType type, ReduceOp op, std::size_t count, std::size_t n,
                          std::size_t source_offset, std::size_t dest_offset, int dest_source) {
  CAPTURE(kernels::to_string(isa), to_string(type), to_string(op), count, n, source_offset,
          dest_offset, dest_source);
  const std::size_t es = size_of(type);
  Inputs in(type, count, n, source_offset, dest_offset, count * 7 + n);
  const auto expected = scalar_result(type, op, in, count);
  if (dest_source >= 0) {
    const auto s = static_cast<std::size_t>(dest_source);
    if (count) std::memcpy(in.dest, in.sources[s], count * es);
    in.sources[s] = in.dest;
  }
  kernels::reduce_with(isa, type, op, in.sources, in.dest, count);
  const std::size_t at = first_difference(type, op, expected.data(), in.dest, count);
  CAPTURE(at);
  REQUIRE(at == count);
}

}  // namespace

TEST_CASE("vector kernels give bitwise the scalar result for every dtype, op, count and source count",
          "[kernels]") {
  const DataType type = GENERATE(DataType::F32, DataType::F64, DataType::BF16, DataType::F16,
                                 DataType::I32, DataType::I64);
  REQUIRE(kernels::isa_supported(Isa::Avx2));  // this machine has AVX-512, so both run
  for (Isa isa : vector_isas())
    for (ReduceOp op : kAllOps)
      for (std::size_t count : {0, 1, 15, 16, 17, 1000, 4097})
        for (std::size_t n : {1, 2, 3, 8})
          check_matches_scalar(isa, type, op, count, n, 0, 0, -1);
}

TEST_CASE("vector kernels match the scalar kernel at every alignment and with dest equal to any one source",
          "[kernels]") {
  const DataType type = GENERATE(DataType::F32, DataType::F64, DataType::BF16, DataType::F16,
                                 DataType::I32, DataType::I64);
  for (Isa isa : vector_isas())
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Min, ReduceOp::Average})
      for (std::size_t source_offset : {0, 1, 3})
        for (std::size_t dest_offset : {0, 1, 5})
          for (int dest_source : {-1, 0, 1, 2})
            check_matches_scalar(isa, type, op, 1000, 3, source_offset, dest_offset, dest_source);
}

// Up to kernels::kFewElements elements go element by element (reduce_few,
// which the scalar all-reduce also calls directly), longer runs through
// blocks: the two must agree bit for bit, or a scalar's all-reduce would
// differ from the same element's in a larger one.
TEST_CASE("a reduction of a few elements gives bitwise the result of the same elements in a longer one",
          "[kernels]") {
  const DataType type = GENERATE(DataType::F32, DataType::F64, DataType::BF16, DataType::F16,
                                 DataType::I32, DataType::I64);
  const std::size_t es = size_of(type);
  for (ReduceOp op : kAllOps) {
    for (std::size_t n : {1, 2, 3, 8}) {
      CAPTURE(to_string(type), to_string(op), n);
      Inputs in(type, 64, n, 0, 0, 17 + n);
      const auto longer = scalar_result(type, op, in, 64);
      for (std::size_t count = 1; count <= kernels::kFewElements; ++count) {
        std::vector<std::byte> few(count * es);
        kernels::reduce(type, op, in.sources, few.data(), count);
        CAPTURE(count);
        REQUIRE(first_difference(type, op, longer.data(), few.data(), count) == count);
        std::vector<std::byte> direct(count * es);  // the scalar all-reduce's own entry
        kernels::reduce_few(type, op, in.sources, direct.data(), count);
        REQUIRE(first_difference(type, op, longer.data(), direct.data(), count) == count);
      }
    }
  }
}

TEST_CASE("vector kernels keep order and one rounding with more sources than one pass combines",
          "[kernels]") {
  const DataType type = GENERATE(DataType::F32, DataType::F64, DataType::BF16, DataType::F16,
                                 DataType::I32, DataType::I64);
  for (Isa isa : vector_isas())
    for (ReduceOp op : kAllOps)
      for (std::size_t n : {9, 16, 17, 25})
        check_matches_scalar(isa, type, op, 4097, n, 1, 0, false);
}

TEST_CASE("vector kernels match the scalar kernel on outputs large enough for non-temporal stores",
          "[kernels]") {
  const DataType type = GENERATE(DataType::F32, DataType::BF16, DataType::F16, DataType::I64);
  const std::size_t count = (std::size_t{5} << 20) / size_of(type) + 37;  // > 4 MiB
  for (Isa isa : vector_isas())
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Average})
      for (std::size_t dest_offset : {0, 3})
        check_matches_scalar(isa, type, op, count, op == ReduceOp::Sum ? 9 : 2, 0, dest_offset,
                             dest_offset == 3);
}

// ---- The scalar kernel's semantics ------------------------------------------

namespace {

template <typename T>
std::vector<T> reduce_all(Isa isa, ReduceOp op, const std::vector<std::vector<T>>& inputs) {
  std::vector<const std::byte*> sources;
  for (const auto& v : inputs) sources.push_back(reinterpret_cast<const std::byte*>(v.data()));
  std::vector<T> out(inputs[0].size());
  kernels::reduce_with(isa, data_type_v<T>, op, sources, reinterpret_cast<std::byte*>(out.data()),
                       out.size());
  return out;
}

std::vector<Isa> every_isa() {
  auto isas = vector_isas();
  isas.insert(isas.begin(), Isa::Scalar);
  return isas;
}

}  // namespace

TEST_CASE("integer sum and product wrap around instead of overflowing", "[kernels]") {
  constexpr auto kMax32 = std::numeric_limits<std::int32_t>::max();
  constexpr auto kMin64 = std::numeric_limits<std::int64_t>::min();
  for (Isa isa : every_isa()) {
    CAPTURE(kernels::to_string(isa));
    const std::vector<std::int32_t> a(33, kMax32), b(33, 2);
    CHECK(reduce_all<std::int32_t>(isa, ReduceOp::Sum, {a, b})[32] == std::numeric_limits<std::int32_t>::min() + 1);
    CHECK(reduce_all<std::int32_t>(isa, ReduceOp::Product, {a, b})[0] == -2);
    const std::vector<std::int64_t> c(33, kMin64), d(33, -1), e(33, 3);
    CHECK(reduce_all<std::int64_t>(isa, ReduceOp::Sum, {c, d})[5] == std::numeric_limits<std::int64_t>::max());
    CHECK(reduce_all<std::int64_t>(isa, ReduceOp::Product, {c, e})[32] == kMin64);
    const std::vector<std::int64_t> big(33, (std::int64_t{1} << 40) + 7);
    CHECK(reduce_all<std::int64_t>(isa, ReduceOp::Product, {big, big})[1] ==
          static_cast<std::int64_t>(((std::uint64_t{1} << 40) + 7) * ((std::uint64_t{1} << 40) + 7)));
  }
}

TEST_CASE("integer average divides the sum truncating toward zero", "[kernels]") {
  for (Isa isa : every_isa()) {
    CAPTURE(kernels::to_string(isa));
    const std::vector<std::int32_t> a(40, -4), b(40, -3);
    CHECK(reduce_all<std::int32_t>(isa, ReduceOp::Average, {a, b})[39] == -3);  // -7 / 2
    const std::vector<std::int64_t> c(40, 5), d(40, 5), e(40, 0);
    CHECK(reduce_all<std::int64_t>(isa, ReduceOp::Average, {c, d, e})[17] == 3);  // 10 / 3
  }
}

TEST_CASE("min and max give NaN when any source is NaN, whichever source that is", "[kernels]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const double nan64 = std::numeric_limits<double>::quiet_NaN();
  for (Isa isa : every_isa()) {
    CAPTURE(kernels::to_string(isa));
    const std::vector<float> with_nan(64, nan), one(64, 1.0f), two(64, 2.0f);
    for (ReduceOp op : {ReduceOp::Min, ReduceOp::Max}) {
      CAPTURE(to_string(op));
      CHECK(std::isnan(reduce_all<float>(isa, op, {with_nan, one})[40]));
      CHECK(std::isnan(reduce_all<float>(isa, op, {one, with_nan})[40]));
      CHECK(std::isnan(reduce_all<float>(isa, op, {one, with_nan, two})[40]));
      CHECK(std::isnan(reduce_all<float>(isa, op, {two, one, with_nan})[63]));
      const std::vector<double> with_nan64(64, nan64), one64(64, 1.0);
      CHECK(std::isnan(reduce_all<double>(isa, op, {one64, with_nan64})[40]));
      const std::vector<bfloat16> with_nan16(64, bfloat16(nan)), one16(64, bfloat16(1.0f));
      CHECK(std::isnan(static_cast<float>(reduce_all<bfloat16>(isa, op, {one16, with_nan16})[40])));
      const std::vector<float16> with_nanh(64, float16(nan)), oneh(64, float16(1.0f));
      CHECK(std::isnan(static_cast<float>(reduce_all<float16>(isa, op, {oneh, with_nanh})[40])));
    }
    CHECK(reduce_all<float>(isa, ReduceOp::Min, {two, one})[40] == 1.0f);
    CHECK(reduce_all<float>(isa, ReduceOp::Max, {one, two})[40] == 2.0f);
    // Equal values compare equal: the first source's zero stays.
    const std::vector<float> plus(64, 0.0f), minus(64, -0.0f);
    CHECK(!std::signbit(reduce_all<float>(isa, ReduceOp::Min, {plus, minus})[3]));
    CHECK(std::signbit(reduce_all<float>(isa, ReduceOp::Max, {minus, plus})[3]));
  }
}

TEST_CASE("every reduction of NaNs gives the canonical NaN in every kernel at every alignment",
          "[kernels]") {
  // Ranks whose buffers start at different offsets from a 64-byte boundary
  // split the same elements between scalar head/tail and vector body
  // differently; both must give the same bits.
  const DataType type = GENERATE(DataType::F32, DataType::F64, DataType::BF16, DataType::F16);
  const std::size_t es = size_of(type);
  const std::size_t count = 1000;
  // NaNs with different payloads and signs, one per source.
  auto nan_bits = [&](std::size_t source) -> std::uint64_t {
    const std::uint64_t sign = source % 2;
    switch (type) {
      case DataType::F32: return sign << 31 | 0x7fc00000u | (0x1234u + source);
      case DataType::F64: return sign << 63 | 0x7ff8000000000000ULL | (0x5678u + source);
      case DataType::BF16: return sign << 15 | 0x7fc0u | (1u + source);
      default: return sign << 15 | 0x7e00u | (3u + source);
    }
  };
  const std::uint64_t canonical = type == DataType::F32    ? 0x7fc00000u
                                  : type == DataType::F64  ? 0x7ff8000000000000ULL
                                  : type == DataType::BF16 ? 0x7fc0u
                                                           : 0x7e00u;
  std::vector<Isa> isas{Isa::Scalar};
  for (Isa isa : vector_isas()) isas.push_back(isa);
  for (Isa isa : isas)
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Product, ReduceOp::Average, ReduceOp::Min, ReduceOp::Max})
      for (std::size_t n : {2, 3, 9})
        for (std::size_t dest_offset : {0, 1, 3, 7}) {
          CAPTURE(kernels::to_string(isa), to_string(type), to_string(op), n, dest_offset);
          Inputs in(type, count, n, 0, dest_offset, 1);
          for (std::size_t s = 0; s < n; ++s) {
            auto* source = const_cast<std::byte*>(in.sources[s]);
            // Every source NaN in even elements; only source 1 in odd ones.
            for (std::size_t i = 0; i < count; ++i) {
              if (i % 2 == 0 || s == 1) {
                const std::uint64_t bits = nan_bits(s);
                std::memcpy(source + i * es, &bits, es);
              }
            }
          }
          kernels::reduce_with(isa, type, op, in.sources, in.dest, count);
          for (std::size_t i = 0; i < count; ++i) {
            std::uint64_t got = 0;
            std::memcpy(&got, in.dest + i * es, es);
            CAPTURE(i);
            REQUIRE(got == canonical);
          }
        }
}

TEST_CASE("float average is the in-order sum times one over the source count", "[kernels]") {
  const std::vector<float> a(48, 0.1f), b(48, 0.7f), c(48, 1e-3f);
  const float expected = ((0.1f + 0.7f) + 1e-3f) * (1.0f / 3.0f);
  for (Isa isa : every_isa()) {
    CAPTURE(kernels::to_string(isa));
    CHECK(std::bit_cast<std::uint32_t>(reduce_all<float>(isa, ReduceOp::Average, {a, b, c})[47]) ==
          std::bit_cast<std::uint32_t>(expected));
  }
}

TEST_CASE("bf16 and f16 sums are accumulated in f32 and rounded once", "[kernels]") {
  // 256 + 1 + 1 in bf16 (8 bits of mantissa): rounding after each add would
  // lose both ones; one rounding of 258 keeps it.
  const std::vector<bfloat16> big(40, bfloat16(256.0f)), one(40, bfloat16(1.0f));
  // f16: 2048 + 1 + 1 likewise (11 bits).
  const std::vector<float16> big16(40, float16(2048.0f)), one16(40, float16(1.0f));
  for (Isa isa : every_isa()) {
    CAPTURE(kernels::to_string(isa));
    CHECK(static_cast<float>(reduce_all<bfloat16>(isa, ReduceOp::Sum, {big, one, one})[33]) == 258.0f);
    CHECK(static_cast<float>(reduce_all<float16>(isa, ReduceOp::Sum, {big16, one16, one16})[33]) == 2050.0f);
  }
}

TEST_CASE("AXON_KERNEL chooses the kernel in any case and rejects unknown names", "[kernels]") {
  const std::string selected(kernels::selected_isa());
  CHECK((selected == "scalar" || selected == "avx2" || selected == "avx512"));
  ::setenv("AXON_KERNEL", "scalar", 1);
  CHECK(kernels::choose_isa() == Isa::Scalar);
  ::setenv("AXON_KERNEL", "avx2", 1);
  CHECK(kernels::choose_isa() == Isa::Avx2);
  ::setenv("AXON_KERNEL", "AVX2", 1);
  CHECK(kernels::choose_isa() == Isa::Avx2);
  ::setenv("AXON_KERNEL", "sse9", 1);
  CHECK_THROWS_AS(kernels::choose_isa(), InvalidArgument);
  ::unsetenv("AXON_KERNEL");
  CHECK(kernels::choose_isa() == (kernels::isa_supported(Isa::Avx512) ? Isa::Avx512 : Isa::Avx2));
}
