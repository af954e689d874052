// The loop shared by the vector reduce kernels, written once against a lane
// type L that each ISA's file defines per element type:
//
//   T, Acc, kType, kLanes, Reg   storage type, accumulator type, DataType,
//                                elements per register, register type
//   load(const T*) / store(T*, Reg) / stream(T*, Reg)
//                                widen kLanes elements / round and store them
//                                (stream: non-temporal, kLanes * sizeof(T)
//                                aligned)
//   load_acc(const Acc*) / store_acc(Acc*, Reg)   the f32/f64/int scratch
//   combine<op>(Reg acc, Reg x)  acc op x, exactly as the scalar kernel
//   scale(Reg, Acc)              Reg * scale (floating point only)
//   canonical_nan(Reg)           every NaN lane replaced by the default quiet
//                                NaN (floating point only; as reduce_scalar)
//
// Included by each ISA's file after its `#pragma GCC target`, so that every
// function here is compiled for that ISA. L is local to that file, which
// keeps the instantiations of different ISAs apart.
//
// Step by step, for elements [begin, end):
//   1. Elements before the first aligned output vector (on long runs) and
//      after the last whole step go to reduce_scalar, which the vector code
//      matches bitwise.
//   2. The rest goes in blocks whose accumulators fit in L1. Each block is
//      reduced source by source in order, kUnroll registers at a time: load
//      sources[0], combine sources[1], sources[2], ... into the registers, then
//      round and store once. With more than kGroup sources (more streams than
//      the prefetchers follow) the block is summed in groups of kGroup
//      sources into an L1 scratch of Acc, so the order and the single
//      rounding stay.
//   3. Integer Average divides the block's wrapped sum, truncating, element by
//      element (no vector integer division).
//   4. Floating-point results that are NaN become the canonical quiet NaN,
//      exactly as in reduce_scalar, so that which NaN an add or a Min meets
//      first (the operand order, the alignment split, the member) never
//      shows.
//   5. Large outputs are written with non-temporal stores (no read for
//      ownership of lines that are wholly overwritten), fenced at the end.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "kernels/reduce_isa.hpp"

