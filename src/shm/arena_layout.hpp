// The arena: the one block of memory all ranks of a job share.
//
// The launcher creates it as a memfd its ranks inherit (MpiBackend's node
// arena is a /dev/shm object; a heap allocation plays the same role for
// MockBackend's threads) and formats it with format_arena(); each rank
// attaches and checks the header. Everything the ranks exchange lives here:
//
//   offset 0            ArenaHeader                      (one page)
//   rank_controls       RankControl[world_size]          (a doorbell per rank)
//   mailboxes           Mailbox[world_size^2]             (point to point, per (src, dst))
//   groups              GroupArea for the world; after it the free space,
//                       handed out and taken back by ArenaAllocator
//                       (new_group() areas, allocate_shared() buffers)
//
// Each struct says who writes each field; every writer owns its cache line(s).
// The byte-level layout is written down in docs/arena.md; bump kLayoutVersion
// whenever anything here changes.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace axonml::distributed::shm {

inline constexpr std::uint64_t kArenaMagic = 0x414E4552414E4F58ULL;  // "XONARENA" little-endian
inline constexpr std::uint32_t kLayoutVersion = 16;
inline constexpr std::size_t kPageBytes = 4096;
inline constexpr std::size_t kCacheLine = 64;
inline constexpr int kMaxWorldSize = 1024;
// The largest slot and arena anyone may ask for (AXON_SLOT_BYTES and
// AXON_ARENA_BYTES take the same bounds): far above any machine's memory,
// and low enough that the layout's sums cannot wrap around.
inline constexpr std::size_t kMaxSlotBytes = std::size_t{1} << 30;
inline constexpr std::size_t kMaxArenaBytes = std::size_t{1} << 50;

// Throws InvalidArgument "<name> of <bytes> bytes is above the limit of
// <limit>" when bytes > limit; `name` says what the caller set
// ("MockOptions::slot_bytes").
void check_size_limit(std::size_t bytes, std::size_t limit, std::string_view name);

static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);
static_assert(std::atomic<std::int32_t>::is_always_lock_free);

// A futex word and the number of threads sleeping on it. Whoever changes a
// condition that sleepers wait for bumps `word` and wakes them; waiters
// increment `sleepers` around the sleep so that wakers can skip the syscall.
// `cells_sent` counts the point-to-point cells published to the bell's rank
// (a rank's RankControl doorbell only; 0 in every other bell), so that a
// collective's wait drains the rank's mailboxes only when one has come: a
// look at every mailbox is O(ranks), and 1024 ranks on 2 cores, each making
// it at every look, took 2 s for one all_reduce (a review).
struct alignas(kCacheLine) Doorbell {
  std::atomic<std::uint32_t> word{0};        // written by: wakers
  std::atomic<std::uint32_t> sleepers{0};    // written by: waiters
  std::atomic<std::uint64_t> cells_sent{0};  // written by: point-to-point senders to this rank
};
static_assert(sizeof(Doorbell) == kCacheLine && offsetof(Doorbell, cells_sent) == 8);

// The shared state of the arena's allocator (the algorithm is in
// src/shm/arena_allocator.hpp): a lock and the head of a free list sorted by
// offset. Every field but `lock` and `bell` is read and written only by the
// lock's holder.
struct ArenaAllocatorControl {
  // Written by: whoever takes (CAS 0 -> its world rank + 1) or drops (-> 0)
  // the lock.
  alignas(kCacheLine) std::atomic<std::uint32_t> lock;
  std::uint32_t pad;
  std::uint64_t free_head;    // offset of the first FreeBlock, 0 when none
  std::uint64_t free_bytes;   // bytes in all free blocks
  std::uint64_t free_blocks;  // number of free blocks
  // Written by: each new_group's allocating rank (fetch_add, any time; not
  // under the lock). The next GroupHeader::id; starts at 1.
  std::atomic<std::uint64_t> next_group_id;
  // Rung when the lock is dropped, for waiters asleep on it.
  Doorbell bell;
};
static_assert(sizeof(ArenaAllocatorControl) == 2 * kCacheLine);  // docs/arena.md
static_assert(offsetof(ArenaAllocatorControl, free_head) == 8);
static_assert(offsetof(ArenaAllocatorControl, next_group_id) == 32);
static_assert(offsetof(ArenaAllocatorControl, bell) == kCacheLine);

