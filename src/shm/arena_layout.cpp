#include "shm/arena_layout.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <new>
#include <numeric>
#include <string>
#include <vector>

#include "axonml/distributed/error.hpp"
#include "base/hash.hpp"
#include "base/text.hpp"
#include "shm/arena_allocator.hpp"
#include "shm/wait.hpp"

namespace axonml::distributed::shm {
namespace {

constexpr std::size_t kPage = kPageBytes;
constexpr std::size_t kMailboxCells = 4;

std::size_t round_up(std::size_t value, std::size_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

std::size_t default_slot_bytes(int world_size) {
  const std::size_t by_budget = (std::size_t{32} << 20) / static_cast<std::size_t>(world_size);
  return std::clamp<std::size_t>(std::bit_floor(by_budget), 16 << 10, 256 << 10);
}

std::size_t default_cell_bytes(int world_size) {
  const auto n = static_cast<std::size_t>(world_size);
  const std::size_t by_budget = (std::size_t{8} << 20) / (n * n * kMailboxCells);
  return std::clamp<std::size_t>(std::bit_floor(std::max<std::size_t>(by_budget, 1)), 256,
                                 16 << 10);
}

std::size_t mailbox_stride(std::size_t cell_bytes) {
  return round_up(sizeof(MailboxControl) + kMailboxCells * (sizeof(CellHeader) + cell_bytes),
                  kCacheLine);
}


}  // namespace

GroupLayout group_layout(std::size_t members, std::size_t slot_bytes) {
  GroupLayout layout{};
  layout.controls_offset = round_up(sizeof(GroupHeader), kCacheLine);
  layout.data_offset = round_up(layout.controls_offset + members * sizeof(MemberControl), kPage);
  layout.total_bytes = round_up(layout.data_offset + 2 * members * slot_bytes, kPage);
  return layout;
}

GroupHeader& format_group(std::byte* at, std::size_t members, std::size_t slot_bytes,
                          std::uint64_t ranks_hash, std::uint64_t id) {
  const GroupLayout layout = group_layout(members, slot_bytes);
  std::memset(at, 0, layout.data_offset);
  auto* group = new (at) GroupHeader{};
  group->size = static_cast<std::uint32_t>(members);
  group->ranks_hash = ranks_hash;
  group->id = id;
  for (std::size_t m = 0; m < members; ++m) {
    new (at + layout.controls_offset + m * sizeof(MemberControl)) MemberControl{};
  }
  return *group;
}

std::uint64_t pid_namespace_id() {
  struct stat info {};
  return ::stat("/proc/self/ns/pid", &info) == 0 ? static_cast<std::uint64_t>(info.st_ino) : 0;
}

std::uint64_t hash_of_ranks(std::span<const int> world_ranks) {
  Fnv1a list;
  for (int r : world_ranks) list.add(static_cast<std::uint64_t>(r));
  return list.value();
}

void check_size_limit(std::size_t bytes, std::size_t limit, std::string_view name) {
  if (bytes > limit) {
    throw InvalidArgument(std::string(name) + " of " + std::to_string(bytes) + " bytes is above the limit of " +
                          format_bytes(limit));
  }
}

std::size_t default_arena_bytes(int world_size, std::size_t slot_bytes, int subgroups_alive) {
  check_size_limit(slot_bytes, kMaxSlotBytes, "arena: the slot size");
  const auto n = static_cast<std::size_t>(world_size);
  // As format_arena() lays it out (each part on whole pages).
  const std::size_t fixed = kPage + round_up(n * sizeof(RankControl), kPage) +
                            round_up(n * n * mailbox_stride(default_cell_bytes(world_size)), kPage);
  // The world group, and room for k subgroups as large alive at once
  // whatever their sizes and the order they come and go in (with slots set
  // larger through AXON_SLOT_BYTES too: the first new_group failed there,
  // found by a review). While the k-th is made (new_group's second try waits
  // until every member has dropped what it meant to), the k - 1 others alive
  // may cut the free space into k pieces, and only 2k - 1 areas' worth
  // guarantees one of them a whole area. With k areas' worth (k = 3),
  // subgroups of random members made and dropped in turn, two alive, found
  // no room within 30-650 cycles at n=8 (a review).
  const std::size_t slots = slot_bytes ? round_up(slot_bytes, kCacheLine) : default_slot_bytes(world_size);
  const auto k = static_cast<std::size_t>(std::max(subgroups_alive, 0));
  const std::size_t groups = (1 + (k == 0 ? 0 : 2 * k - 1)) * group_layout(n, slots).total_bytes;
  return round_up(fixed + groups, std::size_t{1} << 20);
}

void format_arena(void* base, const ArenaSpec& spec) {
  if (spec.world_size < 1 || spec.world_size > kMaxWorldSize) {
    throw InvalidArgument("arena: world size " + std::to_string(spec.world_size) +
                          " is outside 1.." + std::to_string(kMaxWorldSize));
  }
  check_size_limit(spec.slot_bytes, kMaxSlotBytes, "arena: the slot size");
  check_size_limit(spec.arena_bytes, kMaxArenaBytes, "arena: the arena size");
  const auto n = static_cast<std::size_t>(spec.world_size);
  const std::size_t arena_bytes =
      spec.arena_bytes ? spec.arena_bytes : default_arena_bytes(spec.world_size, spec.slot_bytes);
  const std::size_t slot_bytes =
      spec.slot_bytes ? round_up(spec.slot_bytes, kCacheLine) : default_slot_bytes(spec.world_size);
  const std::size_t cell_bytes = default_cell_bytes(spec.world_size);

  const std::size_t rank_controls_offset = kPage;
  const std::size_t mailboxes_offset = round_up(rank_controls_offset + n * sizeof(RankControl), kPage);
  const std::size_t stride = mailbox_stride(cell_bytes);
  const std::size_t groups_offset = round_up(mailboxes_offset + n * n * stride, kPage);
  const std::size_t world_group_bytes = group_layout(n, slot_bytes).total_bytes;
  if (groups_offset + world_group_bytes > arena_bytes) {
    // The minimum in whole MiB, rounded up: what --arena-mb must be raised to.
    const std::size_t need = round_up(groups_offset + world_group_bytes, std::size_t{1} << 20);
    throw InvalidArgument("arena: " + format_bytes(arena_bytes) + " is too small for " + std::to_string(n) +
                          " ranks, which need at least " + format_bytes(need) +
                          " (raise --arena-mb)");
  }

  auto* bytes = static_cast<std::byte*>(base);
  std::memset(bytes, 0, groups_offset + kPage);
  auto* header = new (bytes) ArenaHeader{};
  header->magic = kArenaMagic;
  header->layout_version = kLayoutVersion;
  header->world_size = static_cast<std::uint32_t>(n);
  header->arena_bytes = arena_bytes;
  header->slot_bytes = slot_bytes;
  header->mailbox_cells = kMailboxCells;
  header->cell_bytes = cell_bytes;
  header->rank_controls_offset = rank_controls_offset;
  header->mailboxes_offset = mailboxes_offset;
  header->mailbox_stride = stride;
  header->groups_offset = groups_offset;
  header->launcher_pid = spec.launcher_pid;
  header->launcher_pid_namespace = spec.launcher_pid_namespace;
  header->flat_barrier = spec.flat_barrier.value_or(ranks_outnumber_cores(spec.world_size)) ? 1 : 0;
  header->abort_rank = -1;
  for (std::size_t r = 0; r < n; ++r) new (bytes + rank_controls_offset + r * sizeof(RankControl)) RankControl{};
  for (std::size_t m = 0; m < n * n; ++m) new (bytes + mailboxes_offset + m * stride) MailboxControl{};

  // The world group sits first in the group space, so every rank finds it
  // without asking anyone.
  std::vector<int> everyone(n);
  std::iota(everyone.begin(), everyone.end(), 0);
  format_group(bytes + groups_offset, n, slot_bytes, hash_of_ranks(everyone), /*id=*/0);
  format_free_space(bytes, *header, groups_offset + world_group_bytes, arena_bytes / kPage * kPage);
}

const ArenaHeader& check_arena(const void* base, std::size_t mapped_bytes, int expected_world_size) {
  if (mapped_bytes < sizeof(ArenaHeader)) {
    throw Error("arena: mapping of " + std::to_string(mapped_bytes) + " bytes is smaller than its header");
  }
  const auto& header = *static_cast<const ArenaHeader*>(base);
  if (header.magic != kArenaMagic) {
    throw Error("arena: bad magic number (not an axonml arena, or overwritten)");
  }
  if (header.layout_version != kLayoutVersion) {
    throw Error("arena: layout version " + std::to_string(header.layout_version) +
                " but this library speaks version " + std::to_string(kLayoutVersion) +
                " (launcher and program built from different releases?)");
  }
  if (header.arena_bytes != mapped_bytes) {
    throw Error("arena: header says " + std::to_string(header.arena_bytes) + " bytes but " +
                std::to_string(mapped_bytes) + " are mapped");
  }
  if (static_cast<int>(header.world_size) != expected_world_size) {
    throw Error("arena: made for " + std::to_string(header.world_size) +
                " ranks but WORLD_SIZE is " + std::to_string(expected_world_size));
  }
  return header;
}

}  // namespace axonml::distributed::shm