namespace axonml::distributed::kernels {
namespace {

constexpr std::size_t kUnroll = 4;
constexpr std::size_t kGroup = 8;
constexpr std::size_t kScratchBytes = 8192;
// Outputs at least this large bypass the caches (larger than L2 here).
constexpr std::size_t kStreamBytes = std::size_t{4} << 20;

template <class L> const typename L::T* source_at(std::span<const std::byte* const> sources,
                                                  std::size_t s, std::size_t index) {
  return reinterpret_cast<const typename L::T*>(sources[s]) + index;
}

// Where a pass starts from, and where its result goes.
enum class PassInput { FirstSource, Scratch };
enum class PassOutput { Scratch, Dest, DestStreaming };  // Streaming: non-temporal stores

// One pass over `len` elements (a multiple of kUnroll * kLanes) starting at
// element `base`: head (sources[0] or the scratch) combined with sources
// [first, last), written to dest (rounded, scaled) or to the scratch.
template <class L, ReduceOp kOp, PassInput kInput, PassOutput kOutput>
void pass(std::span<const std::byte* const> sources, std::size_t first, std::size_t last,
          typename L::Acc* scratch, typename L::T* dest, std::size_t base, std::size_t len,
          typename L::Acc scale) {
  using Reg = typename L::Reg;
  constexpr std::size_t kStep = kUnroll * L::kLanes;
  for (std::size_t i = 0; i < len; i += kStep) {
    Reg r[kUnroll];
    if constexpr (kInput == PassInput::Scratch) {
      for (std::size_t u = 0; u < kUnroll; ++u) r[u] = L::load_acc(scratch + i + u * L::kLanes);
    } else {
      const typename L::T* head = source_at<L>(sources, 0, base + i);
      for (std::size_t u = 0; u < kUnroll; ++u) r[u] = L::load(head + u * L::kLanes);
    }
    for (std::size_t s = first; s < last; ++s) {
      const typename L::T* src = source_at<L>(sources, s, base + i);
      for (std::size_t u = 0; u < kUnroll; ++u)
        r[u] = L::template combine<kOp>(r[u], L::load(src + u * L::kLanes));
    }
    if constexpr (kOutput != PassOutput::Scratch) {
      if constexpr (kOp == ReduceOp::Average && !std::is_integral_v<typename L::Acc>) {
        for (std::size_t u = 0; u < kUnroll; ++u) r[u] = L::scale(r[u], scale);
      }
      if constexpr (!std::is_integral_v<typename L::Acc>) {
        for (std::size_t u = 0; u < kUnroll; ++u) r[u] = L::canonical_nan(r[u]);
      }
      typename L::T* out = dest + base + i;
      for (std::size_t u = 0; u < kUnroll; ++u) {
        if constexpr (kOutput == PassOutput::DestStreaming) {
          L::stream(out + u * L::kLanes, r[u]);
        } else {
          L::store(out + u * L::kLanes, r[u]);
        }
      }
    } else {
      for (std::size_t u = 0; u < kUnroll; ++u) L::store_acc(scratch + i + u * L::kLanes, r[u]);
    }
  }
}

template <class L, ReduceOp kOp, PassOutput kToDest>
void vector_body(std::span<const std::byte* const> sources, typename L::T* dest,
                 std::size_t begin, std::size_t end) {
  using Acc = typename L::Acc;
  constexpr std::size_t kStep = kUnroll * L::kLanes;
  constexpr std::size_t kBlock = std::max(kStep, kScratchBytes / sizeof(Acc) / kStep * kStep);
  alignas(64) Acc scratch[kBlock];
  const std::size_t n = sources.size();
  const Acc scale = kOp == ReduceOp::Average && !std::is_integral_v<Acc>
                        ? Acc(1) / static_cast<Acc>(n) : Acc(0);
  for (std::size_t base = begin; base < end; base += kBlock) {
    const std::size_t len = std::min(kBlock, end - base);
    if (n <= kGroup) {
      pass<L, kOp, PassInput::FirstSource, kToDest>(sources, 1, n, scratch, dest, base, len, scale);
    } else {
      pass<L, kOp, PassInput::FirstSource, PassOutput::Scratch>(sources, 1, kGroup, scratch, dest,
                                                                base, len, scale);
      std::size_t s = kGroup;
      for (; n - s > kGroup; s += kGroup)
        pass<L, kOp, PassInput::Scratch, PassOutput::Scratch>(sources, s, s + kGroup, scratch, dest,
                                                              base, len, scale);
      pass<L, kOp, PassInput::Scratch, kToDest>(sources, s, n, scratch, dest, base, len, scale);
    }
    if constexpr (kOp == ReduceOp::Average && std::is_integral_v<Acc>) {
      for (std::size_t i = base; i < base + len; ++i) dest[i] = dest[i] / static_cast<Acc>(n);
    }
  }
}

template <class L, ReduceOp kOp>
void reduce_op(std::span<const std::byte* const> sources, std::byte* dest_bytes,
               std::size_t begin, std::size_t end) {
  using T = typename L::T;
  constexpr std::size_t kStep = kUnroll * L::kLanes;
  constexpr std::size_t kAlign = L::kLanes * sizeof(T);
  T* dest = reinterpret_cast<T*>(dest_bytes);
  const auto address = reinterpret_cast<std::uintptr_t>(dest + begin);
  const bool integer_average = kOp == ReduceOp::Average && std::is_integral_v<typename L::Acc>;
  const bool stream = (end - begin) * sizeof(T) >= kStreamBytes && !integer_average &&
                      address % sizeof(T) == 0;
  // Aligned stores never split a cache line; worth a short scalar head once
  // the body is long.
  std::size_t head = begin;
  if ((end - begin) >= 16 * kStep && address % sizeof(T) == 0)
    head += (kAlign - address % kAlign) % kAlign / sizeof(T);
  const std::size_t body_end = head + (end - head) / kStep * kStep;
  if (head > begin) reduce_scalar(L::kType, kOp, sources, dest_bytes, begin, head);
  if (stream) {
    vector_body<L, kOp, PassOutput::DestStreaming>(sources, dest, head, body_end);
    L::fence();
  } else {
    vector_body<L, kOp, PassOutput::Dest>(sources, dest, head, body_end);
  }
  if (body_end < end) reduce_scalar(L::kType, kOp, sources, dest_bytes, body_end, end);
}

template <class L>
void reduce_lanes(ReduceOp op, std::span<const std::byte* const> sources, std::byte* dest,
                  std::size_t begin, std::size_t end) {
  switch (op) {
    case ReduceOp::Sum: return reduce_op<L, ReduceOp::Sum>(sources, dest, begin, end);
    case ReduceOp::Product: return reduce_op<L, ReduceOp::Product>(sources, dest, begin, end);
    case ReduceOp::Min: return reduce_op<L, ReduceOp::Min>(sources, dest, begin, end);
    case ReduceOp::Max: return reduce_op<L, ReduceOp::Max>(sources, dest, begin, end);
    case ReduceOp::Average: return reduce_op<L, ReduceOp::Average>(sources, dest, begin, end);
  }
}

}  // namespace
}  // namespace axonml::distributed::kernels