// The first 16 bytes of every free block (whole pages) in the free space.
// Written by: the allocator's lock holder.
struct FreeBlock {
  std::uint64_t bytes;  // size of this free block, a multiple of kPageBytes
  std::uint64_t next;   // offset of the next free block (higher), 0 when last
};
static_assert(sizeof(FreeBlock) == 16);

enum class AbortState : std::uint32_t { None = 0, Writing = 1, Set = 2 };

// How a reason in the header (abort_reason, group_failure_reason) is written
// once: the first writer claims its state (None -> Writing), fills the
// fields (`fill`), then publishes Set with release; later writers leave it.
// Returns whether this call wrote it.
template <class Fill> bool publish_once(std::atomic<std::uint32_t>& state, Fill&& fill) {
  std::uint32_t expected = static_cast<std::uint32_t>(AbortState::None);
  if (!state.compare_exchange_strong(expected, static_cast<std::uint32_t>(AbortState::Writing),
                                     std::memory_order_acq_rel)) {
    return false;
  }
  fill();
  state.store(static_cast<std::uint32_t>(AbortState::Set), std::memory_order_release);
  return true;
}

// `reason`, cut to fit and NUL-terminated, into a reason field.
// A reason too long for its field ends in "..." where it was cut, so that a
// reader knows there was more (the whole text is the aborting rank's own
// error).
template <std::size_t N> void copy_reason(char (&field)[N], std::string_view reason) {
  static_assert(N > 4);
  constexpr std::string_view kCut = "...";
  const bool cut = reason.size() > N - 1;
  const std::size_t len = cut ? N - 1 - kCut.size() : reason.size();
  std::memcpy(field, reason.data(), len);
  if (cut) std::memcpy(field + len, kCut.data(), kCut.size());
  field[cut ? N - 1 : len] = '\0';
}

// The reason once its state is Set, else nullopt.
template <std::size_t N>
std::optional<std::string> published_reason(const std::atomic<std::uint32_t>& state, const char (&field)[N]) {
  if (state.load(std::memory_order_acquire) != static_cast<std::uint32_t>(AbortState::Set)) return std::nullopt;
  return std::string(field, strnlen(field, N));
}

struct ArenaHeader {
  // Written once by the creator before any rank attaches; read-only after.
  std::uint64_t magic;
  std::uint32_t layout_version;
  std::uint32_t world_size;
  std::uint64_t arena_bytes;
  std::uint64_t slot_bytes;       // per member and parity, in every GroupArea
  std::uint64_t mailbox_cells;    // cells in each Mailbox ring
  std::uint64_t cell_bytes;       // payload bytes of one mailbox cell
  std::uint64_t rank_controls_offset;
  std::uint64_t mailboxes_offset;
  std::uint64_t mailbox_stride;   // bytes from one Mailbox to the next
  std::uint64_t groups_offset;    // first byte the group allocator hands out
  std::int32_t launcher_pid;      // 0 when no launcher watches the ranks
  // 1 when the job has more ranks than cores: barriers then take one flat
  // round (every member publishes, then reads every member) instead of the
  // dissemination barrier's log n hand-offs, each of which costs a context
  // switch when ranks share cores. Chosen once, here, so that every rank
  // runs the same algorithm.
  std::uint32_t flat_barrier;
  // The inode of the launcher's PID namespace (/proc/self/ns/pid), 0 when
  // unknown: a rank in another namespace (unshare -p, a sandbox) cannot tell
  // whether the launcher or its peers are alive, and is refused at attach.
  std::uint64_t launcher_pid_namespace;

  // Written by each rank once, when it attaches: more than world_size means
  // a program attached twice.
  alignas(kCacheLine) std::atomic<std::uint32_t> attached;

  // The free space after the world's group area; see ArenaAllocatorControl.
  ArenaAllocatorControl allocator;

  // Written by whoever aborts the job first (the launcher when a rank dies,
  // or a rank that hits a fatal error): claim Writing with a CAS, fill
  // abort_rank / abort_reason, then store Set with release.
  alignas(kCacheLine) std::atomic<std::uint32_t> abort_state;
  std::int32_t abort_rank;
  // Long enough for a timeout's text with the notes of the ranks it waited
  // for (a review found 240 bytes cut off the note that named the culprit).
  char abort_reason[1016];

  // Rung by the launcher on abort so that sleepers notice at once.
  Doorbell abort_bell;

