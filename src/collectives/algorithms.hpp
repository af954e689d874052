// The collective algorithms, written against RoundChannel alone.
//
// Buffers are raw bytes of `count` elements of `type` per rank, laid out as
// documented in axonml/distributed/backend.hpp. Every algorithm makes at
// least one exchange() (so even a count of 0 synchronizes and is checked
// against the peers' descriptors) and any count works: data larger than a
// slot is pipelined through the slots in chunks.
//
// Reductions combine members in rank order, one element at a time, whichever
// algorithm runs, so results are bitwise identical on every rank and do not
// depend on the message size.
#pragma once

#include <cstddef>
#include <optional>
#include <utility>

#include "axonml/distributed/dtype.hpp"
#include "collectives/round_channel.hpp"

namespace axonml::distributed::collectives {

// Messages up to this many bytes use the one-round all-reduce (every member
// reduces all slots); larger ones use reduce-scatter + all-gather.
// AXON_ALLREDUCE_ONE_ROUND_BYTES overrides the default (which shrinks with
// the number of members); the slot size caps it.
std::size_t one_round_all_reduce_limit(std::size_t slot_bytes, int members);

// Whether all_reduce() takes reduce-scatter + all-gather (pipelined) for a
// message of `bytes` larger than the channel's small payload. Every member
// must choose alike: a transport that checks calls makes the choice part of
// what members agree on, since `one_round_limit` comes from each member's
// environment (members that chose differently returned different sums).
bool all_reduce_is_pipelined(const RoundChannel& channel, std::size_t bytes, DataType type,
                             std::size_t one_round_limit);

// `one_round_limit`: one_round_all_reduce_limit() of this channel, which its
// owner computes once (it depends on the channel and the environment only).
void all_reduce(RoundChannel& channel, std::byte* data, std::size_t count, DataType type,
                ReduceOp op, std::size_t one_round_limit);
// Zero copy: `data` lies in the shared region on every member. Two
// exchanges: addresses; then each member reduces its slice of all buffers
// and writes the result into that slice of every buffer. Returns the first
// two members whose buffers overlap, having reduced nothing, if any do.
std::optional<std::pair<int, int>> all_reduce_shared(RoundChannel& channel, std::byte* data,
                                                     std::size_t count, DataType type, ReduceOp op);
void broadcast(RoundChannel& channel, std::byte* data, std::size_t count, DataType type, int root);
void all_gather(RoundChannel& channel, const std::byte* send, std::byte* recv, std::size_t count,
                DataType type);
void gather(RoundChannel& channel, const std::byte* send, std::byte* recv, std::size_t count,
            DataType type, int root);
void scatter(RoundChannel& channel, const std::byte* send, std::byte* recv, std::size_t count,
             DataType type, int root);
void reduce_scatter(RoundChannel& channel, const std::byte* send, std::byte* recv,
                    std::size_t count, DataType type, ReduceOp op);
void reduce(RoundChannel& channel, const std::byte* send, std::byte* recv, std::size_t count,
            DataType type, ReduceOp op, int root);
// Every member's slot carries one piece per member each round, like scatter
// from every root at once.
void all_to_all(RoundChannel& channel, const std::byte* send, std::byte* recv, std::size_t count,
                DataType type);
// Flat: one exchange() (every member reads every member's round; best when
// ranks share cores, where each hand-off costs a context switch).
// Dissemination: RoundChannel::synchronize(), log n hand-offs (best when every
// rank has a core). Every member must pass the same algorithm.
enum class BarrierAlgorithm { Flat, Dissemination };
void barrier(RoundChannel& channel, BarrierAlgorithm algorithm);

}  // namespace axonml::distributed::collectives
