// Whether the ranks of a group passed the same list of shapes: what DDP
// checks of its parameters at construction, and the tensor helpers
// (scatter_tensor, gather_tensor, sync_gradients) of their arguments, whose
// data collectives compare element counts only.
//
// Thread safety: a collective on `pg`; as any of its ops.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "axonml/distributed/process_group.hpp"
#include "axonml/distributed/tensor.hpp"

namespace axonml::distributed {

// Where a rank's list first differs from rank 0's.
struct ShapeDisagreement {
  static constexpr std::size_t kOnlyExtra = static_cast<std::size_t>(-1);
  int rank = 0;                    // the first rank found to differ from rank 0
  std::size_t rank0_count = 0;     // the lists' lengths
  std::size_t other_count = 0;
  std::int64_t rank0_extra = 0;    // the `extra` each passed
  std::int64_t other_extra = 0;
  std::size_t index = kOnlyExtra;  // the first position whose shapes differ; kOnlyExtra: none do
  std::string rank0_shape;         // "[2, 3]" (more than 6 dims folded into the sixth), or `missing`
  std::string other_shape;
};

// Collective over pg: one all_gather of (count, digest of every shape,
// `extra`) per rank and, only when the counts or digests differ, one of
// every rank's shapes. `extra` is compared too (a split dim, say). Returns
// nothing when every rank passed the same; `missing` stands for a shape past
// the end of a shorter list. Every rank gets the same answer.
std::optional<ShapeDisagreement> find_shape_disagreement(const std::vector<Shape>& shapes, std::int64_t extra,
                                                         const ProcessGroup& pg, const std::string& missing);

}  // namespace axonml::distributed
