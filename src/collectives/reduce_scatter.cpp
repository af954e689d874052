// Collectives that combine data but leave each result on one member.
#include <algorithm>
#include <cstring>
#include <vector>

#include "collectives/algorithms.hpp"
#include "collectives/block_rounds.hpp"
#include "collectives/copy.hpp"
#include "kernels/reduce.hpp"

namespace axonml::distributed::collectives {
namespace {

// A group of one has nothing to combine: its data comes out as it went in,
// NaN payloads too, as all_reduce leaves them (a reduction of one source
// made every NaN the canonical one; found by a review).
void keep_as_it_is(RoundChannel& channel, const std::byte* send, std::byte* recv, std::size_t bytes) {
  if (bytes > 0 && send != recv) std::memmove(recv, send, bytes);
  channel.exchange();
}

}  // namespace

// Each round every member publishes the next piece of its blocks (all n, or
// a window of them when slots are small; see BlockRounds); the members whose
// block is in the round then reduce its piece from every inbox, in rank order.
// A member's own block is read only by itself, so it never goes through the
// slot: the reduce takes our part straight from `send` (at n = 2, half the
// copy-in; see all_reduce_pipelined for why copies into the slots cost).
void reduce_scatter(RoundChannel& channel, const std::byte* send, std::byte* recv,
                    std::size_t count, DataType type, ReduceOp op) {
  const std::size_t es = size_of(type);
  const auto n = static_cast<std::size_t>(channel.size());
  const auto me = static_cast<std::size_t>(channel.rank());
  if (n == 1) {
    keep_as_it_is(channel, send, recv, count * es);
    return;
  }
  const BlockRounds schedule(count, n, channel.slot_bytes(), es);
  std::vector<const std::byte*> sources(n);
  for (std::size_t k = 0; k < schedule.rounds(); ++k) {
    const std::size_t offset = schedule.offset(k);
    const std::size_t len = schedule.length(k);
    const std::size_t first = schedule.first_block(k);
    const std::size_t blocks = schedule.window_blocks(k);
    for (std::size_t b = first; b < first + blocks; ++b) {
      if (b == me) continue;
      copy_bytes(channel.outbox() + (b - first) * schedule.per_block * es,
                 send + (b * count + offset) * es, len * es);
    }
    channel.exchange();
    if (me < first || me >= first + blocks) continue;
    for (std::size_t m = 0; m < n; ++m) {
      sources[m] = channel.inbox(static_cast<int>(m)) + (me - first) * schedule.per_block * es;
    }
    sources[me] = send + (me * count + offset) * es;
    kernels::reduce(type, op, sources, recv + offset * es, len);
  }
}

// Every member streams its data through its slot; root reduces each chunk.
void reduce(RoundChannel& channel, const std::byte* send, std::byte* recv, std::size_t count,
            DataType type, ReduceOp op, int root) {
  const std::size_t es = size_of(type);
  const auto n = static_cast<std::size_t>(channel.size());
  if (n == 1) {
    keep_as_it_is(channel, send, recv, count * es);
    return;
  }
  const std::size_t per_round = channel.slot_bytes() / es;
  const std::size_t rounds = std::max<std::size_t>(1, (count + per_round - 1) / per_round);
  std::vector<const std::byte*> sources(n);
  if (count * es <= channel.small_bytes()) {  // a scalar each: beside the round counters
    copy_bytes(channel.small_outbox(), send, count * es);
    channel.exchange();
    if (channel.rank() != root) return;
    for (std::size_t m = 0; m < n; ++m) sources[m] = channel.small_inbox(static_cast<int>(m));
    kernels::reduce(type, op, sources, recv, count);
    return;
  }
  for (std::size_t k = 0; k < rounds; ++k) {
    const std::size_t offset = k * per_round;
    const std::size_t len = std::min(per_round, count - std::min(count, offset));
    copy_bytes(channel.outbox(), send + offset * es, len * es);
    channel.exchange();
    if (channel.rank() != root) continue;
    for (std::size_t m = 0; m < n; ++m) sources[m] = channel.inbox(static_cast<int>(m));
    kernels::reduce(type, op, sources, recv + offset * es, len);
  }
}

}  // namespace axonml::distributed::collectives
