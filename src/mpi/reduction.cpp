#include "mpi/reduction.hpp"

#include <cstdint>
#include <type_traits>

#include "mpi/typed.hpp"

namespace axonml::distributed::mpi {

std::vector<float> widen_to_f32(const std::byte* data, std::size_t count, DataType type) {
  std::vector<float> values(count);
  visit_element(type, [&](auto t) {
    using T = typename decltype(t)::type;
    const auto in = elements<T>(data, count);
    for (std::size_t i = 0; i < count; ++i) values[i] = static_cast<float>(in[i]);
  });
  return values;
}

void round_to_storage(const float* values, std::byte* data, std::size_t count, DataType type) {
  visit_element(type, [&](auto t) {
    using T = typename decltype(t)::type;
    auto out = elements<T>(data, count);
    for (std::size_t i = 0; i < count; ++i) out[i] = static_cast<T>(values[i]);
  });
}

void finish_average(std::byte* data, std::size_t count, DataType type, int n) {
  visit_element(type, [&](auto t) {
    using T = typename decltype(t)::type;
    auto values = elements<T>(data, count);
    if constexpr (std::is_floating_point_v<T>) {
      const T scale = T(1) / static_cast<T>(n);
      for (auto& v : values) v = v * scale;
    } else if constexpr (std::is_integral_v<T>) {
      for (auto& v : values) v = static_cast<T>(v / static_cast<T>(n));
    }
  });
}

}  // namespace axonml::distributed::mpi
