#include "axonml/distributed/dtype.hpp"

#include <bit>
#include <cstring>

namespace axonml::distributed {

float16::float16(float value) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) {  // NaN
    bits = static_cast<std::uint16_t>(sign | 0x7e00u);
    return;
  }
  if (abs >= 0x477ff000u) {  // rounds to or beyond 65520: infinity
    bits = static_cast<std::uint16_t>(sign | 0x7c00u);
    return;
  }
  if (abs < 0x38800000u) {  // below the smallest normal half: subnormal or zero
    // Adding 0.5 shifts the value so the FPU's own round-to-nearest-even
    // lands the half's subnormal bits in the low mantissa bits.
    const float shifted = std::bit_cast<float>(abs) + 0.5f;
    bits = static_cast<std::uint16_t>(sign | (std::bit_cast<std::uint32_t>(shifted) - 0x3f000000u));
    return;
  }
  const std::uint32_t mantissa_odd = (abs >> 13) & 1u;
  const std::uint32_t rebased = abs + (static_cast<std::uint32_t>(15 - 127) << 23) + 0xfffu + mantissa_odd;
  bits = static_cast<std::uint16_t>(sign | (rebased >> 13));
}

float16::operator float() const {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1fu;
  const std::uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {  // zero or subnormal: value = mantissa * 2^-24
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
}

std::string_view to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Product: return "product";
    case ReduceOp::Min: return "min";
    case ReduceOp::Max: return "max";
    case ReduceOp::Average: return "average";
  }
  return "unknown-op";
}

std::string_view to_string(DataType type) {
  switch (type) {
    case DataType::F32: return "f32";
    case DataType::F64: return "f64";
    case DataType::BF16: return "bf16";
    case DataType::F16: return "f16";
    case DataType::I32: return "i32";
    case DataType::I64: return "i64";
  }
  return "unknown-type";
}

}  // namespace axonml::distributed
