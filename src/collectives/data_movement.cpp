// Collectives that move data without combining it.
#include <algorithm>
#include <cstring>

#include "collectives/algorithms.hpp"
#include "collectives/block_rounds.hpp"
#include "collectives/copy.hpp"

namespace axonml::distributed::collectives {
namespace {

// Number of rounds to move `count` elements `per_round` at a time (at least one).
std::size_t rounds_for(std::size_t count, std::size_t per_round) {
  return std::max<std::size_t>(1, (count + per_round - 1) / per_round);
}

}  // namespace

void barrier(RoundChannel& channel, BarrierAlgorithm algorithm) {
  if (algorithm == BarrierAlgorithm::Flat) {
    channel.exchange();
  } else {
    channel.synchronize();
  }
}

// Root streams the message through its slot, one slot per round.
void broadcast(RoundChannel& channel, std::byte* data, std::size_t count, DataType type, int root) {
  const std::size_t es = size_of(type);
  const std::size_t per_round = channel.slot_bytes() / es;
  const std::size_t rounds = rounds_for(count, per_round);
  const bool is_root = channel.rank() == root;
  if (channel.size() == 1) {
    channel.exchange();  // the root already holds the data
    return;
  }
  if (count * es <= channel.small_bytes()) {  // a scalar: beside the root's round counter
    if (is_root) copy_bytes(channel.small_outbox(), data, count * es);
    channel.exchange();
    if (!is_root) copy_bytes(data, channel.small_inbox(root), count * es);
    return;
  }
  for (std::size_t k = 0; k < rounds; ++k) {
    const std::size_t offset = k * per_round;
    const std::size_t len = std::min(per_round, count - std::min(count, offset));
    if (is_root) copy_bytes(channel.outbox(), data + offset * es, len * es);
    channel.exchange();
    if (!is_root) copy_bytes(data + offset * es, channel.inbox(root), len * es);
  }
}

namespace {

// Every member publishes its piece; `copy_out` decides who keeps them.
void gather_pieces(RoundChannel& channel, const std::byte* send, std::byte* recv, std::size_t count,
                   DataType type, bool keep) {
  const std::size_t es = size_of(type);
  const int n = channel.size();
  const std::size_t per_round = channel.slot_bytes() / es;
  const std::size_t rounds = rounds_for(count, per_round);
  if (count * es <= channel.small_bytes()) {  // a scalar each: beside the round counters
    copy_bytes(channel.small_outbox(), send, count * es);
    channel.exchange();
    if (!keep) return;
    for (int m = 0; m < n; ++m) {
      copy_bytes(recv + static_cast<std::size_t>(m) * count * es, channel.small_inbox(m), count * es);
    }
    return;
  }
  for (std::size_t k = 0; k < rounds; ++k) {
    const std::size_t offset = k * per_round;
    const std::size_t len = std::min(per_round, count - std::min(count, offset));
    copy_bytes(channel.outbox(), send + offset * es, len * es);
    channel.exchange();
    if (!keep) continue;
    for (int m = 0; m < n; ++m) {
      copy_bytes(recv + (static_cast<std::size_t>(m) * count + offset) * es, channel.inbox(m), len * es);
    }
  }
}

}  // namespace

void all_gather(RoundChannel& channel, const std::byte* send, std::byte* recv, std::size_t count,
                DataType type) {
  gather_pieces(channel, send, recv, count, type, /*keep=*/true);
}

void gather(RoundChannel& channel, const std::byte* send, std::byte* recv, std::size_t count,
            DataType type, int root) {
  gather_pieces(channel, send, recv, count, type, /*keep=*/channel.rank() == root);
}

// Root's slot carries one piece per member each round (per member of a
// window of them when slots are small; see BlockRounds).
void scatter(RoundChannel& channel, const std::byte* send, std::byte* recv, std::size_t count,
             DataType type, int root) {
  const std::size_t es = size_of(type);
  const auto n = static_cast<std::size_t>(channel.size());
  const auto me = static_cast<std::size_t>(channel.rank());
  const BlockRounds schedule(count, n, channel.slot_bytes(), es);
  const bool is_root = channel.rank() == root;
  for (std::size_t k = 0; k < schedule.rounds(); ++k) {
    const std::size_t offset = schedule.offset(k);
    const std::size_t len = schedule.length(k);
    const std::size_t first = schedule.first_block(k);
    const std::size_t blocks = schedule.window_blocks(k);
    if (is_root) {
      for (std::size_t m = first; m < first + blocks; ++m) {
        copy_bytes(channel.outbox() + (m - first) * schedule.per_block * es,
                   send + (m * count + offset) * es, len * es);
      }
    }
    channel.exchange();
    if (me < first || me >= first + blocks) continue;
    copy_bytes(recv + offset * es, channel.inbox(root) + (me - first) * schedule.per_block * es,
               len * es);
  }
}

// Member m's slot holds one piece for each member of a window of them (all
// n while a slot holds n elements; see BlockRounds): piece q goes to member
// q. Each round every member fills its slot, exchanges, and the members of
// the window copy their piece out of every slot. `count` is elements per
// block. (A piece per member of at least one element each, whatever the
// slot, overran slots smaller than n elements into the next parity's, and
// the peers read wrong data there: a review, 8-byte elements at n = 9 in
// 64-byte slots.)
void all_to_all(RoundChannel& channel, const std::byte* send, std::byte* recv, std::size_t count,
                DataType type) {
  const std::size_t es = size_of(type);
  const auto n = static_cast<std::size_t>(channel.size());
  const auto me = static_cast<std::size_t>(channel.rank());
  const BlockRounds schedule(count, n, channel.slot_bytes(), es);
  for (std::size_t k = 0; k < schedule.rounds(); ++k) {
    const std::size_t offset = schedule.offset(k);
    const std::size_t len = schedule.length(k);
    const std::size_t first = schedule.first_block(k);
    const std::size_t blocks = schedule.window_blocks(k);
    auto piece_of = [&](std::size_t q) { return (q - first) * schedule.per_block * es; };
    for (std::size_t q = first; q < first + blocks; ++q) {
      if (q == me) continue;  // our own piece goes straight from send to recv
      copy_bytes(channel.outbox() + piece_of(q), send + (q * count + offset) * es, len * es);
    }
    channel.exchange();
    if (me < first || me >= first + blocks) continue;
    for (std::size_t m = 0; m < n; ++m) {
      const std::byte* from = m == me ? send + (me * count + offset) * es
                                      : channel.inbox(static_cast<int>(m)) + piece_of(me);
      copy_bytes(recv + (m * count + offset) * es, from, len * es);
    }
  }
}

}  // namespace axonml::distributed::collectives