  // The first failure of a group with an arena of its own (a PyTorch
  // group's, set up through its store) in a process the launcher started:
  // not an abort of this arena's job (such a group fails alone, and its
  // ranks may go on), only what the launcher's summary says when a rank then
  // fails. Claimed and filled as abort_state and abort_reason are.
  alignas(kCacheLine) std::atomic<std::uint32_t> group_failure_state;
  char group_failure_reason[1016];
  // The job's rank that group blamed, -1 for none: when it then fails by
  // itself, after the survivors it released, the job takes its status.
  std::int32_t group_failure_rank;

  // When the launcher last resumed the ranks it had stopped (Ctrl-Z, then
  // fg or bg), in steady_clock nanoseconds; 0 never. A wait that spanned the
  // pause counts its timeout from here: the time stopped was nobody's fault.
  std::atomic<std::int64_t> resumed_at_ns;
};
static_assert(sizeof(ArenaHeader) <= kPageBytes);
// The offsets docs/arena.md gives.
static_assert(offsetof(ArenaHeader, launcher_pid_namespace) == 88);
static_assert(offsetof(ArenaHeader, attached) == 128);
static_assert(offsetof(ArenaHeader, allocator) == 192);
static_assert(offsetof(ArenaHeader, abort_state) == 320);
static_assert(offsetof(ArenaHeader, abort_reason) == 328);
static_assert(offsetof(ArenaHeader, abort_bell) == 1344);
static_assert(offsetof(ArenaHeader, group_failure_state) == 1408);
static_assert(offsetof(ArenaHeader, group_failure_reason) == 1412);
static_assert(offsetof(ArenaHeader, group_failure_rank) == 2428);
static_assert(offsetof(ArenaHeader, resumed_at_ns) == 2432);
static_assert(sizeof(ArenaHeader) == 2496);

// Per rank: the doorbell rung whenever point-to-point traffic that this rank
// may be waiting for moves (data for it arrives, or space frees up in a
// mailbox it sends into), and whether the rank has joined the job.
struct RankControl {
  Doorbell doorbell;
  // Written by: this rank, once, when it attaches (0 -> 1). Read by the
  // launcher: a rank that exits while this is 0 never called World::init(),
  // and peers that did would wait for it in vain.
  alignas(kCacheLine) std::atomic<std::uint32_t> joined{0};
  // Written by: this rank, once, when it leaves the arena for good (0 -> 1,
  // release, after its last publication: ArenaBackend::leave_for_good()).
  // A peer waiting for it reads `left` as it reads `ended`: it will never
  // come, even though its process may live on a while (PyTorch's rank 0
  // keeps its store up for the others at the end of its program).
  std::atomic<std::uint32_t> left{0};
  // Written by: the launcher, once, when it has reaped this rank: first
  // `end_status` (its waitpid status), then `ended` 0 -> 1 (release). A peer
  // waiting for this rank reads `ended` between sleeps: a rank that ended
  // can never arrive, whatever its exit status.
  alignas(kCacheLine) std::atomic<std::uint32_t> ended{0};
  std::int32_t end_status{0};
  // Written by: a thread of this rank whose wait for peers has lasted half
  // its timeout (claiming `note_owner` 0 -> 1, then clearing it when the wait
  // ends). Read by: a peer whose own wait times out waiting for this rank,
  // so that its message says what this rank itself waits for: a rank that
  // waits for a stopped one is otherwise all the timeout names (a review).
  // A seqlock: `note_seq` is odd while the text changes.
  alignas(kCacheLine) std::atomic<std::uint32_t> note_owner{0};
  std::atomic<std::uint32_t> note_seq{0};
  alignas(kCacheLine) std::atomic<std::uint64_t> note_words[24]{};  // text, NUL-padded
  // Written by: this rank, once, before `left` (so a peer reads it after
  // `left`'s acquire): why it left, NUL-padded; empty when it says nothing
  // (PyTorch's "its program ended on an uncaught ValueError: bad shape",
  // for the peers that come to wait for it after it has gone).
  alignas(kCacheLine) std::atomic<std::uint64_t> left_words[24]{};
};
inline constexpr std::size_t kWaitNoteBytes = sizeof(RankControl::note_words);
inline constexpr std::size_t kLeftReasonBytes = sizeof(RankControl::left_words);
static_assert(sizeof(RankControl) == 10 * kCacheLine);

