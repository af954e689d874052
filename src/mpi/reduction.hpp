// How the hierarchical all_reduce keeps the reduction semantics of the
// kernels (see src/kernels/reduce.hpp) across its two levels: bf16 and f16
// are widened to f32 first and rounded once afterwards, and Average is Sum
// followed by one scaling by 1/n (integers divide). Flat reductions need
// none of this: the kernels combine them directly (mpi/ordered.hpp).
#pragma once

#include <cstddef>
#include <vector>

#include "axonml/distributed/dtype.hpp"

namespace axonml::distributed::mpi {

inline bool is_half(DataType type) { return type == DataType::BF16 || type == DataType::F16; }

// The bf16 / f16 values of `data` as f32 (the kernels widen the same way).
std::vector<float> widen_to_f32(const std::byte* data, std::size_t count, DataType type);
// Rounds f32 values to nearest-even bf16 / f16 into `data`: the kernels'
// round_to_storage, for a whole array.
void round_to_storage(const float* values, std::byte* data, std::size_t count, DataType type);

// Sum -> Average over n ranks, as the kernels do it: floating types multiply
// by 1/n (computed in the type), integers divide (truncating).
// REQUIRES: type is F32, F64, I32 or I64.
void finish_average(std::byte* data, std::size_t count, DataType type, int n);

}  // namespace axonml::distributed::mpi
