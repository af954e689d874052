// CollectiveOp: which collective a rank is running, as recorded in the
// descriptor that every collective posts (src/shm/arena_layout.hpp stores it
// as one byte) and named in mismatch errors.
//
// Thread safety: plain values and a pure function.
#pragma once

#include <cstdint>
#include <string>
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

// One collective call as every backend's errors show it, from the fields of
// its descriptor (shm::Descriptor, mpi::CallDescriptor): "barrier()",
// "new_group(3 ranks, list hash H)" (H = `detail`), "all_reduce(f32, 100,
// sum)", "broadcast(f32, 5, root 1)". `dtype` is a DataType, `reduce_op` a
// ReduceOp or 0xff for none, `root` -1 for none; a non-empty `note` ends the
// list (", shared buffer").
std::string call_text(std::uint8_t op, std::uint8_t dtype, std::uint64_t count,
                      std::uint8_t reduce_op, std::int32_t root, std::uint64_t detail,
                      std::string_view note = {});

// The step a transport's descriptor carries for a rank's first collective
// on a group after it refused a second thread's call there
// (Backend::held_by_another_thread), with `root` naming that rank: no two
// ranks' descriptors of such a call agree, so it fails on every member,
// even where every rank refused alike. Layers label steps 1-254.
inline constexpr std::uint8_t kAfterRefusedThreadStep = 255;
// " after another thread's call on this group was refused on rank 2", for
// a descriptor marked kAfterRefusedThreadStep; `rank` is that rank's name.
std::string after_refused_thread_text(const std::string& rank);

// Names step `step` (1-254) of a layer built on the runtime, as the
// collectives it marks with Backend::label_next_collective show in mismatch
// messages; every process of the job names its steps the same (the same
// library does it), so a peer's step is named too. Thread-safe.
void name_internal_step(std::uint8_t step, std::string name);
// "internal step 3: <its name>", or "internal step 3" where none was given.
std::string internal_step_text(std::uint8_t step);

// What a mismatch between call numbers means, for its error: "; the ranks
// are out of step: rank 1 has made 1 more collective in this group than
// this rank (...)". `peer` is the other rank's name ("rank 1"); empty when
// the numbers agree.
std::string out_of_step_text(std::uint64_t mine, std::uint64_t theirs, const std::string& peer);

}  // namespace axonml::distributed
