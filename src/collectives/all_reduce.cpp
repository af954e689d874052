#include <algorithm>
#include <cstdlib>
#include <span>
#include <optional>
#include <cstring>
#include <vector>

#include "base/env.hpp"
#include "collectives/algorithms.hpp"
#include "collectives/all_reduce_small.hpp"
#include "collectives/copy.hpp"
#include "kernels/reduce.hpp"

namespace axonml::distributed::collectives {
namespace {

// One round per slotful: copy in, exchange, every member reduces all slots in
// rank order straight into its own output (its own part read where it lies,
// not from its slot). Reads n times the message per member, so it pays off
// only while latency dominates (one slotful), when slots are too small for
// the pipelined algorithm's n + 1 blocks, or at two members, where it reads
// no more across cores than the pipelined one (the peer's whole message) and
// never waits for the peer's reduce.
void all_reduce_one_round(RoundChannel& channel, std::byte* data, std::size_t count, DataType type,
                          ReduceOp op) {
  const int n = channel.size();
  const std::size_t es = size_of(type);
  const std::size_t per_round = channel.slot_bytes() / es;
  SmallSources holder(n);
  const std::span<const std::byte*> sources = holder.get();
  std::size_t offset = 0;
  do {
    const std::size_t len = std::min(per_round, count - offset);
    std::byte* here = data + offset * es;
    copy_bytes(channel.outbox(), here, len * es);
    channel.exchange();
    for (int m = 0; m < n; ++m) sources[static_cast<std::size_t>(m)] = channel.inbox(m);
    // Our own part where it already lies, not the copy in our slot, which
    // the peers are reading at this moment.
    sources[static_cast<std::size_t>(channel.rank())] = here;
    kernels::reduce(type, op, sources, here, len);
    offset += len;
  } while (offset < count);
}

// Elements of the largest slice the pipelined all-reduce can give each of n
// members: a slot holds one chunk (n slices) plus a reduced slice.
std::size_t pipelined_block_limit(std::size_t slot_bytes, std::size_t es, std::size_t n) {
  std::size_t max_block = slot_bytes / es / (n + 1);
  if (max_block >= 16) max_block -= max_block % 16;
  return max_block;
}

// Reduce-scatter then all-gather, pipelined one chunk per round.
//
// A slot holds [ input chunk : chunk elements | reduced slice : block elements ].
// The chunk is split into n slices of `block` elements; member m reduces
// slice m. Round k:
//   1. copy into the outbox the slices of chunk k that the other members
//      reduce (the reduced slice of chunk k - 1 is already there, written at
//      the end of round k - 1);
//   2. exchange;
//   3. copy the other members' reduced slices of chunk k - 1 into the output;
//   4. reduce slice `me` of chunk k in place in `data`: our own part is read
//      where it already lies, the others' from their inboxes, in rank order;
//      then copy the result, still in L1/L2, into the next outbox.
// The whole message takes (chunks + 1) exchanges.
//
// Our own slice never goes through the slots: at n = 2 that is half the
// copy-in and half the copy-out. Every copy into the slots is a write to
// lines the peers read a round earlier (so it must take them back from their
// caches), and with the output written once, where it belongs, each rank
// moves a third fewer bytes: a 1 MiB all-reduce at n = 2 takes 119-138 us
// this way against 174-190 us when every slice goes through the slots, in a
// two-process model of both (2-vCPU machine, slow phase, where the
// cross-core hand-off of 1 MiB alone takes 78 us). Two members now take the
// one-round algorithm instead, which reads the same bytes across cores with
// one dependency on the peer per slotful instead of two: 0.63x this one's time
// at 64 KiB and 0.95-0.98x from 256 KiB to 16 MiB (7 interleaved rounds,
// fresh inputs).
void all_reduce_pipelined(RoundChannel& channel, std::byte* data, std::size_t count, DataType type,
                          ReduceOp op) {
  const auto n = static_cast<std::size_t>(channel.size());
  const auto me = static_cast<std::size_t>(channel.rank());
  const std::size_t es = size_of(type);
  // The fewest chunks that fit the slots, then equal chunks whose slices
  // start on cache-line boundaries, so that every member has as much to
  // reduce in every round (a message just over one chunk must not leave most
  // members idle in its last round).
  const std::size_t max_block = pipelined_block_limit(channel.slot_bytes(), es, n);
  const std::size_t chunks = (count + n * max_block - 1) / (n * max_block);
  const std::size_t per_chunk = (count + chunks - 1) / chunks;
  std::size_t block = (per_chunk + n - 1) / n;
  if (max_block >= 16) block = std::min(max_block, (block + 15) / 16 * 16);
  const std::size_t chunk = block * n;

  auto chunk_length = [&](std::size_t k) { return std::min(chunk, count - k * chunk); };
  auto slice = [&](std::size_t k, std::size_t m) {  // [begin, end) within chunk k
    const std::size_t len = chunk_length(k);
    return std::pair{std::min(m * block, len), std::min((m + 1) * block, len)};
  };

  std::vector<const std::byte*> sources(n);
  for (std::size_t k = 0; k <= chunks; ++k) {
    if (k < chunks) {
      // Everything but our slice: the part before it and the part after it.
      const std::byte* in = data + k * chunk * es;
      const auto [begin, end] = slice(k, me);
      copy_bytes(channel.outbox(), in, begin * es);
      copy_bytes(channel.outbox() + end * es, in + end * es, (chunk_length(k) - end) * es);
    }
    channel.exchange();
    if (k >= 1) {
      for (std::size_t m = 0; m < n; ++m) {
        if (m == me) continue;  // reduced in place in round k - 1
        const auto [begin, end] = slice(k - 1, m);
        copy_bytes(data + ((k - 1) * chunk + begin) * es,
                   channel.inbox(static_cast<int>(m)) + chunk * es, (end - begin) * es);
      }
    }
    if (k < chunks) {
      const auto [begin, end] = slice(k, me);
      std::byte* mine = data + (k * chunk + begin) * es;
      for (std::size_t m = 0; m < n; ++m) sources[m] = channel.inbox(static_cast<int>(m)) + begin * es;
      sources[me] = mine;
      kernels::reduce(type, op, sources, mine, end - begin);
      copy_bytes(channel.outbox() + chunk * es, mine, (end - begin) * es);
    }
  }
}

}  // namespace

std::size_t one_round_all_reduce_limit(std::size_t slot_bytes, int members) {
  // Every member reads every slot, n times the message: worth it while the
  // message is small next to the cost of the extra round of the pipelined
  // algorithm, which keeps each member's own slice out of the slots. The
  // pipelined one wins from 32 KiB at n=2 (0.87-0.91x the one-round time at
  // 32-128 KiB, 16 KiB equal) and from 8 KiB at n=8 (0.90x at 8 KiB,
  // 0.69-0.71x at 16 and 32 KiB), 7 interleaved rounds each on 2 cores; the
  // 16-core run also showed 64 KiB one-round slower at n=16 than the
  // pipelined 256 KiB. Hence 32 KiB / n within 4..16 KiB. (Those runs read
  // the member's own part from its slot; two members now take one round at
  // every size, see all_reduce(). The limit still sets where zero copy
  // starts.)
  std::size_t limit = std::clamp<std::size_t>((std::size_t{32} << 10) / static_cast<std::size_t>(members),
                                              std::size_t{4} << 10, std::size_t{16} << 10);
  static const std::optional<long long> requested =
      env::integer("AXON_ALLREDUCE_ONE_ROUND_BYTES", 0, 1LL << 40);
  if (requested) limit = static_cast<std::size_t>(*requested);
  return std::min(limit, slot_bytes);
}

bool all_reduce_is_pipelined(const RoundChannel& channel, std::size_t bytes, DataType type,
                             std::size_t one_round_limit) {
  return channel.size() > 2 &&  // two: see all_reduce_one_round; measured in docs/benchmarks.md
         bytes > one_round_limit &&
         pipelined_block_limit(channel.slot_bytes(), size_of(type), static_cast<std::size_t>(channel.size())) != 0;
}

void all_reduce(RoundChannel& channel, std::byte* data, std::size_t count, DataType type,
                ReduceOp op, std::size_t one_round_limit) {
  const std::size_t bytes = count * size_of(type);
  if (channel.size() == 1) {
    // Nothing to combine: x op nothing is x, and Average of one is x. The
    // buffer stays as it is, NaN payloads too: making them canonical costs a
    // pass over the buffer (10 ms a call for 100 MB, a single-process DDP
    // step's gradients; measured by the review of the change), which a world
    // of one should not pay. MpiBackend does the same.
    channel.exchange();
    return;
  }
  if (bytes <= channel.small_bytes()) {
    all_reduce_small<RoundChannel>(channel, data, count, type, op);
  } else if (all_reduce_is_pipelined(channel, bytes, type, one_round_limit)) {
    all_reduce_pipelined(channel, data, count, type, op);
  } else {
    all_reduce_one_round(channel, data, count, type, op);
  }
}

}  // namespace axonml::distributed::collectives

