// Reduce kernels: combine several equally long arrays element by element.
//
// reduce() computes, for every i < count,
//     dest[i] = (((sources[0][i] op sources[1][i]) op sources[2][i]) ...)
// always in the order of `sources`, so that every rank that reduces the same
// sources gets bitwise the same result whichever kernel the CPU selects.
// Average is Sum followed by one multiplication by 1/sources.size() (integer
// types divide, truncating). bf16 and f16 are widened to f32, combined in f32
// and rounded once to nearest-even when stored. Integer Sum and Product wrap
// around (two's complement). Floating-point Min and Max propagate NaN, as
// torch.minimum and torch.maximum do: an element is NaN when any source's is,
// whichever source that is; otherwise they follow std::min/std::max (of two
// equal values, such as 0.0 and -0.0, the earlier source's stays). Every
// floating-point result that is NaN is the canonical quiet NaN (f32
// 0x7fc00000, f64 0x7ff8000000000000, bf16 0x7fc0, f16 0x7e00), whatever the
// inputs' payloads and signs: which payload an add of two NaNs passes on
// depends on operand order, which compilers choose freely and which differed
// between the scalar head/tail and the vector body (so between ranks whose
// buffers sit at different alignments). Every kernel, at every alignment,
// gives bitwise the same result.
//
// The implementation (AVX-512, AVX2 or scalar) is chosen once, at first use,
// from the CPU's features; AXON_KERNEL=scalar|avx2|avx512 overrides it.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>

#include "axonml/distributed/dtype.hpp"

namespace axonml::distributed::kernels {

// REQUIRES: sources non-empty; each source and dest hold `count` elements of
// `type`; dest overlaps no source except that it may be exactly one of them
// (every element is read from all sources before its result is stored).
void reduce(DataType type, ReduceOp op, std::span<const std::byte* const> sources,
            std::byte* dest, std::size_t count);

// reduce() for a few elements (a scalar's all-reduce): the same results,
// without the dispatcher's checks and calls (up to 4 elements one at a time,
// more in one pass per source).
// REQUIRES: as reduce(), and count <= kFewElements.
inline constexpr std::size_t kFewElements = 16;
void reduce_few(DataType type, ReduceOp op, std::span<const std::byte* const> sources,
                std::byte* dest, std::size_t count);
// The instruction set the dispatcher selected: "avx512", "avx2" or "scalar".
std::string_view selected_isa();

}  // namespace axonml::distributed::kernels
