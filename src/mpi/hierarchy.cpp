#include "mpi/hierarchy.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "axonml/distributed/error.hpp"
#include "base/log.hpp"
#include "mpi/node_arena.hpp"
#include "mpi/ordered.hpp"
#include "mpi/typed.hpp"

namespace axonml::distributed::mpi {
namespace {

Comm split(const Comm& parent, int color, int key, const char* what) {
  MPI_Comm made = MPI_COMM_NULL;
  check(MPI_Comm_split(parent.get(), color, key, &made), "MPI_Comm_split", parent.rank(), what);
  return Comm(made);
}

}  // namespace

std::unique_ptr<Hierarchy> Hierarchy::build(const Comm& world, const MpiOptions& options) {
  const int me = world.rank();
  // Every rank must take the same branch below: agree on the options first.
  int flags[3] = {options.hierarchical ? 1 : 0, options.node_id >= 0 ? 1 : 0,
                  options.node_id >= 0 ? -1 : 0};
  check(MPI_Allreduce(MPI_IN_PLACE, flags, 3, MPI_INT, MPI_MIN, world.get()), "MPI_Allreduce", me,
        "agreeing on AXON_HIERARCHICAL / AXON_NODE_ID");
  if (flags[1] != -flags[2]) {
    throw InvalidArgument("MpiBackend on rank " + std::to_string(me) +
                          ": AXON_NODE_ID is set on some ranks only (set it on all or none)");
  }
  if (!flags[0] || world.size() == 1) return nullptr;

  auto h = std::unique_ptr<Hierarchy>(new Hierarchy());
  h->world_rank_ = me;
  MPI_Comm shared = MPI_COMM_NULL;
  if (flags[1]) {
    h->node_ = split(world, options.node_id, me, "grouping ranks by AXON_NODE_ID");
    // A pretend node must still be ranks that can share memory.
    check(MPI_Comm_split_type(h->node_.get(), MPI_COMM_TYPE_SHARED, me, MPI_INFO_NULL, &shared),
          "MPI_Comm_split_type", me, "checking that AXON_NODE_ID's node shares memory");
    const Comm sharing(shared);
    int together = sharing.size() == h->node_.size() ? 1 : 0;
    check(MPI_Allreduce(MPI_IN_PLACE, &together, 1, MPI_INT, MPI_MIN, world.get()), "MPI_Allreduce",
          me, "checking AXON_NODE_ID");
    if (!together) {
      throw InvalidArgument("MpiBackend on rank " + std::to_string(me) + ": AXON_NODE_ID=" +
                            std::to_string(options.node_id) +
                            " puts ranks that share no memory on one node");
    }
  } else {
    check(MPI_Comm_split_type(world.get(), MPI_COMM_TYPE_SHARED, me, MPI_INFO_NULL, &shared),
          "MPI_Comm_split_type", me, "finding the ranks of this node");
    h->node_ = Comm(shared);
  }

  // Hierarchy pays off when nodes hold several ranks, and the slicing below
  // needs the same number on every node.
  int sizes[2] = {h->node_.size(), -h->node_.size()};
  check(MPI_Allreduce(MPI_IN_PLACE, sizes, 2, MPI_INT, MPI_MIN, world.get()), "MPI_Allreduce", me,
        "comparing node sizes");
  const int smallest = sizes[0], largest = -sizes[1];
  if (largest == 1) return nullptr;
  if (smallest != largest) {
    log::log(log::Level::Info, me,
             "MpiBackend: nodes hold {} to {} ranks; hierarchical mode needs equal nodes, running flat",
             smallest, largest);
    return nullptr;
  }

  const int local = h->node_.rank();
  const int L = h->node_.size();
  Comm leaders = split(world, local == 0 ? 0 : MPI_UNDEFINED, me, "joining the node leaders");
  int placement[2] = {leaders ? leaders.rank() : 0, leaders ? leaders.size() : 0};
  check(MPI_Bcast(placement, 2, MPI_INT, 0, h->node_.get()), "MPI_Bcast", me,
        "sharing the node's index");
  h->node_index_ = placement[0];
  h->nodes_ = placement[1];
  h->cross_ = split(world, local, h->node_index_, "joining local rank's peers on other nodes");

  const int position = h->node_index_ * L + local;
  h->world_rank_of_.assign(static_cast<std::size_t>(world.size()), -1);
  h->position_of_.assign(static_cast<std::size_t>(world.size()), -1);
  check(MPI_Allgather(&position, 1, MPI_INT, h->position_of_.data(), 1, MPI_INT, world.get()),
        "MPI_Allgather", me, "sharing node positions");
  for (int r = 0; r < world.size(); ++r) {
    h->world_rank_of_[static_cast<std::size_t>(h->position_of_[static_cast<std::size_t>(r)])] = r;
  }

  std::vector<int> node_mates(static_cast<std::size_t>(L));
  for (int l = 0; l < L; ++l) {
    node_mates[static_cast<std::size_t>(l)] = h->world_rank_of_[static_cast<std::size_t>(h->node_index_ * L + l)];
  }
  h->arena_ = attach_node_arena(h->node_, me, std::move(node_mates));
  log::log(log::Level::Debug, me, "MpiBackend: hierarchical, {} nodes x {} ranks, node {} local rank {}",
           h->nodes_, L, h->node_index_, local);
  return h;
}

void Hierarchy::all_reduce(std::byte* data, std::size_t count, DataType type, ReduceOp op,
                           const WaitContext& wait) {
  if (nodes_ == 1) {  // the whole world shares one arena
    visit_element(type, [&](auto t) {
      using T = typename decltype(t)::type;
      arena_->all_reduce(elements<T>(data, count), op);
    });
    return;
  }
  const auto L = static_cast<std::size_t>(local_size());
  const std::size_t es = size_of(type);
  const std::size_t block = (count + L - 1) / L;
  // An uneven message goes through a zero-padded copy; padding is reduced
  // and dropped.
  std::byte* whole = data;
  if (block * L != count) {
    padded_.resize(std::max(padded_.size(), block * L * es));
    std::memcpy(padded_.data(), data, count * es);
    std::memset(padded_.data() + count * es, 0, (block * L - count) * es);
    whole = padded_.data();
  }
  slice_.resize(std::max(slice_.size(), block * es));
  std::byte* slice = slice_.data();
  visit_element(type, [&](auto t) {
    using T = typename decltype(t)::type;
    arena_->reduce_scatter(elements<T>(static_cast<const std::byte*>(whole), block * L), elements<T>(slice, block), op);
  });
  ordered_all_reduce(cross_, slice, block, type, op, wait,
                     "all_reduce across " + std::to_string(nodes_) + " nodes of a block of " +
                         std::to_string(block) + " " + std::string(to_string(type)),
                     scratch_);
  visit_element(type, [&](auto t) {
    using T = typename decltype(t)::type;
    arena_->all_gather(elements<T>(static_cast<const std::byte*>(slice), block), elements<T>(whole, block * L));
  });
  if (whole != data) std::memcpy(data, whole, count * es);
}

void Hierarchy::broadcast(std::byte* data, std::size_t count, DataType type, int src,
                          const WaitContext& wait) {
  const int position = position_of_[static_cast<std::size_t>(src)];
  const int src_node = position / local_size();
  const int src_local = position % local_size();
  if (nodes_ > 1 && node_.rank() == src_local) {
    const std::size_t bytes = count * size_of(type);
    const std::string what = "broadcast of " + std::to_string(count) + " " + std::string(to_string(type)) +
                             " from rank " + std::to_string(src) + " across nodes";
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Ibcast(data, int_count(bytes, "broadcast", world_rank_), MPI_BYTE, src_node, cross_.get(), &request),
          "MPI_Ibcast", world_rank_, what);
    wait_collective(request, wait, what);
  }
  visit_element(type, [&](auto t) {
    using T = typename decltype(t)::type;
    arena_->broadcast(elements<T>(data, count), src_local);
  });
}

