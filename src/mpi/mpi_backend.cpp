#include "axonml/distributed/mpi_backend.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>

#include "axonml/distributed/error.hpp"
#include "base/env.hpp"
#include "mpi/hierarchy.hpp"
#include "mpi/mpi_runtime.hpp"
#include "mpi/reduction.hpp"

namespace axonml::distributed {
using mpi::check;
using mpi::int_count;

namespace {

// Calls larger than this many elements are split: MPI counts are ints.
constexpr std::size_t kMaxChunk = std::size_t{1} << 30;

ReduceOp combining(ReduceOp op) { return op == ReduceOp::Average ? ReduceOp::Sum : op; }

bool overlaps(const std::byte* a, std::size_t a_bytes, const std::byte* b, std::size_t b_bytes) {
  if (a_bytes == 0 || b_bytes == 0) return false;
  std::less<const std::byte*> before;
  return before(a, b + b_bytes) && before(b, a + a_bytes);
}

std::string describe(std::size_t count, DataType type) {
  return std::to_string(count) + " " + std::string(to_string(type));
}

std::byte* bytes_of(std::vector<float>& values) { return reinterpret_cast<std::byte*>(values.data()); }

}  // namespace

struct MpiBackend::Impl {
  mpi::Comm comm;
  std::unique_ptr<mpi::Hierarchy> hierarchy;  // null: flat
  int tag_upper_bound = 32767;
  std::string abort_reason;  // non-empty once abort() was called

  int rank() const { return comm.rank(); }

  void check_usable(const char* op) const {
    if (!abort_reason.empty()) {
      throw PeerFailure(std::string(op) + " on rank " + std::to_string(rank()) +
                        ": the job was aborted: " + abort_reason);
    }
  }

  // In place, in a type MPI reduces natively.
  void all_reduce(std::byte* data, std::size_t count, DataType type, ReduceOp op) {
    if (hierarchy && count > 0) {
      hierarchy->all_reduce(data, count, type, combining(op));
    } else {
      const std::size_t es = size_of(type);
      std::size_t done = 0;
      do {
        const std::size_t part = std::min(kMaxChunk, count - done);
        check(MPI_Allreduce(MPI_IN_PLACE, data + done * es, static_cast<int>(part),
                            mpi::datatype(type), mpi::op(op), comm.get()),
              "all_reduce", rank(), "MPI_Allreduce of " + describe(count, type));
        done += part;
      } while (done < count);
    }
    if (op == ReduceOp::Average) mpi::finish_average(data, count, type, comm.size());
  }
};

MpiBackend::MpiBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MpiBackend::~MpiBackend() = default;

std::shared_ptr<MpiBackend> MpiBackend::create(MpiOptions options) {
  mpi::ensure_initialized();
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm own = MPI_COMM_NULL;
  check(MPI_Comm_dup(MPI_COMM_WORLD, &own), "MPI_Comm_dup", world_rank, "creating the world");
  auto impl = std::make_unique<Impl>();
  impl->comm = mpi::Comm(own);
  int* upper = nullptr;
  int found = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &upper, &found);
  if (found && upper) impl->tag_upper_bound = *upper;
  impl->hierarchy = mpi::Hierarchy::build(impl->comm, options);
  return std::shared_ptr<MpiBackend>(new MpiBackend(std::move(impl)));
}

