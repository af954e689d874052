// ArenaView: the parts of a mapped arena, found through its header.
//
// The header stores where each part starts (rank controls, mailboxes, the
// world's group area); this view is the one place that turns those offsets
// into typed references, so no other code does offset arithmetic with casts.
// It owns nothing: the mapping must outlive it.
//
// Thread safety: a view is immutable; what it returns follows the rules of
// each struct in arena_layout.hpp (who writes which field).
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/check.hpp"
#include "shm/arena_layout.hpp"

namespace axonml::distributed::shm {

class ArenaView {
 public:
  // REQUIRES: `base` is the start of a formatted arena (format_arena, or
  // check_arena passed).
  explicit ArenaView(std::byte* base) : base_(base) {}
  explicit ArenaView(ArenaHeader& header) : base_(reinterpret_cast<std::byte*>(&header)) {}

  std::byte* base() const { return base_; }
  ArenaHeader& header() const { return *reinterpret_cast<ArenaHeader*>(base_); }
  int world_size() const { return static_cast<int>(header().world_size); }

  // Rank `rank`'s control block (doorbell, joined, ended).
  RankControl& rank_control(int rank) const {
    check::less(rank, world_size(), "rank_control: rank < world size");
    return reinterpret_cast<RankControl*>(base_ + header().rank_controls_offset)[rank];
  }

  // The ring from `src` to `dst`, and its cell number `index` (mod cells).
  MailboxControl& mailbox(int src, int dst) const {
    const auto n = static_cast<std::size_t>(world_size());
    const std::size_t index = static_cast<std::size_t>(src) * n + static_cast<std::size_t>(dst);
    return *reinterpret_cast<MailboxControl*>(base_ + header().mailboxes_offset +
                                              index * header().mailbox_stride);
  }
  CellHeader& cell(int src, int dst, std::uint64_t index) const {
    auto* first = reinterpret_cast<std::byte*>(&mailbox(src, dst)) + sizeof(MailboxControl);
    const std::size_t stride = sizeof(CellHeader) + header().cell_bytes;
    return *reinterpret_cast<CellHeader*>(first + (index % header().mailbox_cells) * stride);
  }
  static std::byte* payload(CellHeader& cell) {
    return reinterpret_cast<std::byte*>(&cell) + sizeof(CellHeader);
  }

  // The world's group area (first in the group space) and any group's.
  GroupHeader& world_group() const { return group_at(header().groups_offset); }
  GroupHeader& group_at(std::uint64_t offset) const {
    check::less(offset, header().arena_bytes, "group_at: offset inside the arena");
    return *reinterpret_cast<GroupHeader*>(base_ + offset);
  }

  // Bytes at `offset` from the start, and back.
  std::byte* at(std::uint64_t offset) const { return base_ + offset; }
  std::uint64_t offset_of(const void* p) const {
    return static_cast<std::uint64_t>(static_cast<const std::byte*>(p) - base_);
  }

 private:
  std::byte* base_;
};

// A group area's member controls and slots, from its header.
inline MemberControl* member_controls(GroupHeader& group, std::size_t slot_bytes) {
  auto* start = reinterpret_cast<std::byte*>(&group);
  return reinterpret_cast<MemberControl*>(start + group_layout(group.size, slot_bytes).controls_offset);
}
inline std::byte* group_slots(GroupHeader& group, std::size_t slot_bytes) {
  return reinterpret_cast<std::byte*>(&group) + group_layout(group.size, slot_bytes).data_offset;
}

}  // namespace axonml::distributed::shm
