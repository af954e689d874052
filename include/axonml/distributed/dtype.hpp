// Element types and reduction operations.
//
// Collectives move f32 by default; the typed overloads of Backend accept the
// element types below. bf16 and f16 are storage types only: reductions widen
// them to f32, combine in f32 and round once when storing.
//
// Thread safety: value types and pure functions; safe from any thread.
#pragma once

#include "axonml/distributed/cxx20.hpp"

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

namespace axonml::distributed {

enum class ReduceOp : std::uint8_t { Sum, Product, Min, Max, Average };

enum class DataType : std::uint8_t { F32, F64, BF16, F16, I32, I64 };

// 16-bit brain float: the top half of an IEEE f32. The conversions are
// inline so that loops over whole buffers (DDP's bf16 compression) vectorize.
struct bfloat16 {
  std::uint16_t bits = 0;
  bfloat16() = default;
  // Rounds to nearest, ties to even; a NaN stays a (quiet) NaN.
  explicit bfloat16(float value) {
    const std::uint32_t u = std::bit_cast<std::uint32_t>(value);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
      bits = static_cast<std::uint16_t>((u >> 16) | 0x40u);
      return;
    }
    const std::uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
    bits = static_cast<std::uint16_t>((u + rounding) >> 16);
  }
  explicit operator float() const { return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16); }
  friend bool operator==(bfloat16, bfloat16) = default;
};

// IEEE 754 binary16.
struct float16 {
  std::uint16_t bits = 0;
  float16() = default;
  explicit float16(float value);
  explicit operator float() const;
  friend bool operator==(float16, float16) = default;
};

std::string_view to_string(ReduceOp op);
std::string_view to_string(DataType type);
// Bytes per element; inline, as every collective asks it on its way in.
constexpr std::size_t size_of(DataType type) {
  switch (type) {
    case DataType::F32: return 4;
    case DataType::F64: return 8;
    case DataType::BF16: return 2;
    case DataType::F16: return 2;
    case DataType::I32: return 4;
    case DataType::I64: return 8;
  }
  return 0;
}

template <typename T> struct data_type_of;
template <> struct data_type_of<float> { static constexpr DataType value = DataType::F32; };
template <> struct data_type_of<double> { static constexpr DataType value = DataType::F64; };
template <> struct data_type_of<bfloat16> { static constexpr DataType value = DataType::BF16; };
template <> struct data_type_of<float16> { static constexpr DataType value = DataType::F16; };
template <> struct data_type_of<std::int32_t> { static constexpr DataType value = DataType::I32; };
template <> struct data_type_of<std::int64_t> { static constexpr DataType value = DataType::I64; };

// The element types collectives accept.
template <typename T>
concept Element = requires { data_type_of<std::remove_const_t<T>>::value; };

template <Element T>
inline constexpr DataType data_type_v = data_type_of<std::remove_const_t<T>>::value;

// Calls fn(T{}) with T the C++ element type of `type`, and returns its result.
template <typename Fn> decltype(auto) visit_element_type(DataType type, Fn&& fn) {
  switch (type) {
    case DataType::F64: return fn(double{});
    case DataType::BF16: return fn(bfloat16{});
    case DataType::F16: return fn(float16{});
    case DataType::I32: return fn(std::int32_t{});
    case DataType::I64: return fn(std::int64_t{});
    case DataType::F32: break;
  }
  return fn(float{});
}

}  // namespace axonml::distributed
