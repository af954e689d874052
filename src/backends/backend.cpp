#include "axonml/distributed/backend.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

#include "axonml/distributed/error.hpp"
#include "base/text.hpp"

namespace axonml::distributed {

std::string Backend::where(std::string_view op) const {
  return std::string(op) + " on rank " + std::to_string(rank()) + " of " + std::to_string(world_size()) +
         describe_group();
}

void Backend::null_data(std::string_view op, std::string_view what, std::size_t count) const {
  throw InvalidArgument(where(op) + ": " + std::string(what) + " has " + std::to_string(count) +
                        " elements at a null pointer (a span of no memory)");
}

void Backend::check_root(std::string_view op, int root, std::string_view role) const {
  if (root < 0 || root >= world_size()) {
    throw InvalidArgument(where(op) + ": invalid " +
                          std::string(role) + " " + std::to_string(root) + " (" +
                          std::string(role) + " should be in the 0.." +
                          std::to_string(world_size() - 1) + " range)");
  }
}

void Backend::check_peer(std::string_view op, int peer, std::string_view role) const {
  check_root(op, peer, role);
}

void Backend::check_tag(std::string_view op, int tag) const {
  if (tag < 0) {
    throw InvalidArgument(where(op) + ": invalid tag " + std::to_string(tag) + " (tags are >= 0)");
  }
}

void Backend::check_size(std::string_view op, std::string_view what, std::size_t actual,
                         std::size_t expected, std::string_view why) const {
  if (actual != expected) {
    throw InvalidArgument(where(op) + ": " + std::string(what) + " has " +
                          std::to_string(actual) + " elements but must have " +
                          std::to_string(expected) + " (" + std::string(why) + ")");
  }
}

void Backend::count_overflows(std::string_view op, std::string_view what, std::size_t count,
                              std::size_t element_bytes) const {
  throw InvalidArgument(where(op) + ": " +
                        std::string(what) + " has " + std::to_string(count) + " elements of " +
                        std::to_string(element_bytes) +
                        " bytes, more than can exist (the byte count overflows)");
}

void Backend::reduce_op_invalid(std::string_view op, ReduceOp reduce_op) const {
  throw InvalidArgument(where(op) + ": invalid reduce op " +
                        std::to_string(static_cast<unsigned>(reduce_op)) +
                        " (ReduceOp is Sum, Product, Min, Max or Average)");
}

std::size_t Backend::times_world_size(std::string_view op, std::string_view what,
                                      std::size_t count, std::size_t element_bytes) const {
  std::size_t total = 0;
  if (__builtin_mul_overflow(count, static_cast<std::size_t>(world_size()), &total) ||
      total > static_cast<std::size_t>(PTRDIFF_MAX) / element_bytes) {
    throw InvalidArgument(where(op) + ": " + std::string(what) + " has " +
                          std::to_string(count) + " elements, and " + std::to_string(world_size()) +
                          " times that is more than can exist (the size overflows)");
  }
  return total;
}

void Backend::check_blocks(std::string_view op, std::string_view what, std::size_t actual) const {
  if (actual % static_cast<std::size_t>(world_size()) != 0) {
    throw InvalidArgument(where(op) + ": " + std::string(what) + " has " +
                          std::to_string(actual) + " elements, which do not split into " +
                          std::to_string(world_size()) + " equal blocks (one per rank)");
  }
}

void Backend::barrier() {
  const ThreadClaim claim(*this, "barrier");
  do_barrier();
}

void Backend::held_by_another_thread(std::string_view op, Refusal refusal) {
  const bool collective = refusal == Refusal::Collective;
  const std::string prefix = where(op) + ": ";
  if (const char* why = hold_reason_.load(std::memory_order_relaxed)) {
    if (collective) refusals_pending_.fetch_add(1, std::memory_order_relaxed);
    throw InvalidArgument(prefix + "another thread of this rank holds this group's collectives: " + why +
                          (collective ? "; the refused call counts as made on this rank, so its next call is out "
                                        "of step with any rank that let the call through"
                                      : ""));
  }
  if (collective) refusals_pending_.fetch_or(kRefusedBesideACall, std::memory_order_relaxed);
  throw InvalidArgument(prefix + "another thread of this rank is inside a collective on the same group; "
                        "a group takes one thread at a time (give each thread a group of its own: new_group)" +
                        (collective ? "; two threads calling at once may have paired one thread's call with the "
                                      "other's across ranks, so this rank's next collective on the group fails on "
                                      "every rank (with the ranks' check of their calls on, as by default)"
                                    : ""));
}

void Backend::label_reserved(std::uint8_t step) const {
  throw InvalidArgument("label_next_collective on rank " + std::to_string(rank()) + ": step " + std::to_string(step) +
                        " is the runtime's own (a call after a refused second thread); a layer labels 1-254");
}

void Backend::act_on_refusals() {
  const std::uint32_t pending = refusals_pending_.exchange(0, std::memory_order_relaxed);
  for (std::uint32_t n = pending & ~kRefusedBesideACall; n > 0; --n) do_count_refused_collective();
  if ((pending & kRefusedBesideACall) != 0) do_mark_after_refused_thread();
}

void Backend::hold_collectives_for(std::thread::id holder, const char* why) {
  if (holder == std::thread::id{}) {
    throw InvalidArgument("hold_collectives_for on rank " + std::to_string(rank()) +
                          ": the holder is no thread (a default std::thread::id)");
  }
  // Taken afresh by this thread first, so that refusals still pending take
  // effect before the holder's series, as a claim's would: the holder's own
  // calls pass as nested claims and act on nothing (a review: the mark
  // landed only after the series). Then handed to the holder.
  std::thread::id current{};
  if (holder_.compare_exchange_strong(current, std::this_thread::get_id(), std::memory_order_acquire,
                                      std::memory_order_relaxed)) {
    if (refusals_pending_.load(std::memory_order_relaxed) != 0) act_on_refusals();
    hold_reason_.store(why, std::memory_order_relaxed);
    holder_.store(holder, std::memory_order_release);
    return;
  }
  // Held again for the same thread: the hold stays and errors quote the
  // latest reason. Only a hold, though: the holder inside a collective of
  // its own (no reason) is another thread inside a collective, refused as
  // this function promises. Taken as a hold, its call's end released the
  // endpoint but left the reason, and every later refusal beside a running
  // call read as one under a hold: counted, not marked (a review).
  if (current == holder && hold_reason_.load(std::memory_order_relaxed) != nullptr) {
    hold_reason_.store(why, std::memory_order_relaxed);
    return;
  }
  held_by_another_thread("hold_collectives_for", Refusal::NotACollective);
}

void Backend::release_collectives(std::thread::id holder) {
  if (holder_.load(std::memory_order_relaxed) != holder) return;
  hold_reason_.store(nullptr, std::memory_order_relaxed);
  holder_.compare_exchange_strong(holder, std::thread::id{}, std::memory_order_release,
                                  std::memory_order_relaxed);
}

std::shared_ptr<Backend> Backend::new_group(std::span<const int> ranks) {
  const ThreadClaim claim(*this, "new_group");
  check_collective([&] {
    const std::string prefix = where("new_group");
    if (ranks.empty()) throw InvalidArgument(prefix + ": the list of ranks is empty");
    for (int r : ranks) {
      if (r < 0 || r >= world_size()) {
        throw InvalidArgument(prefix + ": rank " + std::to_string(r) + " is out of range (ranks are 0.." +
                              std::to_string(world_size() - 1) + ")");
      }
    }
    std::vector<int> seen(ranks.begin(), ranks.end());
    std::sort(seen.begin(), seen.end());
    if (auto dup = std::adjacent_find(seen.begin(), seen.end()); dup != seen.end()) {
      throw InvalidArgument(prefix + ": rank " + std::to_string(*dup) + " is listed twice");
    }
  });
  try {
    return do_new_group(std::vector<int>(ranks.begin(), ranks.end()));
  } catch (const CollectiveMismatch& e) {
    // The ranks compare their lists by hash (one descriptor each): say which
    // list this rank passed, which the hash alone does not (found by a review).
    const std::string what = e.what();
    if (what.find("new_group(") == std::string::npos) throw;
    if (what != new_group_mismatch_thrown_) {
      new_group_mismatch_thrown_ = what;
      new_group_mismatch_told_ = what + "; this rank's new_group list is " + bracketed_ranks(ranks);
    }
    throw CollectiveMismatch(new_group_mismatch_told_);
  }
}

}  // namespace axonml::distributed
