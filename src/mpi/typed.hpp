// Calling the typed Backend API from code that holds raw bytes and a DataType.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "axonml/distributed/dtype.hpp"

namespace axonml::distributed::mpi {

// Calls f(std::type_identity<T>{}) for the element type T of `type`.
template <typename F> void visit_element(DataType type, F&& f) {
  switch (type) {
    case DataType::F32: return f(std::type_identity<float>{});
    case DataType::F64: return f(std::type_identity<double>{});
    case DataType::BF16: return f(std::type_identity<bfloat16>{});
    case DataType::F16: return f(std::type_identity<float16>{});
    case DataType::I32: return f(std::type_identity<std::int32_t>{});
    case DataType::I64: return f(std::type_identity<std::int64_t>{});
  }
}

template <typename T> std::span<T> elements(std::byte* data, std::size_t count) {
  return {reinterpret_cast<T*>(data), count};
}
template <typename T> std::span<const T> elements(const std::byte* data, std::size_t count) {
  return {reinterpret_cast<const T*>(data), count};
}

}  // namespace axonml::distributed::mpi
