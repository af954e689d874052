#include "shm/arena_allocator.hpp"

#include <algorithm>
#include <cstdio>
#include <new>
#include <source_location>
#include <string>
#include <utility>

#include "base/check.hpp"
#include "base/text.hpp"

namespace axonml::distributed::shm {
namespace {

// Only a bug (a block released twice, a free list overwritten by a stray
// write) gets here. Unlike the check:: asserts these stay on in release
// builds: the walk that finds them is done anyway, and the free list is
// shared by every rank, so carrying on would corrupt their memory too.
[[noreturn]] void corrupt(const std::string& what,
                          std::source_location where = std::source_location::current()) {
  check::fail("the arena's free list is consistent", what, where);
}

std::string range(std::uint64_t begin, std::uint64_t bytes) {
  char text[64];
  std::snprintf(text, sizeof text, "[%llu, %llu)", static_cast<unsigned long long>(begin),
                static_cast<unsigned long long>(begin + bytes));
  return text;
}

// Runs `f` when the scope ends: drops the allocator's lock on every path.
template <class F>
class AtScopeExit {
 public:
  explicit AtScopeExit(F f) : f_(std::move(f)) {}
  ~AtScopeExit() { f_(); }
  AtScopeExit(const AtScopeExit&) = delete;
  AtScopeExit& operator=(const AtScopeExit&) = delete;