namespace axonml::distributed::collectives {

std::optional<std::pair<int, int>> all_reduce_shared(RoundChannel& channel, std::byte* data,
                                                     std::size_t count, DataType type, ReduceOp op) {
  const auto n = static_cast<std::size_t>(channel.size());
  const auto me = static_cast<std::size_t>(channel.rank());
  const std::size_t es = size_of(type);

  const std::uint64_t mine = channel.offset_of(data);
  copy_bytes(channel.outbox(), &mine, sizeof(mine));
  channel.exchange();
  std::vector<std::byte*> buffers(n);
  for (std::size_t m = 0; m < n; ++m) {
    std::uint64_t offset = 0;
    copy_bytes(&offset, channel.inbox(static_cast<int>(m)), sizeof(offset));
    buffers[m] = channel.address_of(offset);
  }
  // Every member writes into every buffer, so two that overlap would corrupt
  // each other. Every member sees the same offsets and returns the same pair,
  // before anyone has written: the group stays in step and usable.
  const std::size_t bytes = count * es;
  for (std::size_t a = 0; a < n; ++a) {
    for (std::size_t b = a + 1; b < n; ++b) {
      if (buffers[a] < buffers[b] + bytes && buffers[b] < buffers[a] + bytes) {
        return std::pair{static_cast<int>(a), static_cast<int>(b)};
      }
    }
  }

  std::size_t block = (count + n - 1) / n;
  block = (block + 15) / 16 * 16;  // slices on cache-line boundaries
  auto slice = [&](std::size_t m) {
    return std::pair{std::min(m * block, count), std::min((m + 1) * block, count)};
  };

  // Member `me` alone reads and writes slice `me` of every buffer, so it may
  // reduce in place into its own and write the result straight into the
  // others': two exchanges instead of three, and nobody reads a reduced slice
  // back out of its owner's buffer. Piece by piece, so each copy reads what
  // the reduce has just written while it is still in this core's L1.
  const auto [begin, end] = slice(me);
  std::vector<const std::byte*> sources(n);
  constexpr std::size_t kPieceBytes = 32 * 1024;
  const std::size_t piece = std::max<std::size_t>(kPieceBytes / es, 1);
  for (std::size_t at = begin; at < end; at += piece) {
    // A member that timed out has left the op and may be reusing its buffer
    // (a rank stopped here, SIGSTOP or a debugger, went on writing into it
    // after the other's call had failed: a review). Checked per piece, so a
    // late member writes at most the piece it was in.
    channel.throw_if_aborted();
    const std::size_t len = std::min(piece, end - at);
    for (std::size_t m = 0; m < n; ++m) sources[m] = buffers[m] + at * es;
    kernels::reduce(type, op, sources, data + at * es, len);
    for (std::size_t m = 0; m < n; ++m) {
      if (m != me) copy_bytes(buffers[m] + at * es, data + at * es, len * es);
    }
  }
  // Once more after the last piece, before this member's last round: a
  // member that gave up sets the abort before its caller can rewrite its
  // buffer, and stores become visible in order here (x86), so when no abort
  // shows now, nothing this member read came from such a rewrite. Not after
  // the exchange: by then every member may have finished the op, and one
  // that exits non-zero right after (which aborts the job) would fail the
  // others' finished op.
  channel.throw_if_aborted();
  // Nobody may return (and change its buffer) until every slice is written.
  channel.exchange();
  return std::nullopt;
}

}  // namespace axonml::distributed::collectives