void Hierarchy::all_gather(const std::byte* send, std::byte* recv, std::size_t count, DataType type,
                           const WaitContext& wait) {
  const std::size_t es = size_of(type);
  const auto L = static_cast<std::size_t>(local_size());
  const auto N = static_cast<std::size_t>(nodes_);
  // Block r of every node, in node order.
  across_.resize(std::max(across_.size(), N * count * es));
  std::byte* across = across_.data();
  const int bytes = int_count(count * es, "all_gather", world_rank_);
  const std::string what = "all_gather of " + std::to_string(count) + " " + std::string(to_string(type)) +
                           " across " + std::to_string(nodes_) + " nodes";
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Iallgather(send, bytes, MPI_BYTE, across, bytes, MPI_BYTE, cross_.get(), &request),
        "MPI_Iallgather", world_rank_, what);
  wait_collective(request, wait, what);
  // Then every local rank's row of N blocks: everything, ordered [local][node].
  all_.resize(std::max(all_.size(), L * N * count * es));
  std::byte* all = all_.data();
  visit_element(type, [&](auto t) {
    using T = typename decltype(t)::type;
    arena_->all_gather(elements<T>(static_cast<const std::byte*>(across), N * count),
                       elements<T>(all, L * N * count));
  });
  for (std::size_t r = 0; r < L; ++r) {
    for (std::size_t j = 0; j < N; ++j) {
      const auto world = static_cast<std::size_t>(world_rank_of_[j * L + r]);
      std::memcpy(recv + world * count * es, all + (r * N + j) * count * es, count * es);
    }
  }
}

}  // namespace axonml::distributed::mpi
