// ArenaChannel: a RoundChannel over one GroupArea of an arena.
//
// Adds to the bare round protocol the safety net every collective gets: the
// first exchange of each collective posts a Descriptor (op, type, count,
// root, reduce op, call number) and its 64-bit hash beside the round counter,
// and every member compares all peers' hashes with its own before touching
// their data (the descriptors themselves only to describe a difference),
// so ranks that disagree get a CollectiveMismatch naming both sides instead
// of corrupt data or a hang.
//
// While it waits for a round it also drains the rank's inbound point-to-point
// mailboxes (PointToPoint::progress), and sleeps on the rank's traffic bell as
// well as the group's: a peer that sent before joining the collective must
// not wait for this rank's recv, which comes only after the collective.
//
// Thread safety: one thread per member.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "axonml/distributed/dtype.hpp"
#include "backends/point_to_point.hpp"
#include "base/check.hpp"
#include "base/collective_op.hpp"
#include "collectives/round_channel.hpp"
#include "shm/arena_layout.hpp"
#include "shm/wait.hpp"

namespace axonml::distributed {

// What one rank is about to run; the argument of ArenaChannel::begin().
struct CollectiveCall {
  CollectiveOp op;
  DataType type = DataType::F32;
  std::size_t count = 0;
  int root = -1;
  bool has_reduce_op = false;
  ReduceOp reduce_op = ReduceOp::Sum;
  std::uint64_t detail = 0;  // NewGroup: hash of the list; others: kSharedBuffer or 0
};

// CollectiveCall::detail of a collective on buffers in the arena (zero copy):
// every rank must pass one, so it is part of what ranks must agree on.
inline constexpr std::uint64_t kSharedBuffer = 1;
// CollectiveCall::detail of an all-reduce that takes the pipelined algorithm:
// which one a size takes follows AXON_ALLREDUCE_ONE_ROUND_BYTES, read by
// each rank, so members that chose differently get a mismatch error naming
// it (they returned different sums; found by a review).
inline constexpr std::uint64_t kPipelined = 2;

class ArenaChannel final : public collectives::RoundChannel {
 public:
  // `group` points at the group's GroupHeader; `world_ranks` are its members;
  // `p2p` is the rank's point-to-point endpoint, drained while waiting.
  ArenaChannel(std::byte* arena_base, shm::GroupHeader* group, std::size_t slot_bytes, int member,
               std::vector<int> world_ranks, const shm::WaitContext& waits, PointToPoint& p2p);

  // Starts a collective: its first exchange() posts and checks `call`.
  void begin(const CollectiveCall& call);
  // Counts a call this member refused before begin() (its arguments failed a
  // check): its next call then carries the number after it, which its peers
  // still in the refused call see as out of step (Backend::count_refused_collective).
  void count_refused_call() { ++calls_; }
  // The next begin() posts `step` in its descriptor (Backend::label_next_collective).
  void label_next(std::uint8_t step) {
    check::that(step != kAfterRefusedThreadStep, "label_next: step 255 is kAfterRefusedThreadStep's");
    if (next_step_ != kAfterRefusedThreadStep) next_step_ = step;  // a pending mark outranks a label
  }
  // The next begin() posts a descriptor no peer's can equal
  // (kAfterRefusedThreadStep; Backend::do_mark_after_refused_thread).
  void mark_after_refused_thread() { next_step_ = kAfterRefusedThreadStep; }

  int rank() const override { return member_; }
  int size() const override { return static_cast<int>(world_ranks_.size()); }
  std::size_t slot_bytes() const override { return slot_bytes_; }
  std::byte* outbox() override;
  const std::byte* inbox(int member) const override;
  std::size_t small_bytes() const override { return shm::kSmallPayloadBytes; }
  std::byte* small_outbox() override { return controls_[member_].small_payload[(round_ + 1) & 1]; }
  const std::byte* small_inbox(int member) const override { return controls_[member].small_payload[round_ & 1]; }
  void exchange() override;
  void synchronize() override;
  void throw_if_aborted() const override {
    // Keeps the caller's earlier reads of peers' buffers before the flag's
    // load (free on x86, whose loads keep their order; not so on AArch64).
    std::atomic_thread_fence(std::memory_order_acquire);
    if (waits_.aborted()) [[unlikely]] waits_.check_alive();
  }
  std::uint64_t offset_of(const std::byte* p) const override {
    check::that(p >= arena_base_, "offset_of: p lies in the shared region");
    return static_cast<std::uint64_t>(p - arena_base_);
  }
  std::byte* address_of(std::uint64_t offset) const override { return arena_base_ + offset; }