// One-way channel from src to dst: a ring of mailbox_cells cells.
struct MailboxControl {
  alignas(kCacheLine) std::atomic<std::uint64_t> tail;  // written by: src (cells produced)
  alignas(kCacheLine) std::atomic<std::uint64_t> head;  // written by: dst (cells consumed)
};

// A cell's header; payload bytes follow it. Written by src before it
// advances tail, read by dst after it observes tail.
struct alignas(kCacheLine) CellHeader {
  std::uint64_t message_bytes;  // size of the whole message
  std::uint32_t payload_bytes;  // bytes in this cell
  std::int32_t tag;
  std::uint32_t first;          // 1 on the first cell of a message
  std::uint32_t type;           // the sender's element type (a DataType)
  std::uint64_t comm;           // the communicator: its GroupHeader::id
};
static_assert(offsetof(CellHeader, comm) == 24 && sizeof(CellHeader) == kCacheLine);

// What a rank is about to do, posted with the first round of every
// collective so that peers can tell when ranks disagree.
struct Descriptor {
  std::uint64_t call;       // collectives this rank has made in this group before
  std::uint64_t count;      // elements per rank
  std::uint64_t detail;     // op-specific: e.g. the hash of new_group's list
  std::int32_t root;        // -1 when the op has none
  std::uint8_t op;          // CollectiveOp (base/collective_op.hpp)
  std::uint8_t dtype;       // DataType
  std::uint8_t reduce_op;   // ReduceOp, or 0xff when the op reduces nothing
  std::uint8_t step;        // a layer's own step (Backend::label_next_collective), 0 for none
  friend bool operator==(const Descriptor&, const Descriptor&) = default;
};
static_assert(sizeof(Descriptor) == 32);  // two fill one cache line

// Bytes of a round's payload that fit beside a member's round counter.
inline constexpr std::size_t kSmallPayloadBytes = 8;

// One member's control block within a group.
struct alignas(kCacheLine) MemberControl {
  // Written by: this member. The last round it has published; its slot of
  // that round's parity is complete when this is observed (acquire).
  std::atomic<std::uint64_t> round;
  // Written by: this member, indexed by round parity, before publishing: a
  // 64-bit hash of descriptor[parity]. Peers compare only these, on the line
  // they read for `round` anyway; the descriptors themselves sit on the next
  // line and are read only to describe a mismatch.
  std::uint64_t digest[2];
  // Written by: this member, during a barrier (the dissemination barrier of
  // ArenaChannel::synchronize): relay_value(round, step) once it has heard
  // from its first `step` predecessors, relay_broken(round) after it found a
  // mismatch in that round. Read by one successor per step. Only grows.
  std::atomic<std::uint64_t> relay;
  // Written by: this member, before a collective it will run at once with
  // nothing else to do first: that collective's call number + 1. A peer
  // choosing whether to run the same call on its caller's thread counts it
  // as arrived (ArenaChannel::peers_arrived), so that two members that reach
  // a call together do not each wait for the other to publish a round.
  std::atomic<std::uint64_t> intent;
  // Written by: this member, indexed by round parity, before publishing: the
  // payload of a collective's round when it is this small (RoundChannel::
  // small_outbox), on the very line peers read for `round`, so that they
  // need one cache-line transfer for both instead of two.
  std::byte small_payload[2][kSmallPayloadBytes];
  // Written by: this member, indexed by round parity, before publishing.
  alignas(kCacheLine) Descriptor descriptor[2];
};
static_assert(sizeof(MemberControl) == 2 * kCacheLine);  // docs/arena.md: 128 bytes each
static_assert(offsetof(MemberControl, descriptor) == kCacheLine);
static_assert(offsetof(MemberControl, relay) == 24);  // docs/arena.md
static_assert(offsetof(MemberControl, intent) == 32);  // docs/arena.md
static_assert(offsetof(MemberControl, small_payload) == 40);  // docs/arena.md

// MemberControl::relay of a member in step `step` (1-based) of the barrier
// that publishes `round`: monotone over rounds and steps (at most 64 steps).
inline constexpr std::uint64_t relay_value(std::uint64_t round, unsigned step) { return round << 8 | step; }
// MemberControl::relay of a member that found a mismatch in the collective
// that publishes `round`: above every relay of that round and below those of
// later rounds. A successor in that round's barrier reads it as broken; one
// still finishing an earlier barrier reads it as relayed, which it is (this
// member completed that barrier before it moved on), and meets the mismatch
// in the next collective itself.
inline constexpr std::uint64_t relay_broken(std::uint64_t round) { return round << 8 | 0xff; }

