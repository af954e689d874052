// ArenaAllocator: hands out and takes back the arena's free space.
//
// Everything after the world's group area is free space, shared by every
// rank: new_group() areas and allocate_shared() buffers come from it and go
// back to it. It is a free list of whole pages, sorted by offset, kept in the
// free blocks themselves (a FreeBlock at the start of each) with its head,
// the free byte count and a lock in ArenaHeader::allocator (ArenaAllocatorControl,
// see src/shm/arena_layout.hpp and docs/arena.md). allocate() serves the two
// kinds of request from opposite ends: a small one (under kLargeBytes: most
// shared tensors) from the front of the lowest block that fits (first fit), a
// large one (group areas at the default slot sizes, large buffers) from the
// back of the smallest block that holds it, the highest of equals (best fit
// from the high end). So small buffers of mixed lifetimes rarely split the
// space that group areas come and go in (only once the low end has no room
// for them): with one end for both, per-epoch subgroups and shared tensors
// on 4 ranks without a barrier left the default 10 MiB arena 4.2 MiB free in
// 4 blocks, none of them a 2 MiB group area (4 of 6 runs). release()
// puts a block back and merges it with the free blocks just before and after
// it (coalescing), so space freed in any order becomes one block again.
//
// The lock is a word in the arena taken by CAS; waiters go through
// shm::wait_until like every other wait, so a rank that dies holding it does
// not hang the others forever: they throw PeerFailure when the launcher
// aborts the job, or Timeout at their deadline.
//
// The allocator knows nothing of who still reads a block: a caller returns a
// block only once no rank can touch it any more (ArenaBackend: a group area
// when its last member drops its endpoint, a shared buffer when its last
// pointer on the owning rank is dropped, which a completed collective allows).
//
// Thread safety: any number of ranks, threads or processes, at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "shm/arena_layout.hpp"
#include "shm/wait.hpp"

namespace axonml::distributed::shm {

// What the free space looks like, for messages.
struct ArenaUsage {
  std::size_t arena_bytes = 0;   // the whole arena (what --arena-mb sets)
  std::size_t free_bytes = 0;    // in all free blocks
  std::size_t largest_free = 0;  // the largest single free block
  std::size_t free_blocks = 0;
};

// "3.5 MiB free of the 64 MiB arena, the largest free block 1 MiB (2 blocks)"
std::string describe(const ArenaUsage& usage);

// Makes [begin, end) of a freshly formatted arena its free space: one block,
// or none when begin == end. REQUIRES: both page-aligned, begin <= end, no
// rank attached yet.
void format_free_space(std::byte* base, ArenaHeader& header, std::uint64_t begin,
                       std::uint64_t end);

class ArenaAllocator {
 public:
  // REQUIRES: waits.header() is the header of the arena mapped at `base`.
  ArenaAllocator(std::byte* base, const WaitContext& waits);

  // The bytes an allocation of `bytes` takes: whole pages, at least one.
  static std::size_t footprint(std::size_t bytes);
  // Requests of at least this footprint come from the high end.
  static constexpr std::size_t kLargeBytes = std::size_t{512} << 10;

  // The page-aligned offset of footprint(bytes) bytes, or 0 when no free block
  // is that large (then, when `usage_when_full` is given, it gets the free
  // space as seen under the lock). Throws PeerFailure or Timeout, naming the
  // lock's holder, when the lock cannot be had.
  std::uint64_t allocate(std::size_t bytes, ArenaUsage* usage_when_full = nullptr);

  // Gives back the block at `offset` that allocate(bytes) returned.
  // REQUIRES: no rank will touch it again. Never throws: when the lock cannot
  // be had (the job is being aborted, or a rank died holding it) the block
  // stays allocated, and the arena ends with the job anyway. Once the job is
  // aborted it does not wait at all: it takes the lock only if it is free. Releasing a
  // block that overlaps free space (released twice) is a bug: it prints both
  // ranges and aborts the process.
  void release(std::uint64_t offset, std::size_t bytes) noexcept;

  // The free space now (taken under the lock; may be stale on return).
  ArenaUsage usage();

 private:
  void lock();
  bool try_lock();  // without waiting: whether it was free and is now held
  void unlock();
  FreeBlock& block_at(std::uint64_t offset) const;
  // REQUIRES: the lock held; `need` whole pages. The offset taken, or 0.
  std::uint64_t take_front_first_fit(std::size_t need);
  std::uint64_t take_back_best_fit(std::size_t need);
  ArenaUsage usage_locked() const;

  std::byte* base_;
  ArenaHeader& header_;
  const WaitContext& waits_;
};

}  // namespace axonml::distributed::shm