  const std::vector<int>& world_ranks() const { return world_ranks_; }
  // The communicator's id, the same on every member and unique in the job
  // (GroupHeader::id), even when a freed group's area is reused.
  std::uint64_t id() const { return group_->id; }
  // "[0, 1, 2]" or "world"
  std::string group_name() const;
  // Every other member has published the first round of the next
  // collective, or announced that it runs that collective now.
  bool peers_arrived() const;
  // peers_arrived(), polled for the spin of this rank's waits
  // (WaitContext::spin_polls), and for no longer than `at_most`.
  bool peers_arrived_within_spin(std::chrono::nanoseconds at_most) const;
  // Announces that this member runs its next collective now, with nothing
  // else to do first (MemberControl::intent).
  void announce_next();
  // The members that have published a round this member has not: they are
  // in a collective it has not entered, waiting for it.
  std::vector<int> members_ahead() const;

 private:
  // Members [first_missing, n) have all published `round`; advances
  // first_missing past those that have, so a poll rereads only the rest.
  bool all_arrived(std::uint64_t round, int& first_missing) const {
    const int n = size();
    for (; first_missing < n; ++first_missing) {
      if (controls_[first_missing].round.load(std::memory_order_acquire) < round) return false;
    }
    return true;
  }
  // Waits until members [first_missing, n) have published `round`.
  void wait_for_round(std::uint64_t round, int first_missing);
  std::string describe_wait(std::uint64_t round) const;
  // The world ranks of the members that have not published `round` yet.
  std::vector<int> missing_ranks(std::uint64_t round) const;
  // Every member's digest of this round's parity equals ours (ours included:
  // one loop without a branch per member).
  bool digests_agree(int parity) const {
    bool agree = true;
    for (int m = 0; m < size(); ++m) agree &= controls_[m].digest[parity] == pending_digest_;
    return agree;
  }
  // Throws the mismatch a member's differing descriptor shows, if any, in
  // the collective that publishes `round`.
  void check_descriptors(int parity, std::uint64_t round);
  // "all_reduce(f32, 4, sum)"; a layer's step by number, and also by its
  // name when `step_named` (mismatch messages).
  std::string describe(const shm::Descriptor& d, bool step_named = false) const;
  void post_descriptor(int parity) {
    auto& mine = controls_[member_];
    mine.descriptor[parity] = pending_;
    mine.digest[parity] = pending_digest_;
  }
  // AXON_DEBUG=1's line for the collective begin() starts (out of line: the
  // formatting would otherwise weigh on every call).
  void log_begin() const;
  [[noreturn]] void throw_mismatch(int member, int parity, std::uint64_t round);
  // begin() where WaitContext::refuses_ops(): after leave_for_good(), or in
  // a forked child.
  [[noreturn, gnu::cold]] void refuse(const CollectiveCall& call, std::uint8_t step) const;
  [[noreturn]] void report_barrier_mismatch(std::uint64_t round, int parity);
  shm::Doorbell& doorbell_of(int member) const;

  std::byte* arena_base_;
  shm::GroupHeader* group_;
  shm::MemberControl* controls_;
  std::byte* data_;
  std::size_t slot_bytes_;
  int member_;
  std::vector<int> world_ranks_;
  const shm::WaitContext& waits_;
  PointToPoint& p2p_;

  std::uint64_t round_ = 0;  // last round this member published
  std::uint64_t calls_ = 0;  // collectives begun
  bool check_pending_ = false;
  std::uint8_t next_step_ = 0;  // label_next(): taken by the next begin()
  shm::Descriptor pending_{};
  std::uint64_t pending_digest_ = 0;
  // The last descriptor whose fields begin() folded (all but its call
  // number), and that fold: begin() refolds only when the fields change.
  // Op 0 is no collective, so the first begin() folds.
  shm::Descriptor digested_{};
  std::uint64_t fields_digest_ = 0;
  std::string broken_;       // set after a mismatch: the group is unusable
};

}  // namespace axonml::distributed
