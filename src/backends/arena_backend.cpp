#include "axonml/distributed/arena_backend.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "axonml/distributed/error.hpp"
#include "base/log.hpp"
#include "base/recv_mismatch.hpp"
#include "backends/arena_backend_impl.hpp"
#include "base/text.hpp"
#include "shm/arena_view.hpp"
#include "collectives/algorithms.hpp"
#include "collectives/all_reduce_small.hpp"
#include "shm/numa_place.hpp"

namespace axonml::distributed {

RankState::RankState(std::shared_ptr<void> memory_owner, std::byte* arena_base, int rank,
                     std::chrono::milliseconds timeout, const std::vector<int>& peer_pids, RankNames names,
                     int job_size)
    : memory(std::move(memory_owner)),
      base(arena_base),
      header(shm::ArenaView(arena_base).header()),
      world_rank(rank),
      waits(header, rank, timeout, peer_pids, std::move(names), job_size),
      allocator(arena_base, waits),
      p2p(arena_base, rank, waits) {}

// The member that takes `holders` to 0 is the last: every other member has
// dropped its endpoint, and each one's last access to the area happened
// before its decrement (acq_rel), so the area is nobody's any more.
GroupAreaHold::~GroupAreaHold() {
  // A forked child's copy holds nothing: the parent's hold is the rank's
  // (found by a review: a child dropping a subgroup gave its area back while
  // the parent still used it).
  if (offset_ == 0 || state_->waits.in_forked_child()) return;
  shm::GroupHeader& group = shm::ArenaView(state_->base).group_at(offset_);
  const std::size_t bytes = shm::group_layout(group.size, state_->header.slot_bytes).total_bytes;
  if (group.holders.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    state_->allocator.release(offset_, bytes);
  }
}

ArenaBackend::Impl::Impl(std::shared_ptr<RankState> rank_state, shm::GroupHeader* group,
                         int member, std::vector<int> world_ranks, GroupAreaHold group_area)
    : state(std::move(rank_state)),
      area(std::move(group_area)),
      channel(state->base, group, state->header.slot_bytes, member, std::move(world_ranks),
              state->waits, state->p2p),
      one_round_limit(collectives::one_round_all_reduce_limit(channel.slot_bytes(), channel.size())),
      zero_copy_limit(std::max(one_round_limit, kZeroCopyMinBytes)) {
  if (state->waits.waits_end_at_exit()) calls.count_for_exit();
}

std::unique_ptr<ArenaBackend::Impl> ArenaBackend::Impl::attach_world(
    std::shared_ptr<void> memory_owner, std::byte* arena_base, int rank,
    std::chrono::milliseconds timeout, const std::vector<int>& peer_pids, RankNames names, int job_size) {
  auto state = std::make_shared<RankState>(std::move(memory_owner), arena_base, rank, timeout, peer_pids,
                                           std::move(names), job_size);
  std::vector<int> everyone(state->header.world_size);
  for (std::size_t r = 0; r < everyone.size(); ++r) everyone[r] = static_cast<int>(r);
  shm::GroupHeader& world = shm::ArenaView(arena_base).world_group();
  return std::make_unique<Impl>(std::move(state), &world, rank, std::move(everyone));
}

ArenaBackend::ArenaBackend(std::string name, std::unique_ptr<Impl> impl)
    : name_(std::move(name)), impl_(std::move(impl)) {}

ArenaBackend::~ArenaBackend() = default;

int ArenaBackend::rank() const { return impl_->channel.rank(); }
int ArenaBackend::world_size() const { return impl_->channel.size(); }
std::size_t ArenaBackend::slot_bytes() const { return impl_->channel.slot_bytes(); }

void ArenaBackend::abort(const std::string& reason) {
  const auto& waits = impl_->state->waits;
  waits.abort(impl_->state->world_rank, waits.names().rank(impl_->state->world_rank) + " aborted: " + reason);
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

// The buffer goes back to the arena when its last pointer on this rank is
// dropped. Peers read and write it only inside a zero-copy all_reduce, whose
// last round keeps every rank in the collective until all have written every
// buffer; so once this rank's collectives have returned, no peer touches it.
// A collective that fails instead of returning sets keep_shared_buffers.
std::shared_ptr<std::byte> ArenaBackend::allocate_shared(std::size_t bytes) {
  const std::shared_ptr<RankState>& state = impl_->state;
  if (state->waits.refuses_ops()) [[unlikely]] {
    // A forked child's block would never go back (only the allocating
    // process gives blocks back, and the child is not the rank), nor one of
    // a rank that left, whose peers count it as ended (a review saw both
    // allocate while every other op was refused).
    const int me = impl_->channel.world_ranks()[static_cast<std::size_t>(impl_->channel.rank())];
    throw InvalidArgument("allocating " + std::to_string(bytes) + " bytes of shared memory on " + state->waits.names().rank(me) +
                          ": " + state->waits.why_refused() + "; nothing was done");
  }
  const std::optional<int> node = shm::bound_numa_node();  // may throw: before the block is taken
  const std::uint64_t start = state->allocator.allocate(bytes);
  if (start == 0) return nullptr;
  std::byte* memory = state->base + start;
  if (node) shm::move_to_numa_node(memory, bytes, *node);  // this rank writes it first: keep it on our node
  // Zeroed, as a fresh arena's pages are: freed space comes back dirty.
  std::memset(memory, 0, bytes);
  // Only this process gives it back: a child forked from it (a DataLoader
  // worker) shares the arena and copies of the pointer, and one that dropped
  // them gave the block back under the parent, whose next allocation then
  // overlapped a live buffer (found by the review helper).
  return std::shared_ptr<std::byte>(memory, [state, start, bytes, owner = ::getpid()](std::byte*) {
    if (::getpid() == owner && !state->keep_shared_buffers.load(std::memory_order_relaxed)) {
      state->allocator.release(start, bytes);
    }
  });
}

std::vector<ExitedPeer> ArenaBackend::exited_peers() const {
  std::vector<ExitedPeer> exited;
  for (const auto& [rank, pid] : impl_->state->waits.exited_peers()) exited.push_back({rank, pid});
  return exited;
}

std::vector<int> ArenaBackend::left_peers() const { return impl_->state->waits.left_peers(); }

std::string ArenaBackend::left_reason(int peer) const { return impl_->state->waits.left_reason_of(peer); }

std::vector<int> ArenaBackend::ranks_waiting_for_this_rank() const { return impl_->channel.members_ahead(); }

void ArenaBackend::leave_for_good(std::string_view why) { impl_->state->waits.mark_left(why); }

bool ArenaBackend::peers_arrived() const { return impl_->channel.peers_arrived(); }
bool ArenaBackend::peers_arrived_within_spin(std::chrono::nanoseconds at_most) const {
  return impl_->channel.peers_arrived_within_spin(at_most);
}
void ArenaBackend::announce_next() { impl_->channel.announce_next(); }

std::string ArenaBackend::describe_shared_memory() const {
  return shm::describe(impl_->state->allocator.usage());
}

namespace {

// The job's ranks of a group's members, or nullopt when the group is the
// whole job (which messages do not name). A PyTorch subgroup's arena is its
// own, so its world size is not the job's: new_group([0, 1]) of four ranks
// is still a group to name.
std::optional<std::vector<int>> job_ranks_of_subgroup(const RankNames& names, const std::vector<int>& world_ranks,
                                                      std::uint32_t arena_world_size) {
  std::vector<int> job_ranks = names.job_ranks(world_ranks);
  bool whole_job = !names.part_of_a_job() && job_ranks.size() == arena_world_size;
  for (std::size_t m = 0; whole_job && m < job_ranks.size(); ++m) whole_job = job_ranks[m] == static_cast<int>(m);
  if (whole_job) return std::nullopt;
  return job_ranks;
}

}  // namespace

std::string ArenaBackend::describe_group() const {
  const auto job_ranks = job_ranks_of_subgroup(impl_->state->waits.names(), impl_->channel.world_ranks(),
                                               impl_->state->header.world_size);
  if (!job_ranks) return {};
  return " in group " + bracketed_ranks(*job_ranks) + " (rank " +
         std::to_string((*job_ranks)[static_cast<std::size_t>(rank())]) + " of the job)";
}

std::size_t ArenaBackend::arena_bytes() const { return impl_->state->header.arena_bytes; }

bool ArenaBackend::contains(const void* p, std::size_t bytes) const {
  return impl_->in_arena(static_cast<const std::byte*>(p), bytes);
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
  const shm::CallInFlight in_flight = impl_->collective("all_reduce");
  auto& channel = impl_->channel;
  const std::size_t bytes = data.count * size_of(data.type);
  CollectiveCall call = reducing(call_of(CollectiveOp::AllReduce, data.type, data.count), op);
  if (bytes <= channel.small_bytes() && channel.size() > 1) {  // a scalar: the shortest path
    channel.begin(call);
    collectives::all_reduce_small(channel, data.data, data.count, data.type, op);
    return;
  }
  const bool shared = channel.size() > 1 && bytes > impl_->zero_copy_limit && impl_->in_arena(data.data, bytes);
  call.detail = shared                                                                  ? kSharedBuffer
                : collectives::all_reduce_is_pipelined(channel, bytes, data.type, impl_->one_round_limit) ? kPipelined
                                                                                                          : 0;
  channel.begin(call);
  if (shared) {
    std::optional<std::pair<int, int>> overlap;
    try {
      overlap = collectives::all_reduce_shared(channel, data.data, data.count, data.type, op);
    } catch (...) {
      impl_->state->keep_shared_buffers.store(true, std::memory_order_relaxed);
      throw;
    }
    if (overlap) {
      // Ranks as the job numbers them, as in every other message, also in
      // a subgroup (whose members are numbered from 0 here).
      const RankNames& names = impl_->state->waits.names();
      auto job = [&](int member) { return names.rank(channel.world_ranks()[static_cast<std::size_t>(member)]); };
      throw InvalidArgument("all_reduce on " + job(rank()) + " (rank " + std::to_string(rank()) + " of " +
                            std::to_string(world_size()) + " in group " + bracketed_ranks(names.job_ranks(channel.world_ranks())) +
                            "): the shared buffers of " + job(overlap->first) + " and " + job(overlap->second) +
                            " overlap (" + std::to_string(bytes) +
                            " bytes each); every rank must pass its own buffer. Nothing was reduced");
    }
  } else {
    collectives::all_reduce(channel, data.data, data.count, data.type, op, impl_->one_round_limit);
  }
}

void ArenaBackend::do_broadcast(MutableBuffer data, int src) {
  const shm::CallInFlight in_flight = impl_->collective("broadcast");
  impl_->channel.begin(call_of(CollectiveOp::Broadcast, data.type, data.count, src));
  collectives::broadcast(impl_->channel, data.data, data.count, data.type, src);
}

void ArenaBackend::do_all_gather(ConstBuffer send, MutableBuffer recv) {
  const shm::CallInFlight in_flight = impl_->collective("all_gather");
  impl_->channel.begin(call_of(CollectiveOp::AllGather, send.type, send.count));
  collectives::all_gather(impl_->channel, send.data, recv.data, send.count, send.type);
}

void ArenaBackend::do_reduce_scatter(ConstBuffer send, MutableBuffer recv, ReduceOp op) {
  const shm::CallInFlight in_flight = impl_->collective("reduce_scatter");
  impl_->channel.begin(reducing(call_of(CollectiveOp::ReduceScatter, recv.type, recv.count), op));
  collectives::reduce_scatter(impl_->channel, send.data, recv.data, recv.count, recv.type, op);
}

void ArenaBackend::do_gather(ConstBuffer send, MutableBuffer recv, int dst) {
  const shm::CallInFlight in_flight = impl_->collective("gather");
  impl_->channel.begin(call_of(CollectiveOp::Gather, send.type, send.count, dst));
  collectives::gather(impl_->channel, send.data, recv.data, send.count, send.type, dst);
}

void ArenaBackend::do_scatter(ConstBuffer send, MutableBuffer recv, int src) {
  const shm::CallInFlight in_flight = impl_->collective("scatter");
  impl_->channel.begin(call_of(CollectiveOp::Scatter, recv.type, recv.count, src));
  collectives::scatter(impl_->channel, send.data, recv.data, recv.count, recv.type, src);
}

void ArenaBackend::do_reduce(ConstBuffer send, MutableBuffer recv, int dst, ReduceOp op) {
  const shm::CallInFlight in_flight = impl_->collective("reduce");
  impl_->channel.begin(reducing(call_of(CollectiveOp::Reduce, send.type, send.count, dst), op));
  collectives::reduce(impl_->channel, send.data, recv.data, send.count, send.type, op, dst);
}

// `count` in the descriptor is one block's, as for the other collectives.
// Send and recv may not overlap (the copy out would read blocks already
// overwritten), so an in-place call goes through a copy of send.
void ArenaBackend::do_all_to_all(ConstBuffer send, MutableBuffer recv) {
  const shm::CallInFlight in_flight = impl_->collective("all_to_all");
  const std::size_t block = send.count / static_cast<std::size_t>(impl_->channel.size());
  const std::size_t bytes = send.count * size_of(send.type);
  std::vector<std::byte> copy;
  if (bytes != 0 && send.data < recv.data + bytes && recv.data < send.data + bytes) {
    copy.assign(send.data, send.data + bytes);
    send.data = copy.data();
  }
  impl_->channel.begin(call_of(CollectiveOp::AllToAll, send.type, block));
  collectives::all_to_all(impl_->channel, send.data, recv.data, block, send.type);
}

void ArenaBackend::do_count_refused_collective() { impl_->channel.count_refused_call(); }

void ArenaBackend::do_label_next_collective(std::uint8_t step) { impl_->channel.label_next(step); }
void ArenaBackend::do_mark_after_refused_thread() { impl_->channel.mark_after_refused_thread(); }

void ArenaBackend::do_barrier() {
  const shm::CallInFlight in_flight = impl_->collective("barrier");
  impl_->channel.begin(call_of(CollectiveOp::Barrier, DataType::F32, 0));
  // The arena's creator chose for every rank (ArenaHeader::flat_barrier).
  collectives::barrier(impl_->channel, impl_->state->header.flat_barrier != 0
                                           ? collectives::BarrierAlgorithm::Flat
                                           : collectives::BarrierAlgorithm::Dissemination);
}

void ArenaBackend::do_send(ConstBuffer data, int dst, int tag) {
  const shm::CallInFlight in_flight = impl_->message("send");
  const auto& ranks = impl_->channel.world_ranks();
  impl_->state->p2p.send(impl_->channel.id(), ranks[static_cast<std::size_t>(dst)], tag, data.data,
                         data.count * size_of(data.type), data.type);
}

void ArenaBackend::do_recv(MutableBuffer data, int src, int tag) {
  const shm::CallInFlight in_flight = impl_->message("recv");
  const auto& ranks = impl_->channel.world_ranks();
  try {
    impl_->state->p2p.recv(impl_->channel.id(), ranks[static_cast<std::size_t>(src)], tag, data.data,
                           data.count * size_of(data.type), data.type);
  } catch (const RecvMismatch& e) {
    // The ranks are named as the job numbers them; say in which group, as
    // the collectives' messages do (a review found it left out).
    const auto job_ranks = job_ranks_of_subgroup(impl_->state->waits.names(), ranks, impl_->state->header.world_size);
    if (!job_ranks) throw;
    throw RecvMismatch(e.facts(), " in group " + bracketed_ranks(*job_ranks));
  }
}

// One exchange on the parent group: the new group's first member allocates
// its area from the arena and publishes the offset (0 when the arena is
// full, and then a second exchange tries again, below); the list's hash
// rides in the descriptor, so ranks that pass different lists get a
// CollectiveMismatch.
std::shared_ptr<Backend> ArenaBackend::do_new_group(const std::vector<int>& ranks) {
  const shm::CallInFlight in_flight = impl_->collective("new_group");
  auto& channel = impl_->channel;
  auto& state = *impl_->state;
  std::vector<int> world_ranks;
  world_ranks.reserve(ranks.size());
  for (int r : ranks) world_ranks.push_back(channel.world_ranks()[static_cast<std::size_t>(r)]);
  const std::uint64_t ranks_hash = shm::hash_of_ranks(world_ranks);
  CollectiveCall call = call_of(CollectiveOp::NewGroup, DataType::I64, ranks.size());
  call.detail = ranks_hash;
  channel.begin(call);

  // What the leader tells everyone: where the area is, or, when it is 0,
  // what the leader found free.
  struct Reply {
    std::uint64_t offset = 0;
    std::uint64_t free_bytes = 0;
    std::uint64_t largest_free = 0;
    std::uint64_t free_blocks = 0;
  };
  static_assert(sizeof(Reply) <= shm::kCacheLine);  // slots are whole cache lines
  const auto layout = shm::group_layout(ranks.size(), state.header.slot_bytes);
  const int leader = ranks.front();
  // The leader's allocation: the area, or what it found free.
  auto allocate = [&] {
    shm::ArenaUsage usage;
    Reply reply;
    reply.offset = state.allocator.allocate(layout.total_bytes, &usage);
    if (reply.offset != 0) {
      shm::GroupHeader& group =
          shm::format_group(state.base + reply.offset, ranks.size(), state.header.slot_bytes, ranks_hash,
                            state.header.allocator.next_group_id.fetch_add(1, std::memory_order_relaxed));
      group.holders.store(static_cast<std::uint32_t>(ranks.size()), std::memory_order_relaxed);
    } else {
      reply = Reply{0, usage.free_bytes, usage.largest_free, usage.free_blocks};
    }
    return reply;
  };
  Reply reply;
  if (channel.rank() == leader) {
    reply = allocate();
    std::memcpy(channel.outbox(), &reply, sizeof(reply));
  }
  try {
    channel.exchange();
  } catch (const CollectiveMismatch&) {
    // Every member gets the mismatch and none reads the offset, so the
    // leader alone gives the area back; otherwise each mismatched new_group
    // would keep a group area for good. (After a timeout or a peer's failure
    // a late member may still complete the round and take the area: those
    // leave it to the end of the job.)
    if (channel.rank() == leader && reply.offset != 0) state.allocator.release(reply.offset, layout.total_bytes);
    throw;
  }
  std::memcpy(&reply, channel.inbox(leader), sizeof(reply));
  if (reply.offset == 0) {
    // The leader allocated before the others arrived, and a group's area
    // goes back when its last member drops it: groups every rank dropped
    // just before this call may have been held a moment longer by a peer
    // (found by a review: three subgroups dropped, then new_group at once,
    // failed 5 of 5 runs at n=2). Every rank of the parent has arrived
    // now, so try once more.
    if (channel.rank() == leader) {
      reply = allocate();
      std::memcpy(channel.outbox(), &reply, sizeof(reply));
    }
    channel.exchange();
    std::memcpy(&reply, channel.inbox(leader), sizeof(reply));
  }
  if (reply.offset == 0) {
    const shm::ArenaUsage usage{state.header.arena_bytes, reply.free_bytes, reply.largest_free,
                                reply.free_blocks};
    throw InvalidArgument("new_group of " + std::to_string(ranks.size()) + " ranks on rank " +
                          std::to_string(state.world_rank) + ": no room in the arena for a group area of " +
                          format_bytes_exactly(layout.total_bytes) + ": " + shm::describe(usage) +
                          " (raise --arena-mb, or drop unused groups and shared tensors)");
  }
  const auto position = std::find(ranks.begin(), ranks.end(), channel.rank());
  if (position == ranks.end()) return nullptr;
  // Held from here on, so that the area goes back even if what follows throws.
  GroupAreaHold area(impl_->state, reply.offset);
  auto* group = &shm::ArenaView(state.base).group_at(reply.offset);
  auto impl = std::make_unique<Impl>(impl_->state, group, static_cast<int>(position - ranks.begin()),
                                     std::move(world_ranks), std::move(area));
  if (!impl->calls.counted()) return std::shared_ptr<Backend>(new ArenaBackend(name_, std::move(impl)));
  // A group whose last owner goes while another thread is inside a call on
  // it (a static ProcessGroup destroyed at exit under a looping thread: its
  // destructor runs before the exit's steps, shm/exit_guard.hpp) is kept,
  // area and all, rather than freed under that call.
  auto backend = std::shared_ptr<ArenaBackend>(new ArenaBackend(name_, std::move(impl)), [](ArenaBackend* doomed) {
    if (doomed->impl_->calls.in_flight_on_other_threads()) {
      log::log(log::Level::Warn, doomed->impl_->state->waits.names().job_rank(doomed->impl_->state->world_rank),
               "group {} destroyed while another thread is inside a call on it: kept, not freed (join every thread "
               "that uses a group before its last ProcessGroup goes)",
               doomed->impl_->channel.group_name());
      static auto* mutex = new std::mutex;
      static auto* kept = new std::vector<ArenaBackend*>;  // reachable: no leak to LeakSanitizer
      const std::lock_guard lock(*mutex);
      kept->push_back(doomed);
      return;
    }
    delete doomed;
  });
  backend->impl_->calls.set_owner(backend);
  return backend;
}

}  // namespace axonml::distributed