 private:
  F f_;
};

}  // namespace

std::string describe(const ArenaUsage& usage) {
  return format_bytes(usage.free_bytes) + " free of the " + format_bytes(usage.arena_bytes) +
         " arena, the largest free block " + format_bytes_exactly(usage.largest_free) + " (" +
         std::to_string(usage.free_blocks) + (usage.free_blocks == 1 ? " free block)" : " free blocks)");
}

void format_free_space(std::byte* base, ArenaHeader& header, std::uint64_t begin, std::uint64_t end) {
  ArenaAllocatorControl& control = header.allocator;
  control.lock.store(0, std::memory_order_relaxed);
  control.free_head = 0;
  control.free_bytes = 0;
  control.free_blocks = 0;
  control.next_group_id.store(1, std::memory_order_relaxed);  // 0 is the world's
  if (end > begin) {
    new (base + begin) FreeBlock{end - begin, 0};
    control.free_head = begin;
    control.free_bytes = end - begin;
    control.free_blocks = 1;
  }
}

ArenaAllocator::ArenaAllocator(std::byte* base, const WaitContext& waits)
    : base_(base), header_(waits.header()), waits_(waits) {}

std::size_t ArenaAllocator::footprint(std::size_t bytes) {
  // REQUIRES (callers check): bytes <= arena size, so this cannot overflow.
  return bytes == 0 ? kPageBytes : (bytes + kPageBytes - 1) / kPageBytes * kPageBytes;
}

bool ArenaAllocator::try_lock() {
  ArenaAllocatorControl& control = header_.allocator;
  const auto me = static_cast<std::uint32_t>(waits_.rank()) + 1;
  // Test before the CAS, so that waiters spinning on a held lock only read.
  std::uint32_t expected = 0;
  return control.lock.load(std::memory_order_relaxed) == 0 &&
         control.lock.compare_exchange_strong(expected, me, std::memory_order_acquire, std::memory_order_relaxed);
}

void ArenaAllocator::lock() {
  ArenaAllocatorControl& control = header_.allocator;
  wait_until([this] { return try_lock(); }, control.bell, waits_, [&] {
    const std::uint32_t holder = control.lock.load(std::memory_order_relaxed);
    return "waiting for the arena allocator's lock (held by " +
           (holder == 0 ? std::string("nobody now") : "rank " + std::to_string(holder - 1)) + ")";
  });
}

void ArenaAllocator::unlock() {
  header_.allocator.lock.store(0, std::memory_order_release);
  ring(header_.allocator.bell);
}

FreeBlock& ArenaAllocator::block_at(std::uint64_t offset) const {
  if (offset < header_.groups_offset || offset % kPageBytes != 0 ||
      offset + sizeof(FreeBlock) > header_.arena_bytes) {
    corrupt("the free list points at offset " + std::to_string(offset) +
            ", outside the free space " + range(header_.groups_offset, header_.arena_bytes - header_.groups_offset) +
            " or not on a page boundary");
  }
  return *reinterpret_cast<FreeBlock*>(base_ + offset);
}

ArenaUsage ArenaAllocator::usage_locked() const {
  const ArenaAllocatorControl& control = header_.allocator;
  ArenaUsage usage;
  usage.arena_bytes = header_.arena_bytes;
  usage.free_bytes = control.free_bytes;
  usage.free_blocks = control.free_blocks;
  for (std::uint64_t at = control.free_head; at != 0;) {
    const FreeBlock& block = block_at(at);
    usage.largest_free = std::max<std::size_t>(usage.largest_free, block.bytes);
    at = block.next;
  }
  return usage;
}

ArenaUsage ArenaAllocator::usage() {
  lock();
  AtScopeExit hold([this] { unlock(); });
  return usage_locked();
}

// Small: first fit. Walk the list in offset order and take the front of the
// first block at least `need` bytes long; what remains of it stays a free
// block, its header moved up by `need`.
std::uint64_t ArenaAllocator::take_front_first_fit(std::size_t need) {
  ArenaAllocatorControl& control = header_.allocator;
  std::uint64_t previous = 0;
  for (std::uint64_t at = control.free_head; at != 0;) {
    const FreeBlock block = block_at(at);
    if (block.bytes >= need) {
      std::uint64_t rest = block.next;
      if (block.bytes > need) {
        rest = at + need;
        new (base_ + rest) FreeBlock{block.bytes - need, block.next};
      } else {
        control.free_blocks -= 1;
      }
      (previous == 0 ? control.free_head : block_at(previous).next) = rest;
      control.free_bytes -= need;
      return at;
    }
    previous = at;
    at = block.next;
  }
  return 0;
}

// Large: best fit from the high end. Walk the whole list and take the back of
// the smallest block that is long enough (the highest of equals); its header
// stays where it is, shorter by `need`. A group area then goes into the hole
// an area of its size left rather than carving the largest block.
std::uint64_t ArenaAllocator::take_back_best_fit(std::size_t need) {
  ArenaAllocatorControl& control = header_.allocator;
  std::uint64_t chosen = 0;
  std::uint64_t before_chosen = 0;
  std::uint64_t chosen_bytes = 0;
  for (std::uint64_t previous = 0, at = control.free_head; at != 0; previous = at, at = block_at(at).next) {
    const std::uint64_t bytes_here = block_at(at).bytes;
    if (bytes_here >= need && (chosen == 0 || bytes_here <= chosen_bytes)) {
      chosen = at;
      chosen_bytes = bytes_here;
      before_chosen = previous;
    }
  }
  if (chosen == 0) return 0;
  FreeBlock& block = block_at(chosen);
  control.free_bytes -= need;
  if (block.bytes > need) {
    block.bytes -= need;
    return chosen + block.bytes;
  }
  (before_chosen == 0 ? control.free_head : block_at(before_chosen).next) = block.next;
  control.free_blocks -= 1;
  return chosen;
}

std::uint64_t ArenaAllocator::allocate(std::size_t bytes, ArenaUsage* usage_when_full) {
  const bool fits_at_all = bytes <= header_.arena_bytes;
  const std::size_t need = fits_at_all ? footprint(bytes) : 0;
  lock();
  AtScopeExit hold([this] { unlock(); });
  std::uint64_t at = 0;
  if (fits_at_all) at = need >= kLargeBytes ? take_back_best_fit(need) : take_front_first_fit(need);
  if (at == 0 && usage_when_full != nullptr) *usage_when_full = usage_locked();
  return at;
}

// Finds the free blocks just below and just above the returned one and
// merges with each that touches it, so that the list never holds two
// adjacent blocks.
void ArenaAllocator::release(std::uint64_t offset, std::size_t bytes) noexcept {
  const std::size_t size = footprint(bytes);
  if (offset < header_.groups_offset || offset % kPageBytes != 0 || size > header_.arena_bytes ||
      offset > header_.arena_bytes - size) {
    corrupt("release of " + range(offset, size) + ", outside the free space " +
            range(header_.groups_offset, header_.arena_bytes - header_.groups_offset));
  }
  if (waits_.aborted()) {
    // The job is ending, perhaps because a rank died holding the lock: take
    // it only if it is free. Waiting a sleep slice for the abort to be seen,
    // release after release, held a survivor dropping 3000 placed tensors for
    // minutes in their destructors (found by a review).
    if (!try_lock()) return;
  } else {
    try {
      lock();
    } catch (...) {
      return;  // aborted or past the deadline: the block stays taken; the job is ending
    }
  }
  AtScopeExit hold([this] { unlock(); });
  ArenaAllocatorControl& control = header_.allocator;
  std::uint64_t below = 0;
  std::uint64_t above = control.free_head;
  while (above != 0 && above < offset) {
    below = above;
    above = block_at(above).next;
  }
  if (below != 0 && below + block_at(below).bytes > offset) {
    corrupt("release of " + range(offset, size) + " overlaps the free block " +
            range(below, block_at(below).bytes) + " (released twice?)");
  }
  if (above != 0 && offset + size > above) {
    corrupt("release of " + range(offset, size) + " overlaps the free block " +
            range(above, block_at(above).bytes) + " (released twice?)");
  }
  const bool join_above = above != 0 && offset + size == above;
  const bool join_below = below != 0 && below + block_at(below).bytes == offset;
  if (join_below) {
    FreeBlock& merged = block_at(below);
    merged.bytes += size;
    if (join_above) {
      const FreeBlock next = block_at(above);
      merged.bytes += next.bytes;
      merged.next = next.next;
      control.free_blocks -= 1;
    }
  } else {
    FreeBlock fresh{size, above};
    if (join_above) {
      const FreeBlock next = block_at(above);
      fresh = FreeBlock{size + next.bytes, next.next};
    } else {
      control.free_blocks += 1;
    }
    new (base_ + offset) FreeBlock{fresh};
    (below == 0 ? control.free_head : block_at(below).next) = offset;
  }
  control.free_bytes += size;
}

}  // namespace axonml::distributed::shm
