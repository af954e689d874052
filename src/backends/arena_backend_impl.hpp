// The state behind an ArenaBackend, shared with the transports that build one.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <utility>
#include <vector>

#include "axonml/distributed/arena_backend.hpp"
#include "backends/arena_channel.hpp"
#include "backends/point_to_point.hpp"
#include "shm/arena_allocator.hpp"
#include "shm/arena_layout.hpp"
#include "shm/exit_guard.hpp"
#include "shm/wait.hpp"

namespace axonml::distributed {

// One rank's attachment to an arena; shared by its world backend and every
// subgroup backend it creates.
struct RankState {
  RankState(std::shared_ptr<void> memory_owner, std::byte* arena_base, int rank,
            std::chrono::milliseconds timeout, const std::vector<int>& peer_pids, RankNames names = {},
            int job_size = 0);
  RankState(const RankState&) = delete;
  RankState& operator=(const RankState&) = delete;

  std::shared_ptr<void> memory;  // keeps the arena mapped
  std::byte* base;
  shm::ArenaHeader& header;
  int world_rank;
  shm::WaitContext waits;
  shm::ArenaAllocator allocator;
  PointToPoint p2p;
  // Set when a zero-copy all-reduce failed after this rank published its
  // buffer: a peer may still be writing its reduced slice there (it cannot be
  // stopped mid-copy), so from then on this rank's shared buffers are never
  // given back to the allocator, lest a late write land in a new one.
  std::atomic<bool> keep_shared_buffers{false};
};

// One member's hold on a group area that new_group() took from the arena.
// The area goes back when the last member lets go (GroupHeader::holders), so
// no member can still be reading a peer's slot in it. Empty for the world's
// area, which lives as long as the arena.
class GroupAreaHold {
 public:
  GroupAreaHold() = default;
  // REQUIRES: the area at `offset` counts this member among its holders.
  GroupAreaHold(std::shared_ptr<RankState> state, std::uint64_t offset)
      : state_(std::move(state)), offset_(offset) {}
  GroupAreaHold(GroupAreaHold&& other) noexcept
      : state_(std::move(other.state_)), offset_(std::exchange(other.offset_, 0)) {}
  GroupAreaHold& operator=(GroupAreaHold&&) = delete;
  ~GroupAreaHold();

 private:
  std::shared_ptr<RankState> state_;
  std::uint64_t offset_ = 0;
};

struct ArenaBackend::Impl {
  Impl(std::shared_ptr<RankState> state, shm::GroupHeader* group, int member,
       std::vector<int> world_ranks, GroupAreaHold area = {});

  // The world endpoint of `rank` in a formatted arena at `arena_base`;
  // `peer_pids`, `names` and `job_size` as for shm::WaitContext (empty: the
  // peers are not watched; every rank named by itself; 0: the world is the job).
  static std::unique_ptr<Impl> attach_world(std::shared_ptr<void> memory_owner,
                                            std::byte* arena_base, int rank,
                                            std::chrono::milliseconds timeout,
                                            const std::vector<int>& peer_pids = {}, RankNames names = {},
                                            int job_size = 0);

  // Whether [p, p + bytes) lies in this rank's mapping of the arena.
  bool in_arena(const std::byte* p, std::size_t bytes) const;

  // Holds one collective `op` of this endpoint (its caller holds the
  // endpoint's Backend::ThreadClaim), or one send or recv, counted for this
  // process's exit where the rank's waits end at exit (shm/exit_guard.hpp:
  // axon-launch's).
  shm::CallInFlight collective(const char* op) {
    return shm::CallInFlight(calls, shm::CallInFlight::Kind::Collective, op, state->waits,
                             [this] { return channel.group_name(); });
  }
  shm::CallInFlight message(const char* op) {
    return shm::CallInFlight(calls, shm::CallInFlight::Kind::Message, op, state->waits,
                             [this] { return channel.group_name(); });
  }

  std::shared_ptr<RankState> state;
  GroupAreaHold area;    // released after the channel is gone
  ArenaChannel channel;
  // collectives::one_round_all_reduce_limit of the channel, once: it is asked
  // on every all-reduce, where a few dozen instructions are a measurable
  // part of a 4-byte one.
  std::size_t one_round_limit;
  // Buffers in the arena larger than this skip the copy in (zero copy, three
  // rounds); smaller ones take the one-round path like private ones. At
  // least kZeroCopyMinBytes: at n=8 on 2 cores an 8 KiB zero-copy
  // all-reduce took 1.5x the one-round time, 16 KiB was even, 32-128 KiB
  // 0.24-0.68x (7 interleaved rounds; at n=2 from 32 KiB 0.65-0.83x).
  static constexpr std::size_t kZeroCopyMinBytes = std::size_t{8} << 10;
  std::size_t zero_copy_limit;
  // This endpoint's calls, for the exit of a guarded rank (counted from
  // the start where state->waits.waits_end_at_exit(); the world's, made
  // before its rank was guarded, from ShmBackend::from_environment).
  shm::EndpointCalls calls;
};

}  // namespace axonml::distributed
