// What a process axon-launch started tells the launcher when a group with
// an arena of its own fails: the PyTorch backend's groups set up their shared
// memory through their store, apart from the launcher's arena, so the
// launcher would otherwise see only which rank exited first, not why (found
// by a review: the summary's reason line never came for PyTorch programs).
//
// The launcher's arena is found as World::init() finds it (AXON_ARENA_FD,
// AXON_ARENA_BYTES) and mapped once per process, for its header only. A
// process the launcher did not start reports nothing.
//
// Thread safety: any thread.
#pragma once

#include <optional>
#include <string>

namespace axonml::distributed::shm {

// Records, first caller wins, that a group failed for `reason` (its abort's
// words, ranks as the job numbers them), in the launcher's arena
// (ArenaHeader::group_failure_*). Never throws; does nothing outside
// axon-launch or when the arena cannot be mapped.
void report_group_failure_to_launcher(const std::string& reason) noexcept;

// The waitpid status with which axon-launch saw the job's rank `rank` end,
// if it has; nullopt while it runs, and outside axon-launch. Only for a
// process the launcher started itself (its parent) as rank `self` (RANK):
// then the job's ranks are the ranks the caller means (a PyTorch world made
// by axon-launch's env://), not those of a world of its own children.
std::optional<int> launcher_saw_end_of(int rank, int self) noexcept;

}  // namespace axonml::distributed::shm
