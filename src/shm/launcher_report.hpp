// What a process axon-launch started tells the launcher when a group with
// an arena of its own fails, and learns from it of ranks that ended: the
// PyTorch backend's groups set up their shared memory through their store,
// apart from the launcher's arena, so the launcher would otherwise see only
// which rank exited first, not why, and a group's set-up would not see a
// rank that exited before it came (found by reviews).
//
// The launcher's arena is found as World::init() finds it (AXON_ARENA_FD,
// AXON_ARENA_BYTES) and mapped once per process, for its header and rank
// controls only. A process the launcher did not start reports nothing.
//
// Thread safety: any thread.
#pragma once

#include <chrono>
#include <optional>
#include <string>

namespace axonml::distributed::shm {

// Records, first caller wins, that a group failed for `reason` (its abort's
// words, ranks as the job numbers them), blaming the job's rank `job_rank`
// (-1: none), in the launcher's arena (ArenaHeader::group_failure_*). Never
// throws; does nothing outside axon-launch or when the arena cannot be mapped.
void report_group_failure_to_launcher(int job_rank, const std::string& reason) noexcept;

// Whether axon-launch started this process itself (it is the parent) as the
// job's rank `self` (RANK): only then are the job's ranks the ranks the
// caller means (a PyTorch world made by axon-launch's env://), not those of
// a world of the process's own children.
bool started_by_launcher_as(int self) noexcept;

// When axon-launch last resumed the job's ranks after stopping them (Ctrl-Z);
// the clock's epoch when it never did, and outside axon-launch.
std::chrono::steady_clock::time_point launcher_resumed_at() noexcept;

// How long a wait that began at `started` has waited, counted from the
// launcher's last resume when that came later: the time the job was held
// stopped was nobody's fault. Every wait with a timeout measures with this.
std::chrono::steady_clock::duration waited_since(std::chrono::steady_clock::time_point started) noexcept;

// The waitpid status with which axon-launch saw the job's rank `rank` end,
// if it has; nullopt while it runs, and outside axon-launch. Ask
// started_by_launcher_as() first.
std::optional<int> launcher_saw_end_of(int rank) noexcept;

}  // namespace axonml::distributed::shm
