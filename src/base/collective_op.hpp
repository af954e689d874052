// CollectiveOp: which collective a rank is running, as recorded in the
// descriptor that every collective posts (src/shm/arena_layout.hpp stores it
// as one byte) and named in mismatch errors.
//
// Thread safety: plain values and a pure function.
#pragma once

#include <cstdint>
#include <string_view>

namespace axonml::distributed {

enum class CollectiveOp : std::uint32_t {
  AllReduce = 1,
  Broadcast,
  AllGather,
  ReduceScatter,
  Gather,
  Scatter,
  Reduce,
  Barrier,
  NewGroup,
  AllToAll,
};

// "all_reduce", "new_group", …; "unknown-collective" for a value outside the enum.
std::string_view to_string(CollectiveOp op);

}  // namespace axonml::distributed
