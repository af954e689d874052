// Portable reduce kernels. The compiler vectorizes the inner loops for the
// baseline ISA; the explicitly vectorized kernels sit beside this file.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kernels/reduce.hpp"

namespace axonml::distributed::kernels {
namespace {

// Storage type T, accumulated in Acc, in blocks that stay in L1.
template <typename T, typename Acc>
void reduce_typed(ReduceOp op, std::span<const std::byte* const> sources, std::byte* dest_bytes,
                  std::size_t count) {
  constexpr std::size_t kBlock = 1024;
  Acc acc[kBlock];
  T* dest = reinterpret_cast<T*>(dest_bytes);
  const std::size_t n = sources.size();
  for (std::size_t base = 0; base < count; base += kBlock) {
    const std::size_t len = std::min(kBlock, count - base);
    const T* first = reinterpret_cast<const T*>(sources[0]) + base;
    for (std::size_t i = 0; i < len; ++i) acc[i] = static_cast<Acc>(first[i]);
    for (std::size_t s = 1; s < n; ++s) {
      const T* src = reinterpret_cast<const T*>(sources[s]) + base;
      switch (op) {
        case ReduceOp::Sum:
        case ReduceOp::Average:
          for (std::size_t i = 0; i < len; ++i) acc[i] = acc[i] + static_cast<Acc>(src[i]);
          break;
        case ReduceOp::Product:
          for (std::size_t i = 0; i < len; ++i) acc[i] = acc[i] * static_cast<Acc>(src[i]);
          break;
        case ReduceOp::Min:
          for (std::size_t i = 0; i < len; ++i) acc[i] = std::min(acc[i], static_cast<Acc>(src[i]));
          break;
        case ReduceOp::Max:
          for (std::size_t i = 0; i < len; ++i) acc[i] = std::max(acc[i], static_cast<Acc>(src[i]));
          break;
      }
    }
    if (op == ReduceOp::Average) {
      if constexpr (std::is_floating_point_v<Acc>) {
        const Acc scale = Acc(1) / static_cast<Acc>(n);
        for (std::size_t i = 0; i < len; ++i) acc[i] = acc[i] * scale;
      } else {
        for (std::size_t i = 0; i < len; ++i) acc[i] = acc[i] / static_cast<Acc>(n);
      }
    }
    for (std::size_t i = 0; i < len; ++i) dest[base + i] = static_cast<T>(acc[i]);
  }
}

}  // namespace

void reduce(DataType type, ReduceOp op, std::span<const std::byte* const> sources,
            std::byte* dest, std::size_t count) {
  switch (type) {
    case DataType::F32: return reduce_typed<float, float>(op, sources, dest, count);
    case DataType::F64: return reduce_typed<double, double>(op, sources, dest, count);
    case DataType::BF16: return reduce_typed<bfloat16, float>(op, sources, dest, count);
    case DataType::F16: return reduce_typed<float16, float>(op, sources, dest, count);
    case DataType::I32: return reduce_typed<std::int32_t, std::int32_t>(op, sources, dest, count);
    case DataType::I64: return reduce_typed<std::int64_t, std::int64_t>(op, sources, dest, count);
  }
}

std::string_view selected_isa() { return "scalar"; }

}  // namespace axonml::distributed::kernels
