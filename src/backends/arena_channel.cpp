#include "backends/arena_channel.hpp"

#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <utility>

#include "axonml/distributed/error.hpp"
#include "base/env.hpp"
#include "base/log.hpp"
#include "base/text.hpp"
#include "shm/arena_view.hpp"
#include "shm/numa_place.hpp"

namespace axonml::distributed {

namespace {

// AXON_CHECK_COLLECTIVES=0 turns the descriptor check off. It exists only to
// measure what the check costs (axon-bench with and without it); the check is
// on by default and should stay on.
bool collective_checks_enabled() {
  static const bool enabled = env::flag("AXON_CHECK_COLLECTIVES").value_or(true);
  return enabled;
}

// Polls of an exchange() before every poll also moves point-to-point traffic
// (fewer when the rank spins fewer: WaitContext::spin_polls).
constexpr int kQuickPolls = 64;

std::uint64_t mix(std::uint64_t h) {
  h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ULL;
  h = (h ^ (h >> 27)) * 0x94D049BB133111EBULL;
  return h ^ (h >> 31);
}

// Every field of `d` but its call number, folded into 64 bits: a loop of
// identical collectives (the usual case) folds them once (begin()).
std::uint64_t fields_digest_of(const shm::Descriptor& d) {
  std::uint64_t h = mix(d.count + 0x9E3779B97F4A7C15ULL);
  h = mix(h ^ d.detail);
  h = mix(h ^ (std::uint64_t{d.op} | std::uint64_t{static_cast<std::uint32_t>(d.root)} << 32));
  return mix(h ^ (std::uint64_t{d.dtype} | std::uint64_t{d.reduce_op} << 8 | std::uint64_t{d.step} << 16));
}

bool same_fields(const shm::Descriptor& a, const shm::Descriptor& b) {
  return a.count == b.count && a.detail == b.detail && a.root == b.root && a.op == b.op &&
         a.dtype == b.dtype && a.reduce_op == b.reduce_op && a.step == b.step;
}

// The whole descriptor's digest: equal descriptors have equal digests, and
// different ones differ but with probability 2^-64 (mix is a bijection, so
// two digests are equal exactly when fields ^ call are).
std::uint64_t digest_of(std::uint64_t fields_digest, std::uint64_t call) { return mix(fields_digest ^ call); }

// Into `d` in place, in 8-byte stores: the next reads of it (same_fields,
// the digest) load 8 or 16 bytes at once, and a load spanning several
// narrower stores just made cannot be served by store forwarding. Built
// aside and copied, or field by field, the stalls took ~8% of a 4-byte
// all-reduce's own time (perf; a world of one: 72 -> 66 ns median).
void fill_descriptor(shm::Descriptor& d, const CollectiveCall& call, std::uint64_t number, std::uint8_t step) {
  static_assert(std::endian::native == std::endian::little);
  static_assert(offsetof(shm::Descriptor, root) == 24 && offsetof(shm::Descriptor, op) == 28 &&
                offsetof(shm::Descriptor, dtype) == 29 && offsetof(shm::Descriptor, reduce_op) == 30 &&
                offsetof(shm::Descriptor, step) == 31);
  d.call = number;
  d.count = call.count;
  d.detail = call.detail;
  const std::uint64_t reduce_op = call.has_reduce_op ? static_cast<std::uint8_t>(call.reduce_op) : 0xff;
  const std::uint64_t tail = std::uint64_t{static_cast<std::uint32_t>(call.root)} |
                             std::uint64_t{static_cast<std::uint8_t>(call.op)} << 32 |
                             std::uint64_t{static_cast<std::uint8_t>(call.type)} << 40 | reduce_op << 48 |
                             std::uint64_t{step} << 56;
  std::memcpy(reinterpret_cast<std::byte*>(&d) + offsetof(shm::Descriptor, root), &tail, sizeof tail);
}

}  // namespace

ArenaChannel::ArenaChannel(std::byte* arena_base, shm::GroupHeader* group, std::size_t slot_bytes,
                           int member, std::vector<int> world_ranks, const shm::WaitContext& waits,
                           PointToPoint& p2p)
    : arena_base_(arena_base),
      group_(group),
      slot_bytes_(slot_bytes),
      member_(member),
      world_ranks_(std::move(world_ranks)),
      waits_(waits),
      p2p_(p2p) {
  check::equal(std::size_t{group_->size}, world_ranks_.size(), "ArenaChannel: group size");
  // Read now, so that a bad AXON_CHECK_COLLECTIVES fails every rank as it
  // joins, not only the first to call a collective (its peers then saw
  // nothing but "job aborted"; found by a review).
  (void)collective_checks_enabled();
  controls_ = shm::member_controls(*group_, slot_bytes_);
  data_ = shm::group_slots(*group_, slot_bytes_);
  // Our two slots are written only by us: keep them on our NUMA node.
  shm::place_on_bound_node(data_ + 2 * static_cast<std::size_t>(member_) * slot_bytes_, 2 * slot_bytes_);
}

shm::Doorbell& ArenaChannel::doorbell_of(int member) const {
  return shm::ArenaView(arena_base_).rank_control(world_ranks_[static_cast<std::size_t>(member)]).doorbell;
}

void ArenaChannel::begin(const CollectiveCall& call) {
  const std::uint8_t step = std::exchange(next_step_, 0);
  if (!broken_.empty()) throw CollectiveMismatch(broken_);
  // A rank that left: its peers may have gone, taking the group's memory
  // with them, and those still here count it as ended, so an op now would
  // pair with nobody or with a peer's unrelated op (found by a review: it ran
  // when every rank left). A forked child: the rank's process runs its part.
  if (waits_.refuses_ops()) [[unlikely]] refuse(call, step);
  // An aborted job (a dead rank, a peer's timeout) may have left this op's
  // round half done: finishing it could pair with a rank that gave up.
  if (waits_.aborted()) waits_.check_alive();
  fill_descriptor(pending_, call, calls_++, step);
  if (step == kAfterRefusedThreadStep) [[unlikely]] pending_.root = member_;  // unlike any peer's
  check_pending_ = collective_checks_enabled();
  if (check_pending_) {
    if (!same_fields(pending_, digested_)) {
      digested_ = pending_;
      fields_digest_ = fields_digest_of(pending_);
    }
    pending_digest_ = digest_of(fields_digest_, pending_.call);
  }
  if (log::enabled(log::Level::Debug)) log_begin();  // AXON_DEBUG=1: one line per collective
}

void ArenaChannel::log_begin() const {
  // The job's rank in the prefix, as the group's name has (a PyTorch
  // subgroup's arena numbers its members from 0).
  const int job_rank = waits_.names().job_rank(world_ranks_[static_cast<std::size_t>(member_)]);
  log::debug(job_rank, "{} call #{} in group {}", describe(pending_), pending_.call, group_name());
}

std::byte* ArenaChannel::outbox() {
  const std::uint64_t parity = (round_ + 1) & 1;
  return data_ + (2 * static_cast<std::size_t>(member_) + parity) * slot_bytes_;
}

const std::byte* ArenaChannel::inbox(int member) const {
  const std::uint64_t parity = round_ & 1;
  return data_ + (2 * static_cast<std::size_t>(member) + parity) * slot_bytes_;
}

bool ArenaChannel::peers_arrived() const {
  const std::uint64_t next = round_ + 1;
  const std::uint64_t call = calls_ + 1;
  for (int m = 0; m < size(); ++m) {
    if (m == member_) continue;
    if (controls_[m].round.load(std::memory_order_acquire) < next &&
        controls_[m].intent.load(std::memory_order_acquire) != call) {
      return false;
    }
  }
  return true;
}

bool ArenaChannel::peers_arrived_within_spin(std::chrono::nanoseconds at_most) const {
  if (peers_arrived()) return true;
  const int polls = waits_.spin_polls();
  if (polls == 0 || at_most <= std::chrono::nanoseconds::zero()) return false;
  // The clock read once every 64 polls: AXON_SPIN_POLLS may ask for up to
  // a million (tens of ms), and a caller that may not block that long (the
  // PyTorch backend's async ops) gives its limit (a review measured 30 ms).
  constexpr int kPollsPerClockRead = 64;
  const auto give_up = std::chrono::steady_clock::now() + at_most;
  for (int i = 1; i <= polls; ++i) {
    shm::detail::pause_cpu();
    if (peers_arrived()) return true;
    if (i % kPollsPerClockRead == 0 && std::chrono::steady_clock::now() >= give_up) return false;
  }
  return false;
}

void ArenaChannel::announce_next() { controls_[member_].intent.store(calls_ + 1, std::memory_order_release); }

std::vector<int> ArenaChannel::members_ahead() const {
  const std::uint64_t mine = controls_[member_].round.load(std::memory_order_acquire);
  std::vector<int> ahead;
  for (int m = 0; m < size(); ++m) {
    if (controls_[m].round.load(std::memory_order_acquire) > mine) ahead.push_back(m);
  }
  return ahead;
}

// 1. post the descriptor (first round of a collective) and publish the round;
// 2. ring the group bell only if this publish completed the round: after the
//    full barrier, of all publishers of a round at least the last sees every
//    round, so sleepers are woken once per round, not once per member (with
//    n sleepers that was n futex wakes of n waiters each);
// 3. wait for the rest; 4. compare descriptors.
void ArenaChannel::exchange() {
  const std::uint64_t next = round_ + 1;
  const int parity = static_cast<int>(next & 1);
  auto& mine = controls_[member_];
  if (check_pending_) post_descriptor(parity);
  mine.round.store(next, std::memory_order_release);
  shm::full_barrier();
  int first_missing = 0;
  if (all_arrived(next, first_missing)) {
    shm::ring_after_barrier(group_->bell);
  } else {
    wait_for_round(next, first_missing);
  }
  round_ = next;
  if (check_pending_) {
    check_pending_ = false;
    if (!digests_agree(parity)) check_descriptors(parity, next);
  }
}

// Out of exchange(), which then needs no frame for the wait's closures: at
// n = 2 the last member to publish (half the calls) never waits.
[[gnu::noinline]] void ArenaChannel::wait_for_round(std::uint64_t round, int first_missing) {
  // Later checks also consume inbound mailboxes, so that a peer blocked
  // sending to us is never stuck behind this wait. Once a cell has come,
  // that takes a lock and a look at every mailbox (before: one load), so
  // the first polls, when the last peer is usually a few hundred ns away,
  // do it only every 16th time: the poll
  // that sees it arrive comes sooner, and a blocked sender waits a few
  // hundred ns more at most. Only while the wait spins, though: the look
  // before each sleep must drain, since a sender that filled our mailbox
  // before we slept rang no one and rings no more. An oversubscribed rank
  // spins not at all, and its first polls came one per 50 ms sleep: a
  // sender waited for the 16th, 0.3-1.6 s for a 400 KB send at n=3 on 2
  // vCPUs (a review).
  const int quick_polls = std::min(kQuickPolls, waits_.spin_polls());
  int polls = 0;
  auto arrived = [&] {
    if (all_arrived(round, first_missing)) return true;
    if (++polls > quick_polls || polls % 16 == 0) p2p_.progress();
    return false;
  };
  shm::wait_until(arrived, group_->bell, waits_, [&] { return describe_wait(round); },
                  [&] { return missing_ranks(round); }, &p2p_.traffic_bell());
}

// A dissemination barrier (Hensgen, Finkel and Manber): in step k = 0, 1, ...
// ceil(log2 n) - 1, member i tells member i + 2^k "I have heard from my first
// k predecessors" (its relay) and waits for the same word from member i - 2^k.
// After step k it has heard, through the chain, from members i - 2^(k+1) + 1
// .. i, so after the last step from all n; each step costs one cache line
// and wakes at most one sleeper (the successor, on its own doorbell).
//
// The round is published first, as exchange() does, so a member that runs
// another collective in this round sees the barrier's descriptor and reports
// the mismatch. Each barrier member compares its predecessors' digests: a
// predecessor that published this round without relaying it runs another
// collective (mismatch); one that found a mismatch sets its relay to
// relay_broken(round), which its successors pass on, so every member fails
// promptly with CollectiveMismatch instead of waiting for the timeout. The
// broken relay names its round: a member still in the barrier before it
// (its predecessor finished that one, moved on and found the mismatch in the
// next) completes its barrier and meets the mismatch in the next call, where
// it belongs.
//
// A predecessor's digest of this round's parity stays put while we read it:
// it can publish round next + 2 only after we publish next + 1.
void ArenaChannel::synchronize() {
  const std::uint64_t next = round_ + 1;
  const int parity = static_cast<int>(next & 1);
  auto& mine = controls_[member_];
  const bool check = check_pending_;
  check_pending_ = false;
  if (check) post_descriptor(parity);
  mine.round.store(next, std::memory_order_release);
  shm::ring(group_->bell);  // a peer in a mismatched exchange() sees this round at once

  const int n = size();
  for (unsigned step = 1, distance = 1; static_cast<int>(distance) < n; ++step, distance *= 2) {
    const std::uint64_t target = shm::relay_value(next, step);
    mine.relay.store(target, std::memory_order_release);
    shm::ring(doorbell_of((member_ + static_cast<int>(distance)) % n));
    const int pred = (member_ - static_cast<int>(distance) % n + n) % n;
    const auto& theirs = controls_[pred];
    const auto other_collective = [&] {
      return check && theirs.round.load(std::memory_order_acquire) >= next &&
             theirs.digest[parity] != pending_digest_;
    };
    // Our doorbell is also our point-to-point bell: drain the mailboxes
    // while waiting, as exchange() does, so a peer sending to us is never
    // stuck behind this barrier.
    const auto relayed = [&] {
      if (theirs.relay.load(std::memory_order_acquire) >= target || other_collective()) return true;
      p2p_.progress();
      return false;
    };
    const auto needed = [&] {
      std::vector<int> missing = missing_ranks(next);
      if (missing.empty()) missing.push_back(world_ranks_[static_cast<std::size_t>(pred)]);
      return missing;
    };
    shm::wait_until(relayed, doorbell_of(member_), waits_, [&] { return describe_wait(next); }, needed);
    if (other_collective() || theirs.relay.load(std::memory_order_acquire) == shm::relay_broken(next) ||
        (check && theirs.digest[parity] != pending_digest_)) {
      report_barrier_mismatch(next, parity);
    }
  }
  round_ = next;
}

// A barrier member learned of a mismatch (a predecessor in another
// collective, or one that found a mismatch itself). It unblocks its own
// successors first, then reports what the flat check would: once every
// member has published this round, the first member, in rank order, whose
// descriptor differs from its own. Nobody can pass this round meanwhile:
// a barrier completes only through every member's relay.
void ArenaChannel::report_barrier_mismatch(std::uint64_t round, int parity) {
  controls_[member_].relay.store(shm::relay_broken(round), std::memory_order_release);
  for (int d = 1; d < size(); d *= 2) shm::ring(doorbell_of((member_ + d) % size()));
  if (collective_checks_enabled()) {
    int first_missing = 0;
    auto arrived = [&] {
      if (all_arrived(round, first_missing)) return true;
      p2p_.progress();
      return false;
    };
    shm::wait_until(arrived, group_->bell, waits_, [&] { return describe_wait(round); },
                    [&] { return missing_ranks(round); }, &p2p_.traffic_bell());
    check_descriptors(parity, round);  // throws when a descriptor differs
  }
  broken_ = "collective mismatch in group " + group_name() + " at call #" + std::to_string(pending_.call) +
            ": " + waits_.names().rank(world_ranks_[static_cast<std::size_t>(member_)]) + " is in " +
            describe(pending_, /*step_named=*/true) + "; another member found a mismatch (see its error)";
  throw CollectiveMismatch(broken_);
}

std::string ArenaChannel::group_name() const { return bracketed_ranks(waits_.names().job_ranks(world_ranks_)); }

std::string ArenaChannel::describe(const shm::Descriptor& d, bool step_named) const {
  // new_group's detail is its list's hash, which call_text shows as such.
  // The algorithm an all-reduce takes (kPipelined) is not the user's call:
  // only a mismatch in it is worth words (throw_mismatch).
  // A layer's own step (label_next): its number, and in a mismatch the name
  // that layer gave it. Only its number elsewhere: a wait's note is cut at
  // 191 characters, and a name there pushed out the call number and group
  // (a review).
  const bool shared = static_cast<CollectiveOp>(d.op) == CollectiveOp::AllReduce && d.detail == kSharedBuffer;
  std::string note = shared ? "shared buffer" : "";
  if (d.step == kAfterRefusedThreadStep) {
    const bool member = d.root >= 0 && d.root < size();
    return call_text(d.op, d.dtype, d.count, d.reduce_op, -1, d.detail, note) +
           after_refused_thread_text(member ? waits_.names().rank(world_ranks_[static_cast<std::size_t>(d.root)])
                                            : "member " + std::to_string(d.root));
  }
  if (d.step != 0) {
    note += (note.empty() ? "" : ", ") +
            (step_named ? internal_step_text(d.step) : "internal step " + std::to_string(d.step));
  }
  return call_text(d.op, d.dtype, d.count, d.reduce_op, d.root, d.detail, note);
}

void ArenaChannel::check_descriptors(int parity, std::uint64_t round) {
  const shm::Descriptor& mine = controls_[member_].descriptor[parity];
  for (int m = 0; m < size(); ++m) {
    if (m == member_ || controls_[m].digest[parity] == pending_digest_) continue;
    if (controls_[m].descriptor[parity] == mine) continue;
    throw_mismatch(m, parity, round);
  }
}

std::vector<int> ArenaChannel::missing_ranks(std::uint64_t round) const {
  std::vector<int> missing;
  for (int m = 0; m < size(); ++m) {
    if (controls_[m].round.load(std::memory_order_acquire) < round) {
      missing.push_back(world_ranks_[static_cast<std::size_t>(m)]);
    }
  }
  return missing;
}

void ArenaChannel::throw_mismatch(int m, int parity, std::uint64_t round) {
  const shm::Descriptor& mine = controls_[member_].descriptor[parity];
  const shm::Descriptor& theirs = controls_[m].descriptor[parity];
  const std::string peer = waits_.names().rank(world_ranks_[static_cast<std::size_t>(m)]);
  const std::string where = theirs.call == mine.call ? "at call #" + std::to_string(mine.call)
                                                     : "at call #" + std::to_string(mine.call) + " (" + peer +
                                                           "'s call #" + std::to_string(theirs.call) + ")";
  if (theirs == shm::Descriptor{}) {
    // A member that runs without the check publishes no descriptor at all:
    // say so, rather than leave an "unknown-collective" to puzzle over
    // (found by a review).
    broken_ = "collective mismatch in group " + group_name() + " at call #" + std::to_string(mine.call) + ": " +
              peer + " published no description of its call, as a rank with AXON_CHECK_COLLECTIVES=0 does, "
              "while this rank checks (" + describe(mine) +
              "): AXON_CHECK_COLLECTIVES must be the same on every rank";
  } else {
    broken_ = "collective mismatch in group " + group_name() + " " + where + ": " +
              waits_.names().rank(world_ranks_[static_cast<std::size_t>(member_)]) + ": " +
              describe(mine, /*step_named=*/true) + " vs " + peer + ": " + describe(theirs, /*step_named=*/true) +
              out_of_step_text(mine.call, theirs.call, peer);
    // The same all-reduce, by another algorithm or with zero copy on one
    // side only: the ranks' settings differ, not their calls.
    const bool same_call_but_path = static_cast<CollectiveOp>(mine.op) == CollectiveOp::AllReduce &&
                                    theirs.op == mine.op && theirs.dtype == mine.dtype && theirs.count == mine.count &&
                                    theirs.reduce_op == mine.reduce_op && theirs.step == mine.step &&
                                    theirs.detail != mine.detail;
    const bool one_shared = mine.detail == kSharedBuffer || theirs.detail == kSharedBuffer;
    if (same_call_but_path && !one_shared) {
      auto algorithm = [](const shm::Descriptor& d) { return d.detail == kPipelined ? "pipelined" : "one-round"; };
      broken_ += ": the same call, but this rank takes the " + std::string(algorithm(mine)) + " all-reduce and " + peer +
                 " the " + algorithm(theirs) + " one; which a size takes follows AXON_ALLREDUCE_ONE_ROUND_BYTES, "
                 "which must be the same on every rank";
    } else if (same_call_but_path) {
      broken_ += " (every rank must pass a buffer in the shared memory, or none; where zero copy starts follows "
                 "AXON_ALLREDUCE_ONE_ROUND_BYTES, which must be the same on every rank)";
    }
  }
  // Members waiting on us in a barrier learn of it from our relay.
  auto& relay = controls_[member_].relay;
  relay.store(shm::relay_broken(round), std::memory_order_release);
  for (int d = 1; d < size(); d *= 2) shm::ring(doorbell_of((member_ + d) % size()));
  throw CollectiveMismatch(broken_);
}

void ArenaChannel::refuse(const CollectiveCall& call, std::uint8_t step) const {
  // A pending mark after a refused second thread is not this refusal's
  // reason, and its `root` is not set here: left out (a review saw it name
  // "member -1").
  if (step == kAfterRefusedThreadStep) step = 0;
  shm::Descriptor refused;
  fill_descriptor(refused, call, calls_, step);
  // Not by name in a forked child: the names' mutex may have been held
  // by another thread at the fork.
  throw InvalidArgument(describe(refused, /*step_named=*/!waits_.in_forked_child()) + " in group " + group_name() + " on " +
                        waits_.names().rank(world_ranks_[static_cast<std::size_t>(member_)]) + ": " +
                        waits_.why_refused() + "; nothing was done");
}

std::string ArenaChannel::describe_wait(std::uint64_t round) const {
  const shm::Descriptor& current = pending_;
  return describe(current) + " call #" + std::to_string(current.call) + " in group " +
         group_name() + ": waiting for rank(s) " + joined_ranks(waits_.names().job_ranks(missing_ranks(round))) +
         " (round " +
         std::to_string(round) + ")";
}

}  // namespace axonml::distributed
