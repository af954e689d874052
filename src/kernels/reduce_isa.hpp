// The per-instruction-set reduce kernels behind kernels::reduce().
//
// Each kernel implements the contract of reduce.hpp for the element range
// [begin, end): the vector kernels hand any part shorter than their vectors to
// reduce_scalar, so every kernel gives bitwise the scalar kernel's results.
// Tests call the kernels one by one through reduce_with(); programs call
// reduce(), which uses the one the dispatcher chose.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>

#include "axonml/distributed/dtype.hpp"
#include "kernels/reduce.hpp"

namespace axonml::distributed::kernels {

enum class Isa { Scalar, Avx2, Avx512 };

std::string_view to_string(Isa isa);

// Whether this CPU can run the kernel (AVX2 also needs FMA-era F16C for f16).
bool isa_supported(Isa isa);

// Up to kFewElements (reduce.hpp) reduce_scalar takes its few-element path
// (reduce_few), and reduce() sends such counts there whatever kernel was
// chosen: the vector kernels' set-up (alignment split, blocks) costs more
// than such a count's arithmetic.

// REQUIRES: begin <= end; as reduce() for elements [begin, end).
void reduce_scalar(DataType type, ReduceOp op, std::span<const std::byte* const> sources,
                   std::byte* dest, std::size_t begin, std::size_t end);
// REQUIRES: additionally isa_supported() of their ISA.
void reduce_avx2(DataType type, ReduceOp op, std::span<const std::byte* const> sources,
                 std::byte* dest, std::size_t begin, std::size_t end);
void reduce_avx512(DataType type, ReduceOp op, std::span<const std::byte* const> sources,
                   std::byte* dest, std::size_t begin, std::size_t end);

// reduce() with a chosen kernel. REQUIRES: isa_supported(isa).
void reduce_with(Isa isa, DataType type, ReduceOp op, std::span<const std::byte* const> sources,
                 std::byte* dest, std::size_t count);

// The kernel AXON_KERNEL names, else the best this CPU supports. Throws
// InvalidArgument for an unknown name or an ISA this CPU lacks.
Isa choose_isa();

}  // namespace axonml::distributed::kernels
