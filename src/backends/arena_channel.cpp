#include "backends/arena_channel.hpp"

#include <cstdlib>
#include <cstring>
#include <string_view>

#include "axonml/distributed/error.hpp"
#include "base/env.hpp"
#include "base/log.hpp"
#include "base/text.hpp"
#include "shm/arena_view.hpp"

namespace axonml::distributed {

namespace {

// AXON_CHECK_COLLECTIVES=0 turns the descriptor check off. It exists only to
// measure what the check costs (axon-bench with and without it); the check is
// on by default and should stay on.
bool collective_checks_enabled() {
  static const bool enabled = env::flag("AXON_CHECK_COLLECTIVES").value_or(true);
  return enabled;
}

std::uint64_t mix(std::uint64_t h) {
  h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ULL;
  h = (h ^ (h >> 27)) * 0x94D049BB133111EBULL;
  return h ^ (h >> 31);
}

// Every field of `d`, folded into 64 bits: equal descriptors have equal
// digests, and different ones differ but with probability 2^-64.
std::uint64_t digest_of(const shm::Descriptor& d) {
  std::uint64_t h = mix(d.call + 0x9E3779B97F4A7C15ULL);
  h = mix(h ^ d.count);
  h = mix(h ^ d.detail);
  h = mix(h ^ (std::uint64_t{d.op} | std::uint64_t{static_cast<std::uint32_t>(d.root)} << 32));
  return mix(h ^ (std::uint64_t{d.dtype} | std::uint64_t{d.reduce_op} << 8));
}

}  // namespace

ArenaChannel::ArenaChannel(std::byte* arena_base, shm::GroupHeader* group, std::size_t slot_bytes,
                           int member, std::vector<int> world_ranks, const shm::WaitGuard& guard,
                           PointToPoint& p2p)
    : arena_base_(arena_base),
      group_(group),
      slot_bytes_(slot_bytes),
      member_(member),
      world_ranks_(std::move(world_ranks)),
      guard_(guard),
      p2p_(p2p) {
  check::equal(std::size_t{group_->size}, world_ranks_.size(), "ArenaChannel: group size");
  controls_ = shm::member_controls(*group_, slot_bytes_);
  data_ = shm::group_slots(*group_, slot_bytes_);
}

void ArenaChannel::begin(const CollectiveCall& call) {
  if (!broken_.empty()) throw CollectiveMismatch(broken_);
  pending_ = shm::Descriptor{};
  pending_.call = calls_++;
  pending_.count = call.count;
  pending_.detail = call.detail;
  pending_.op = static_cast<std::uint8_t>(call.op);
  pending_.root = call.root;
  pending_.dtype = static_cast<std::uint8_t>(call.type);
  pending_.reduce_op = call.has_reduce_op ? static_cast<std::uint8_t>(call.reduce_op) : 0xff;
  check_pending_ = collective_checks_enabled();
  if (check_pending_) pending_digest_ = digest_of(pending_);
  if (log::enabled(log::Level::Debug)) {  // AXON_DEBUG=1: one line per collective
    log::debug(world_ranks_[static_cast<std::size_t>(member_)], "{} call #{} in group {}",
               describe(pending_), pending_.call, group_name());
  }
}

std::byte* ArenaChannel::outbox() {
  const std::uint64_t parity = (round_ + 1) & 1;
  return data_ + (2 * static_cast<std::size_t>(member_) + parity) * slot_bytes_;
}

const std::byte* ArenaChannel::inbox(int member) const {
  const std::uint64_t parity = round_ & 1;
  return data_ + (2 * static_cast<std::size_t>(member) + parity) * slot_bytes_;
}

bool ArenaChannel::all_arrived(std::uint64_t round, int& first_missing) const {
  const int n = size();
  for (; first_missing < n; ++first_missing) {
    if (controls_[first_missing].round.load(std::memory_order_acquire) < round) return false;
  }
  return true;
}

void ArenaChannel::exchange() {
  const std::uint64_t next = round_ + 1;
  const int parity = static_cast<int>(next & 1);
  auto& mine = controls_[member_];
  if (check_pending_) {
    mine.descriptor[parity] = pending_;
    mine.digest[parity] = pending_digest_;
  }
  mine.round.store(next, std::memory_order_release);
  shm::ring(group_->bell);

  // The first check is the fast path: peers that are already there cost no
  // point-to-point polling. Later checks also consume inbound mailboxes.
  int first_missing = 0;
  auto arrived = [&] {
    if (all_arrived(next, first_missing)) return true;
    p2p_.progress();
    return false;
  };
  shm::wait_until(arrived, group_->bell, guard_, [&] { return describe_wait(next); },
                  [&] { return missing_ranks(next); }, &p2p_.traffic_bell());
  round_ = next;
  if (check_pending_) {
    check_pending_ = false;
    check_descriptors(parity);
  }
}

std::string ArenaChannel::group_name() const { return bracketed(world_ranks_); }

std::string ArenaChannel::describe(const shm::Descriptor& d) const {
  std::string s(to_string(static_cast<CollectiveOp>(d.op)));
  s += "(";
  const auto op = static_cast<CollectiveOp>(d.op);
  if (op == CollectiveOp::Barrier) return s + ")";
  if (op == CollectiveOp::NewGroup) return s + std::to_string(d.count) + " ranks, list hash " +
                                           std::to_string(d.detail) + ")";
  s += std::string(to_string(static_cast<DataType>(d.dtype))) + ", " + std::to_string(d.count);
  if (d.reduce_op != 0xff) s += ", " + std::string(to_string(static_cast<ReduceOp>(d.reduce_op)));
  if (d.root >= 0) s += ", root " + std::to_string(d.root);
  if (d.detail == kSharedBuffer) s += ", shared buffer";
  return s + ")";
}

void ArenaChannel::check_descriptors(int parity) {
  const shm::Descriptor& mine = controls_[member_].descriptor[parity];
  for (int m = 0; m < size(); ++m) {
    if (m == member_ || controls_[m].digest[parity] == pending_digest_) continue;
    const shm::Descriptor& theirs = controls_[m].descriptor[parity];
    if (theirs == mine) continue;
    std::string where = theirs.call == mine.call
                            ? "at call #" + std::to_string(mine.call)
                            : "at call #" + std::to_string(mine.call) + " (rank " +
                                  std::to_string(world_ranks_[static_cast<std::size_t>(m)]) +
                                  "'s call #" + std::to_string(theirs.call) + ")";
    broken_ = "collective mismatch in group " + group_name() + " " + where + ": rank " +
              std::to_string(world_ranks_[static_cast<std::size_t>(member_)]) + ": " +
              describe(mine) + " vs rank " +
              std::to_string(world_ranks_[static_cast<std::size_t>(m)]) + ": " + describe(theirs);
    throw CollectiveMismatch(broken_);
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

std::string ArenaChannel::describe_wait(std::uint64_t round) const {
  std::string missing;
  for (int r : missing_ranks(round)) {
    if (!missing.empty()) missing += ", ";
    missing += std::to_string(r);
  }
  const shm::Descriptor& current = pending_;
  return describe(current) + " call #" + std::to_string(current.call) + " in group " +
         group_name() + ": waiting for rank(s) " + missing + " (round " + std::to_string(round) + ")";
}

}  // namespace axonml::distributed
