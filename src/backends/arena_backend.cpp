#include "axonml/distributed/arena_backend.hpp"

#include <algorithm>
#include <cstring>
#include <new>
#include <functional>
#include <string>

#include "axonml/distributed/error.hpp"
#include "backends/arena_backend_impl.hpp"
#include "collectives/algorithms.hpp"

namespace axonml::distributed {

RankState::RankState(std::shared_ptr<void> memory_owner, std::byte* arena_base, int rank,
                     std::chrono::milliseconds timeout)
    : memory(std::move(memory_owner)),
      base(arena_base),
      header(*reinterpret_cast<shm::ArenaHeader*>(arena_base)),
      world_rank(rank),
      guard(header, rank, timeout),
      p2p(arena_base, rank, guard) {}

ArenaBackend::Impl::Impl(std::shared_ptr<RankState> rank_state, shm::GroupHeader* group,
                         int member, std::vector<int> world_ranks)
    : state(std::move(rank_state)),
      channel(state->base, group, state->header.slot_bytes, member, std::move(world_ranks),
              state->guard, state->p2p) {}

std::unique_ptr<ArenaBackend::Impl> ArenaBackend::Impl::attach_world(
    std::shared_ptr<void> memory_owner, std::byte* arena_base, int rank,
    std::chrono::milliseconds timeout) {
  auto state = std::make_shared<RankState>(std::move(memory_owner), arena_base, rank, timeout);
  std::vector<int> everyone(state->header.world_size);
  for (std::size_t r = 0; r < everyone.size(); ++r) everyone[r] = static_cast<int>(r);
  auto* world = reinterpret_cast<shm::GroupHeader*>(arena_base + state->header.groups_offset);
  return std::make_unique<Impl>(std::move(state), world, rank, std::move(everyone));
}

ArenaBackend::ArenaBackend(std::string name, std::unique_ptr<Impl> impl)
    : name_(std::move(name)), impl_(std::move(impl)) {}

ArenaBackend::~ArenaBackend() = default;

int ArenaBackend::rank() const { return impl_->channel.rank(); }
int ArenaBackend::world_size() const { return impl_->channel.size(); }
std::size_t ArenaBackend::slot_bytes() const { return impl_->channel.slot_bytes(); }

void ArenaBackend::abort(const std::string& reason) {
  impl_->state->guard.abort(impl_->state->world_rank,
                            "rank " + std::to_string(impl_->state->world_rank) + " aborted: " + reason);
}

namespace {

CollectiveCall call_of(CollectiveOp op, DataType type, std::size_t count, int root = -1) {
  CollectiveCall call{op};
  call.type = type;
  call.count = count;
  call.root = root;
  return call;
}

CollectiveCall reducing(CollectiveCall call, ReduceOp op) {
  call.has_reduce_op = true;
  call.reduce_op = op;
  return call;
}

}  // namespace

std::shared_ptr<std::byte> ArenaBackend::allocate_shared(std::size_t bytes) {
  const std::uint64_t start = shm::allocate_from_arena(impl_->state->header, bytes);
  if (start == 0) return nullptr;
  return std::shared_ptr<std::byte>(impl_->state->memory, impl_->state->base + start);
}

bool ArenaBackend::Impl::in_arena(const std::byte* p, std::size_t bytes) const {
  const std::byte* begin = state->base;
  const std::byte* end = begin + state->header.arena_bytes;
  return bytes != 0 && p >= begin && p + bytes <= end;
}

// Large reductions of buffers in the arena skip the copy in (zero copy);
// whether a buffer is there is part of the descriptor, so ranks that mix
// shared and private buffers get a mismatch error rather than a hang.
void ArenaBackend::do_all_reduce(MutableBuffer data, ReduceOp op) {
  auto& channel = impl_->channel;
  const std::size_t bytes = data.count * size_of(data.type);
  const bool shared = channel.size() > 1 &&
                      bytes > collectives::one_round_all_reduce_limit(channel.slot_bytes(), channel.size()) &&
                      impl_->in_arena(data.data, bytes);
  CollectiveCall call = reducing(call_of(CollectiveOp::AllReduce, data.type, data.count), op);
  call.detail = shared ? kSharedBuffer : 0;
  channel.begin(call);
  if (shared) {
    collectives::all_reduce_shared(channel, data.data, data.count, data.type, op);
  } else {
    collectives::all_reduce(channel, data.data, data.count, data.type, op);
  }
}

void ArenaBackend::do_broadcast(MutableBuffer data, int src) {
  impl_->channel.begin(call_of(CollectiveOp::Broadcast, data.type, data.count, src));
  collectives::broadcast(impl_->channel, data.data, data.count, data.type, src);
}

void ArenaBackend::do_all_gather(ConstBuffer send, MutableBuffer recv) {
  impl_->channel.begin(call_of(CollectiveOp::AllGather, send.type, send.count));
  collectives::all_gather(impl_->channel, send.data, recv.data, send.count, send.type);
}

void ArenaBackend::do_reduce_scatter(ConstBuffer send, MutableBuffer recv, ReduceOp op) {
  impl_->channel.begin(reducing(call_of(CollectiveOp::ReduceScatter, recv.type, recv.count), op));
  collectives::reduce_scatter(impl_->channel, send.data, recv.data, recv.count, recv.type, op);
}

void ArenaBackend::do_gather(ConstBuffer send, MutableBuffer recv, int dst) {
  impl_->channel.begin(call_of(CollectiveOp::Gather, send.type, send.count, dst));
  collectives::gather(impl_->channel, send.data, recv.data, send.count, send.type, dst);
}

void ArenaBackend::do_scatter(ConstBuffer send, MutableBuffer recv, int src) {
  impl_->channel.begin(call_of(CollectiveOp::Scatter, recv.type, recv.count, src));
  collectives::scatter(impl_->channel, send.data, recv.data, recv.count, recv.type, src);
}

void ArenaBackend::do_reduce(ConstBuffer send, MutableBuffer recv, int dst, ReduceOp op) {
  impl_->channel.begin(reducing(call_of(CollectiveOp::Reduce, send.type, send.count, dst), op));
  collectives::reduce(impl_->channel, send.data, recv.data, send.count, send.type, op, dst);
}

void ArenaBackend::do_barrier() {
  impl_->channel.begin(call_of(CollectiveOp::Barrier, DataType::F32, 0));
  collectives::barrier(impl_->channel);
}

void ArenaBackend::do_send(ConstBuffer data, int dst, int tag) {
  const auto& ranks = impl_->channel.world_ranks();
  impl_->state->p2p.send(impl_->channel.id(), ranks[static_cast<std::size_t>(dst)], tag, data.data,
                         data.count * size_of(data.type));
}

void ArenaBackend::do_recv(MutableBuffer data, int src, int tag) {
  const auto& ranks = impl_->channel.world_ranks();
  impl_->state->p2p.recv(impl_->channel.id(), ranks[static_cast<std::size_t>(src)], tag, data.data,
                         data.count * size_of(data.type));
}

// One exchange on the parent group: the new group's first member allocates
// its area from the arena and publishes the offset (0 when the arena is
// full); the list's hash rides in the descriptor, so ranks that pass
// different lists get a CollectiveMismatch.
std::shared_ptr<Backend> ArenaBackend::do_new_group(const std::vector<int>& ranks) {
  auto& channel = impl_->channel;
  auto& state = *impl_->state;
  std::vector<int> world_ranks;
  world_ranks.reserve(ranks.size());
  for (int r : ranks) world_ranks.push_back(channel.world_ranks()[static_cast<std::size_t>(r)]);
  const std::uint64_t ranks_hash = shm::hash_of_ranks(world_ranks);
  CollectiveCall call = call_of(CollectiveOp::NewGroup, DataType::I64, ranks.size());
  call.detail = ranks_hash;
  channel.begin(call);

  const auto layout = shm::group_layout(ranks.size(), state.header.slot_bytes);
  const int leader = ranks.front();
  std::uint64_t offset = 0;
  if (channel.rank() == leader) {
    offset = shm::allocate_from_arena(state.header, layout.total_bytes);
    if (offset != 0) shm::format_group(state.base + offset, ranks.size(), state.header.slot_bytes, ranks_hash);
    std::memcpy(channel.outbox(), &offset, sizeof(offset));
  }
  channel.exchange();
  std::memcpy(&offset, channel.inbox(leader), sizeof(offset));
  if (offset == 0) {
    throw InvalidArgument("new_group of " + std::to_string(ranks.size()) + " ranks on rank " +
                          std::to_string(state.world_rank) + ": the arena (" +
                          std::to_string(state.header.arena_bytes >> 20) +
                          " MiB) has no room for another group of " +
                          std::to_string(layout.total_bytes >> 10) + " KiB (raise --arena-mb)");
  }
  const auto position = std::find(ranks.begin(), ranks.end(), channel.rank());
  if (position == ranks.end()) return nullptr;
  auto* group = reinterpret_cast<shm::GroupHeader*>(state.base + offset);
  auto impl = std::make_unique<Impl>(impl_->state, group, static_cast<int>(position - ranks.begin()),
                                     std::move(world_ranks));
  return std::shared_ptr<Backend>(new ArenaBackend(name_, std::move(impl)));
}

}  // namespace axonml::distributed