// A group's shared state. Followed by MemberControl[size] and then the data
// slots: member m's slot of parity p at data + (2 * m + p) * slot_bytes.
struct alignas(kCacheLine) GroupHeader {
  std::uint32_t size;   // written by: the allocating rank, before publishing the offset
  // Members still holding an endpoint of the group: set to `size` by the
  // allocating rank before it publishes the offset, then decremented by each
  // member once, when it drops its endpoint; the one that takes it to 0
  // returns the area to the arena. Stays 0 in the world's area, which is
  // never returned.
  std::atomic<std::uint32_t> holders;
  // Written by: the allocating rank (the launcher, for the world's area),
  // before publishing the offset: hash_of_ranks() of the members' world
  // ranks. The library never reads it: the members' lists are compared
  // through new_group's descriptor. It is there for whoever inspects an
  // arena (a debugger, a dump of it) to tell which list an area was made for.
  std::uint64_t ranks_hash;
  // Written by: the allocating rank, before publishing the offset. Unique in
  // the job (0 for the world, then ArenaAllocatorControl::next_group_id):
  // point-to-point cells carry it, so a group made in a reused area never
  // receives what was sent on the group that had the area before.
  std::uint64_t id;
  Doorbell bell;        // rung when any member publishes a round
};
static_assert(offsetof(GroupHeader, holders) == 4);  // docs/arena.md
static_assert(offsetof(GroupHeader, ranks_hash) == 8);
static_assert(offsetof(GroupHeader, id) == 16);
static_assert(offsetof(GroupHeader, bell) == kCacheLine);

// Where the pieces of a group of `members` ranks live, relative to its start.
struct GroupLayout {
  std::size_t controls_offset;
  std::size_t data_offset;
  std::size_t total_bytes;
};
GroupLayout group_layout(std::size_t members, std::size_t slot_bytes);

// Lays out a fresh group of `members` at `at` (group_layout(...).total_bytes
// of arena memory): zeroed header and member controls. The one place a
// group is set up, for the world group and for every new_group.
GroupHeader& format_group(std::byte* at, std::size_t members, std::size_t slot_bytes,
                          std::uint64_t ranks_hash, std::uint64_t id);
// The digest of a group's member list (world ranks, in order) that
// GroupHeader::ranks_hash and new_group's descriptor carry.
std::uint64_t hash_of_ranks(std::span<const int> world_ranks);

// The inode of this process's PID namespace (/proc/self/ns/pid), 0 when it
// cannot be read. Processes share a namespace exactly when theirs are equal.
std::uint64_t pid_namespace_id();

// Sizes chosen when an arena is made.
struct ArenaSpec {
  int world_size = 1;
  std::size_t arena_bytes = 0;  // 0: default_arena_bytes(world_size)
  std::size_t slot_bytes = 0;   // 0: chosen from arena_bytes
  std::int32_t launcher_pid = 0;
  std::uint64_t launcher_pid_namespace = 0;  // pid_namespace_id() of the launcher
  // ArenaHeader::flat_barrier; unset: shm::ranks_outnumber_cores(world_size)
  // as the creating process sees it.
  std::optional<bool> flat_barrier;
};

// Room for the world group and `subgroups_alive` subgroups as large alive at
// once, made and dropped in any order, with slots of `slot_bytes` (0: the
// default for the world size). 0 subgroups: the world's group only (a
// PyTorch group's arena: its subgroups make arenas of their own).
std::size_t default_arena_bytes(int world_size, std::size_t slot_bytes = 0, int subgroups_alive = 3);

// Writes the header and zeroes the control areas of a fresh arena of
// spec.arena_bytes at `base`, places the world group and makes the rest
// (whole pages) one free block. Throws
// InvalidArgument naming the sizes when the arena is too small.
void format_arena(void* base, const ArenaSpec& spec);

// Checks magic, layout version and sizes of an arena mapped at `base` with
// `mapped_bytes`; throws Error naming what does not match.
const ArenaHeader& check_arena(const void* base, std::size_t mapped_bytes,
                               int expected_world_size);

}  // namespace axonml::distributed::shm