std::shared_ptr<MpiBackend> MpiBackend::from_environment() {
  MpiOptions options;
  if (const auto hierarchical = env::flag("AXON_HIERARCHICAL")) options.hierarchical = *hierarchical;
  if (const auto node = env::integer("AXON_NODE_ID", 0, 1'000'000'000)) {
    options.node_id = static_cast<int>(*node);
  }
  return create(options);
}

std::string_view MpiBackend::name() const { return "mpi"; }
int MpiBackend::rank() const { return impl_->comm.rank(); }
int MpiBackend::world_size() const { return impl_->comm.size(); }
bool MpiBackend::hierarchical() const { return impl_->hierarchy != nullptr; }
int MpiBackend::nodes() const { return impl_->hierarchy ? impl_->hierarchy->nodes() : 1; }

void MpiBackend::abort(const std::string& reason) {
  if (impl_->abort_reason.empty()) impl_->abort_reason = reason.empty() ? "(no reason)" : reason;
  // Ranks of this node waiting in shared memory wake and throw. Ranks of
  // other nodes blocked inside MPI cannot be woken short of MPI_Abort; mpirun
  // ends them when this process exits with an error.
  if (impl_->hierarchy) impl_->hierarchy->arena().abort(reason);
}

void MpiBackend::do_all_reduce(MutableBuffer data, ReduceOp op) {
  impl_->check_usable("all_reduce");
  if (!mpi::is_half(data.type)) return impl_->all_reduce(data.data, data.count, data.type, op);
  auto wide = mpi::widen(data.data, data.count, data.type);
  impl_->all_reduce(bytes_of(wide), data.count, DataType::F32, op);
  mpi::narrow(wide.data(), data.data, data.count, data.type);
}

void MpiBackend::do_broadcast(MutableBuffer data, int src) {
  impl_->check_usable("broadcast");
  if (impl_->hierarchy && data.count > 0) {
    return impl_->hierarchy->broadcast(data.data, data.count, data.type, src);
  }
  const std::size_t bytes = data.count * size_of(data.type);
  std::size_t done = 0;
  do {
    const std::size_t part = std::min(kMaxChunk, bytes - done);
    check(MPI_Bcast(data.data + done, static_cast<int>(part), MPI_BYTE, src, impl_->comm.get()),
          "broadcast", rank(), "MPI_Bcast of " + describe(data.count, data.type) + " from rank " +
                                   std::to_string(src));
    done += part;
  } while (done < bytes);
}

void MpiBackend::do_all_gather(ConstBuffer send, MutableBuffer recv) {
  impl_->check_usable("all_gather");
  const std::size_t bytes = send.count * size_of(send.type);
  const std::byte* mine = recv.data + static_cast<std::size_t>(rank()) * bytes;
  std::vector<std::byte> copy;
  if (send.data != mine && overlaps(send.data, bytes, recv.data, recv.count * size_of(recv.type))) {
    copy.assign(send.data, send.data + bytes);
    send.data = copy.data();
  }
  if (impl_->hierarchy && send.count > 0) {
    if (send.data == mine) {
      copy.assign(send.data, send.data + bytes);
      send.data = copy.data();
    }
    return impl_->hierarchy->all_gather(send.data, recv.data, send.count, send.type);
  }
  const int n = int_count(bytes, "all_gather", rank());
  check(MPI_Allgather(send.data == mine ? MPI_IN_PLACE : send.data, n, MPI_BYTE, recv.data, n,
                      MPI_BYTE, impl_->comm.get()),
        "all_gather", rank(), "MPI_Allgather of " + describe(send.count, send.type) + " per rank");
}

void MpiBackend::do_reduce_scatter(ConstBuffer send, MutableBuffer recv, ReduceOp op) {
  impl_->check_usable("reduce_scatter");
  const int n = int_count(recv.count, "reduce_scatter", rank());
  const std::string what = "MPI_Reduce_scatter_block of " + describe(recv.count, recv.type) + " per rank";
  if (mpi::is_half(recv.type)) {
    auto wide_send = mpi::widen(send.data, send.count, send.type);
    std::vector<float> wide_recv(recv.count);
    check(MPI_Reduce_scatter_block(wide_send.data(), wide_recv.data(), n, MPI_FLOAT,
                                   mpi::op(op), impl_->comm.get()),
          "reduce_scatter", rank(), what);
    if (op == ReduceOp::Average) mpi::finish_average(bytes_of(wide_recv), recv.count, DataType::F32, world_size());
    return mpi::narrow(wide_recv.data(), recv.data, recv.count, recv.type);
  }
  const std::size_t es = size_of(recv.type);
  std::vector<std::byte> copy;
  if (overlaps(send.data, send.count * es, recv.data, recv.count * es)) {
    copy.assign(send.data, send.data + send.count * es);
    send.data = copy.data();
  }
  check(MPI_Reduce_scatter_block(send.data, recv.data, n, mpi::datatype(recv.type), mpi::op(op),
                                 impl_->comm.get()),
        "reduce_scatter", rank(), what);
  if (op == ReduceOp::Average) mpi::finish_average(recv.data, recv.count, recv.type, world_size());
}

void MpiBackend::do_gather(ConstBuffer send, MutableBuffer recv, int dst) {
  impl_->check_usable("gather");
  const std::size_t bytes = send.count * size_of(send.type);
  const int n = int_count(bytes, "gather", rank());
  const bool root = rank() == dst;
  const void* from = send.data;
  std::vector<std::byte> copy;
  if (root && send.data == recv.data + static_cast<std::size_t>(dst) * bytes) {
    from = MPI_IN_PLACE;
  } else if (root && overlaps(send.data, bytes, recv.data, recv.count * size_of(recv.type))) {
    copy.assign(send.data, send.data + bytes);
    from = copy.data();
  }
  check(MPI_Gather(from, n, MPI_BYTE, recv.data, n, MPI_BYTE, dst, impl_->comm.get()), "gather",
        rank(), "MPI_Gather of " + describe(send.count, send.type) + " per rank to rank " + std::to_string(dst));
}

void MpiBackend::do_scatter(ConstBuffer send, MutableBuffer recv, int src) {
  impl_->check_usable("scatter");
  const std::size_t bytes = recv.count * size_of(recv.type);
  const int n = int_count(bytes, "scatter", rank());
  const bool root = rank() == src;
  void* to = recv.data;
  std::vector<std::byte> copy;
  if (root && recv.data == send.data + static_cast<std::size_t>(src) * bytes) {
    to = MPI_IN_PLACE;
  } else if (root && overlaps(send.data, send.count * size_of(send.type), recv.data, bytes)) {
    copy.assign(send.data, send.data + send.count * size_of(send.type));
    send.data = copy.data();
  }
  check(MPI_Scatter(send.data, n, MPI_BYTE, to, n, MPI_BYTE, src, impl_->comm.get()), "scatter",
        rank(), "MPI_Scatter of " + describe(recv.count, recv.type) + " per rank from rank " + std::to_string(src));
}

void MpiBackend::do_reduce(ConstBuffer send, MutableBuffer recv, int dst, ReduceOp op) {
  impl_->check_usable("reduce");
  const int n = int_count(send.count, "reduce", rank());
  const bool root = rank() == dst;
  const std::string what = "MPI_Reduce of " + describe(send.count, send.type) + " to rank " + std::to_string(dst);
  if (mpi::is_half(send.type)) {
    auto wide_send = mpi::widen(send.data, send.count, send.type);
    std::vector<float> wide_recv(root ? send.count : 0);
    check(MPI_Reduce(wide_send.data(), wide_recv.data(), n, MPI_FLOAT, mpi::op(op), dst, impl_->comm.get()),
          "reduce", rank(), what);
    if (!root) return;
    if (op == ReduceOp::Average) mpi::finish_average(bytes_of(wide_recv), send.count, DataType::F32, world_size());
    return mpi::narrow(wide_recv.data(), recv.data, recv.count, recv.type);
  }
  const std::size_t bytes = send.count * size_of(send.type);
  const void* from = send.data;
  std::vector<std::byte> copy;
  if (root && send.data == recv.data) {
    from = MPI_IN_PLACE;
  } else if (root && overlaps(send.data, bytes, recv.data, bytes)) {
    copy.assign(send.data, send.data + bytes);
    from = copy.data();
  }
  check(MPI_Reduce(from, recv.data, n, mpi::datatype(send.type), mpi::op(op), dst, impl_->comm.get()),
        "reduce", rank(), what);
  if (root && op == ReduceOp::Average) mpi::finish_average(recv.data, recv.count, recv.type, world_size());
}

void MpiBackend::do_barrier() {
  impl_->check_usable("barrier");
  check(MPI_Barrier(impl_->comm.get()), "barrier", rank(), "MPI_Barrier");
}

void MpiBackend::do_send(ConstBuffer data, int dst, int tag) {
  impl_->check_usable("send");
  if (tag > impl_->tag_upper_bound) {
    throw InvalidArgument("send on rank " + std::to_string(rank()) + ": invalid tag " + std::to_string(tag) +
                          " (MPI allows 0.." + std::to_string(impl_->tag_upper_bound) + ")");
  }
  const std::size_t bytes = data.count * size_of(data.type);
  check(MPI_Send(data.data, int_count(bytes, "send", rank()), MPI_BYTE, dst, tag, impl_->comm.get()),
        "send", rank(), "MPI_Send of " + describe(data.count, data.type) + " to rank " + std::to_string(dst) +
                            " with tag " + std::to_string(tag));
}

void MpiBackend::do_recv(MutableBuffer data, int src, int tag) {
  impl_->check_usable("recv");
  if (tag > impl_->tag_upper_bound) {
    throw InvalidArgument("recv on rank " + std::to_string(rank()) + ": invalid tag " + std::to_string(tag) +
                          " (MPI allows 0.." + std::to_string(impl_->tag_upper_bound) + ")");
  }
  const std::size_t bytes = data.count * size_of(data.type);
  const std::string what = "MPI_Recv of " + describe(data.count, data.type) + " from rank " +
                           std::to_string(src) + " with tag " + std::to_string(tag);
  MPI_Status status;
  check(MPI_Recv(data.data, int_count(bytes, "recv", rank()), MPI_BYTE, src, tag, impl_->comm.get(), &status),
        "recv", rank(), what);
  int received = 0;
  MPI_Get_count(&status, MPI_BYTE, &received);
  if (static_cast<std::size_t>(received) != bytes) {
    throw CollectiveMismatch("recv on rank " + std::to_string(rank()) + ": expected " + std::to_string(bytes) +
                             " bytes from rank " + std::to_string(src) + " with tag " + std::to_string(tag) +
                             ", the message has " + std::to_string(received));
  }
}

std::shared_ptr<Backend> MpiBackend::do_new_group(const std::vector<int>& ranks) {
  impl_->check_usable("new_group");
  const auto found = std::find(ranks.begin(), ranks.end(), rank());
  const int color = found == ranks.end() ? MPI_UNDEFINED : 0;
  const int key = static_cast<int>(found - ranks.begin());
  MPI_Comm made = MPI_COMM_NULL;
  check(MPI_Comm_split(impl_->comm.get(), color, key, &made), "new_group", rank(),
        "MPI_Comm_split into a group of " + std::to_string(ranks.size()) + " ranks");
  if (made == MPI_COMM_NULL) return nullptr;
  auto impl = std::make_unique<Impl>();
  impl->comm = mpi::Comm(made);
  impl->tag_upper_bound = impl_->tag_upper_bound;
  return std::shared_ptr<MpiBackend>(new MpiBackend(std::move(impl)));
}

}  // namespace axonml::distributed
