// The portable reduce kernel: the reference every vector kernel must match
// bitwise. The compiler may vectorize it for the baseline ISA.
#include <algorithm>
#include <cmath>
#include <limits>
#include <cstdint>
#include <type_traits>

#include "base/check.hpp"
#include "kernels/reduce_isa.hpp"

namespace axonml::distributed::kernels {
namespace {

// Integer Sum and Product wrap (computed in the unsigned type) instead of
// overflowing, which C++ leaves undefined for signed types.
template <typename Acc> Acc add(Acc a, Acc b) {
  if constexpr (std::is_integral_v<Acc>) {
    using U = std::make_unsigned_t<Acc>;
    return static_cast<Acc>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}

template <typename Acc> Acc multiply(Acc a, Acc b) {
  if constexpr (std::is_integral_v<Acc>) {
    using U = std::make_unsigned_t<Acc>;
    return static_cast<Acc>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}

// Min and Max of floating point propagate NaN: a NaN from any source makes
// the element NaN, whichever member holds it (std::min alone keeps a NaN
// already in the accumulator but passes over one from a later source, so the
// answer would depend on which rank's gradient went NaN). Otherwise as
// std::min / std::max: x replaces acc only when strictly smaller (larger), so
// of two equal zeros the earlier source's stays.
template <typename Acc> Acc minimum(Acc acc, Acc x) {
  if constexpr (std::is_floating_point_v<Acc>) return (x < acc || std::isnan(x)) ? x : acc;
  else return std::min(acc, x);
}

template <typename Acc> Acc maximum(Acc acc, Acc x) {
  if constexpr (std::is_floating_point_v<Acc>) return (acc < x || std::isnan(x)) ? x : acc;
  else return std::max(acc, x);
}

template <typename Acc, ReduceOp Op> Acc combine(Acc acc, Acc x) {
  if constexpr (Op == ReduceOp::Sum || Op == ReduceOp::Average) return add(acc, x);
  if constexpr (Op == ReduceOp::Product) return multiply(acc, x);
  if constexpr (Op == ReduceOp::Min) return minimum(acc, x);
  if constexpr (Op == ReduceOp::Max) return maximum(acc, x);
}

// An element's accumulator after the last source: Average's scale, then the
// canonical NaN for a floating-point result (see reduce_typed).
template <typename Acc, ReduceOp Op> Acc finish(Acc acc, std::size_t n) {
  if constexpr (Op == ReduceOp::Average) {
    if constexpr (std::is_floating_point_v<Acc>) {
      acc = acc * (Acc(1) / static_cast<Acc>(n));
    } else {
      acc = acc / static_cast<Acc>(n);
    }
  }
  if constexpr (std::is_floating_point_v<Acc>) {
    if (std::isnan(acc)) acc = std::numeric_limits<Acc>::quiet_NaN();
  }
  return acc;
}

// At most kFewElements elements [begin, end) (a scalar's all-reduce, a
// vector kernel's tail): the same operations in the same order as
// reduce_typed below, so bitwise its results, without the blocks that cost
// more than the arithmetic when there are only a few. The op is a template
// argument, so no loop carries a switch. Up to 4 elements (any scalar of 8
// bytes) go element by element; more in one pass per source over an
// accumulator on the stack, which the compiler vectorizes (16 floats of two
// sources: 273 -> about 155 instructions; for one element the passes' set-up
// costs more than the element).
template <typename T, typename Acc, ReduceOp Op>
void reduce_few_by_element(std::span<const std::byte* const> sources, T* dest, std::size_t begin,
                           std::size_t end) {
  const std::size_t n = sources.size();
  for (std::size_t i = begin; i < end; ++i) {
    Acc acc = static_cast<Acc>(reinterpret_cast<const T*>(sources[0])[i]);
    for (std::size_t s = 1; s < n; ++s) {
      acc = combine<Acc, Op>(acc, static_cast<Acc>(reinterpret_cast<const T*>(sources[s])[i]));
    }
    dest[i] = static_cast<T>(finish<Acc, Op>(acc, n));
  }
}

// Not inlined into reduce_few_typed: its accumulator's frame would otherwise
// weigh on the one-element calls too (+20 instructions for a scalar).
template <typename T, typename Acc, ReduceOp Op>
[[gnu::noinline]] void reduce_few_by_source(std::span<const std::byte* const> sources, T* dest, std::size_t begin,
                          std::size_t end) {
  const std::size_t n = sources.size();
  const std::size_t len = end - begin;
  Acc acc[kFewElements];
  const T* first = reinterpret_cast<const T*>(sources[0]) + begin;
  for (std::size_t i = 0; i < len; ++i) acc[i] = static_cast<Acc>(first[i]);
  for (std::size_t s = 1; s < n; ++s) {
    const T* src = reinterpret_cast<const T*>(sources[s]) + begin;
    for (std::size_t i = 0; i < len; ++i) acc[i] = combine<Acc, Op>(acc[i], static_cast<Acc>(src[i]));
  }
  for (std::size_t i = 0; i < len; ++i) dest[begin + i] = static_cast<T>(finish<Acc, Op>(acc[i], n));
}

template <typename T, typename Acc, ReduceOp Op>
void reduce_few_with(std::span<const std::byte* const> sources, T* dest, std::size_t begin,
                     std::size_t end) {
  check::less_equal(end - begin, kFewElements, "reduce_few: at most kFewElements elements");
  if (end - begin <= 4) return reduce_few_by_element<T, Acc, Op>(sources, dest, begin, end);
  reduce_few_by_source<T, Acc, Op>(sources, dest, begin, end);
}

template <typename T, typename Acc>
void reduce_few_typed(ReduceOp op, std::span<const std::byte* const> sources, T* dest, std::size_t begin,
                      std::size_t end) {
  switch (op) {
    case ReduceOp::Sum: return reduce_few_with<T, Acc, ReduceOp::Sum>(sources, dest, begin, end);
    case ReduceOp::Product: return reduce_few_with<T, Acc, ReduceOp::Product>(sources, dest, begin, end);
    case ReduceOp::Min: return reduce_few_with<T, Acc, ReduceOp::Min>(sources, dest, begin, end);
    case ReduceOp::Max: return reduce_few_with<T, Acc, ReduceOp::Max>(sources, dest, begin, end);
    case ReduceOp::Average: return reduce_few_with<T, Acc, ReduceOp::Average>(sources, dest, begin, end);
  }
}

// Storage type T, accumulated in Acc, in blocks that stay in L1.
template <typename T, typename Acc>
void reduce_typed(ReduceOp op, std::span<const std::byte* const> sources, std::byte* dest_bytes,
                  std::size_t begin, std::size_t end) {
  if (end - begin <= kFewElements) return reduce_few_typed<T, Acc>(op, sources, reinterpret_cast<T*>(dest_bytes), begin, end);
  constexpr std::size_t kBlock = 1024;
  Acc acc[kBlock];
  T* dest = reinterpret_cast<T*>(dest_bytes);
  const std::size_t n = sources.size();
  for (std::size_t base = begin; base < end; base += kBlock) {
    const std::size_t len = std::min(kBlock, end - base);
    const T* first = reinterpret_cast<const T*>(sources[0]) + base;
    for (std::size_t i = 0; i < len; ++i) acc[i] = static_cast<Acc>(first[i]);
    for (std::size_t s = 1; s < n; ++s) {
      const T* src = reinterpret_cast<const T*>(sources[s]) + base;
      switch (op) {
        case ReduceOp::Sum:
        case ReduceOp::Average:
          for (std::size_t i = 0; i < len; ++i) acc[i] = add(acc[i], static_cast<Acc>(src[i]));
          break;
        case ReduceOp::Product:
          for (std::size_t i = 0; i < len; ++i) acc[i] = multiply(acc[i], static_cast<Acc>(src[i]));
          break;
        case ReduceOp::Min:
          for (std::size_t i = 0; i < len; ++i) acc[i] = minimum(acc[i], static_cast<Acc>(src[i]));
          break;
        case ReduceOp::Max:
          for (std::size_t i = 0; i < len; ++i) acc[i] = maximum(acc[i], static_cast<Acc>(src[i]));
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
    // A NaN result leaves as the one canonical quiet NaN: which input NaN's
    // payload an add or multiply passes on depends on operand order, which
    // compilers choose freely, and which member's NaN a Min or Max met first
    // must not show either (see reduce.hpp).
    if constexpr (std::is_floating_point_v<Acc>) {
      for (std::size_t i = 0; i < len; ++i) {
        if (std::isnan(acc[i])) acc[i] = std::numeric_limits<Acc>::quiet_NaN();
      }
    }
    for (std::size_t i = 0; i < len; ++i) dest[base + i] = static_cast<T>(acc[i]);
  }
}

}  // namespace

// kernels::reduce_few (reduce.hpp): the scalar kernel's own few-element path.
void reduce_few(DataType type, ReduceOp op, std::span<const std::byte* const> sources,
                std::byte* dest, std::size_t count) {
  switch (type) {
    case DataType::F32: return reduce_few_typed<float, float>(op, sources, reinterpret_cast<float*>(dest), 0, count);
    case DataType::F64:
      return reduce_few_typed<double, double>(op, sources, reinterpret_cast<double*>(dest), 0, count);
    case DataType::BF16:
      return reduce_few_typed<bfloat16, float>(op, sources, reinterpret_cast<bfloat16*>(dest), 0, count);
    case DataType::F16:
      return reduce_few_typed<float16, float>(op, sources, reinterpret_cast<float16*>(dest), 0, count);
    case DataType::I32:
      return reduce_few_typed<std::int32_t, std::int32_t>(op, sources, reinterpret_cast<std::int32_t*>(dest), 0, count);
    case DataType::I64:
      return reduce_few_typed<std::int64_t, std::int64_t>(op, sources, reinterpret_cast<std::int64_t*>(dest), 0, count);
  }
}

void reduce_scalar(DataType type, ReduceOp op, std::span<const std::byte* const> sources,
                   std::byte* dest, std::size_t begin, std::size_t end) {
  switch (type) {
    case DataType::F32: return reduce_typed<float, float>(op, sources, dest, begin, end);
    case DataType::F64: return reduce_typed<double, double>(op, sources, dest, begin, end);
    case DataType::BF16: return reduce_typed<bfloat16, float>(op, sources, dest, begin, end);
    case DataType::F16: return reduce_typed<float16, float>(op, sources, dest, begin, end);
    case DataType::I32: return reduce_typed<std::int32_t, std::int32_t>(op, sources, dest, begin, end);
    case DataType::I64: return reduce_typed<std::int64_t, std::int64_t>(op, sources, dest, begin, end);
  }
}

}  // namespace axonml::distributed::kernels
