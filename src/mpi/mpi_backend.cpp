#include "axonml/distributed/mpi_backend.hpp"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "axonml/distributed/error.hpp"
#include "base/env.hpp"
#include "base/log.hpp"
#include "base/recv_mismatch.hpp"
#include "base/text.hpp"
#include "kernels/reduce.hpp"
#include "mpi/call_exchange.hpp"
#include "mpi/hierarchy.hpp"
#include "mpi/mpi_runtime.hpp"
#include "mpi/ordered.hpp"
#include "mpi/reduction.hpp"
#include "mpi/waiting.hpp"
#include "shm/arena_layout.hpp"
#include "shm/wait.hpp"

namespace axonml::distributed {
using mpi::CallDescriptor;
using mpi::CallExchange;
using mpi::check;
using mpi::int_count;

namespace {

// Broadcasts and gathers larger than this many bytes are split: MPI counts are ints.
constexpr std::size_t kMaxChunk = std::size_t{1} << 30;
constexpr std::size_t kInline = CallExchange::kInlineBytes;

ReduceOp combining(ReduceOp op) { return op == ReduceOp::Average ? ReduceOp::Sum : op; }

// f() on the node hierarchy, whose node arena waits as the shared-memory
// backend does: when such a wait gives up on a peer, so has this process,
// as when one of MPI's own waits does (mpi::note_gave_up_waiting).
// Why: a cross-node wait that gives up (a timeout, another process's abort
// notice) leaves this node's other ranks waiting for this one in the node
// arena, which no MPI notice reaches; they waited out AXON_TIMEOUT and then
// blamed this rank (found by a review). Wake them with the reason, as
// Impl::begin() does for the exchange.
template <typename F> void through_hierarchy(mpi::Hierarchy& hierarchy, F&& f) {
  try {
    f();
  } catch (const PeerFailure& e) {  // Timeout included
    mpi::note_gave_up_waiting();
    hierarchy.arena().abort(e.what());
    throw;
  }
}

bool overlaps(const std::byte* a, std::size_t a_bytes, const std::byte* b, std::size_t b_bytes) {
  if (a_bytes == 0 || b_bytes == 0) return false;
  std::less<const std::byte*> before;
  return before(a, b + b_bytes) && before(b, a + a_bytes);
}

std::byte* bytes_of(std::vector<float>& values) { return reinterpret_cast<std::byte*>(values.data()); }

// AXON_CHECK_COLLECTIVES=0 turns the call check off, as for the shared-memory
// backend; it exists to measure what the check costs. Every rank must agree.
bool calls_checked() {
  static const bool enabled = env::flag("AXON_CHECK_COLLECTIVES").value_or(true);
  return enabled;
}

using Payload = std::function<std::span<const std::byte>(int peer)>;

std::span<const std::byte> none(int) { return {}; }

// What leads every point-to-point message: the sender's element type, and a
// mark that the message came from this library's send.
struct P2pHeader {
  std::uint32_t type;
  std::uint32_t magic;
};
constexpr std::size_t kP2pHeaderBytes = sizeof(P2pHeader);
constexpr std::uint32_t kP2pMagic = 0x61786f6e;  // "axon"

// A send() whose data MPI has not taken yet: the copy lives here until then.
struct PendingSend {
  MPI_Request request = MPI_REQUEST_NULL;
  std::vector<std::byte> data;
  std::string what;
};

// Whether this node's ranks of the job outnumber its cores
// (shm::ranks_outnumber_cores), counting the ranks Open MPI started here
// (OMPI_COMM_WORLD_LOCAL_SIZE), or else the whole world, which at worst
// keeps the waits yielding. Read once.
bool node_oversubscribed() {
  static const bool oversubscribed = [] {
    int ranks_here = 0;
    if (const auto local = env::integer("OMPI_COMM_WORLD_LOCAL_SIZE", 1, 1'000'000)) {
      ranks_here = static_cast<int>(*local);
    } else {
      MPI_Comm_size(MPI_COMM_WORLD, &ranks_here);
    }
    return shm::ranks_outnumber_cores(ranks_here);
  }();
  return oversubscribed;
}

}  // namespace

struct MpiBackend::Impl {
  mpi::Comm comm;  // the user's send / recv
  mpi::Comm coll;  // collectives: the call exchange and MPI's nonblocking collectives
  std::vector<int> world_ranks;
  std::unique_ptr<CallExchange> exchange;
  std::unique_ptr<mpi::Hierarchy> hierarchy;  // null: flat
  int tag_upper_bound = 32767;
  std::atomic<bool> aborted{false};
  std::string abort_reason;  // written once, before `aborted` is set
  mpi::WaitContext wait;             // send / recv, and the destructor's
  mpi::WaitContext collective_wait;  // the same, watching for peers that gave up a call
  std::mutex sends_mutex;  // send() may run beside this group's collectives, which reap too
  std::deque<PendingSend> sends;
  std::vector<std::byte> scratch, copy;
  std::string group_name;  // "[0, 1]", for messages made on every call

  Impl(MPI_Comm made, std::vector<int> ranks_in_world) : comm(made), world_ranks(std::move(ranks_in_world)) {
    MPI_Comm dup = MPI_COMM_NULL;
    check(MPI_Comm_dup(comm.get(), &dup), "MPI_Comm_dup", world_rank(), "creating a group's collective channel");
    coll = mpi::Comm(dup);
    exchange = std::make_unique<CallExchange>(coll, world_ranks);
    group_name = exchange->group_name();
    wait.rank = world_rank();
    wait.timeout = shm::default_timeout();
    wait.aborted = &aborted;
    wait.abort_reason = &abort_reason;
    wait.oversubscribed = node_oversubscribed();
    collective_wait = wait;
    collective_wait.watch = [this] { exchange->fail_if_a_peer_gave_up(); };
  }

  ~Impl() {
    // What was sent must arrive (the promise of unlimited buffering), so
    // wait for it, but not forever; after MPI_Finalize (the last copy of a
    // group dropped by a thread as the process exits) nothing can be, and
    // MPI_Finalize waits until this is done (finalize_mutex).
    std::lock_guard lock(mpi::finalize_mutex());
    if (mpi::finalized()) {
      for (auto& send : sends) new std::vector<std::byte>(std::move(send.data));  // deliberately leaked
      return;
    }
    try {
      while (!sends.empty()) {
        const int rc = mpi::wait_all(std::span<MPI_Request>(&sends.front().request, 1), wait,
                                     [&](std::span<const MPI_Request>) {
                                       return sends.front().what + ": never received";
                                     });
        if (rc != MPI_SUCCESS) break;
        sends.pop_front();
      }
    } catch (const std::exception& e) {
      log::log(log::Level::Error, world_rank(), "MpiBackend: {}", e.what());
    }
    if (!sends.empty()) {
      for (auto& send : sends) {
        if (send.request != MPI_REQUEST_NULL) MPI_Request_free(&send.request);
        new std::vector<std::byte>(std::move(send.data));  // deliberately leaked: MPI may read it
      }
      mpi::note_abandoned_requests();
    }
  }

  int rank() const { return comm.rank(); }
  int size() const { return comm.size(); }
  int world_rank() const { return world_ranks[static_cast<std::size_t>(comm.rank())]; }

  // `call`, when given, names the collective in the abort's message: it
  // gave only the op's name where a peer's abort was seen at a call's entry,
  // and the op, dtype, count and group where seen inside (the MPI review).
  void check_usable(const char* op, const mpi::CallDescriptor* call = nullptr) const {
    const auto where = [&] {  // as a wait inside the call says it
      return call != nullptr ? "rank " + std::to_string(world_rank()) + ": " + mpi::to_string(*call) + " in group " +
                                   group_name
                             : std::string(op) + " on rank " + std::to_string(world_rank());
    };
    if (aborted.load(std::memory_order_acquire)) {
      throw PeerFailure(where() + ": the job was aborted: " + abort_reason);
    }
    if (const auto notice = mpi::job_aborted_received()) {  // an abort(): another process's, or this one's on another group
      throw PeerFailure(where() + ": job aborted: " + *notice);
    }
    // A call from an atexit handler or a static destructor that runs after
    // this library finalized MPI: Open MPI aborts the job from inside the
    // call, naming only its own function (found by a review).
    if (mpi::finalized()) {
      throw InvalidArgument(std::string(op) + " on rank " + std::to_string(world_rank()) +
                            ": MPI has been finalized (by the program, or by this library at exit: a call from "
                            "an atexit handler or a static destructor comes after that); make every call "
                            "before MPI_Finalize, and before main returns");
    }
  }

  // Frees the copies of sends MPI has finished with.
  void reap_sends() {
    std::lock_guard lock(sends_mutex);
    while (!sends.empty()) {
      int done = 0;
      check(MPI_Test(&sends.front().request, &done, MPI_STATUS_IGNORE), sends.front().what, world_rank(),
            "completing a send");
      if (!done) return;
      sends.pop_front();
    }
  }

  // The first step of every collective: the call exchange, when calls are
  // checked or the data goes inline. Returns whether the data went inline.
  bool begin(const CallDescriptor& call, bool inline_data, const Payload& payload) {
    reap_sends();
    try {
      if (inline_data) {
        exchange->run(call, payload, calls_checked(), collective_wait);
      } else if (calls_checked()) {
        exchange->run(call, none, true, collective_wait);
      }
    } catch (const Error& e) {
      // A rank of this node that finished the exchange as this one gave it
      // up waits in the node arena, which no MPI notice reaches: wake it with
      // the reason (found by a review: it waited a whole timeout more, and a
      // rank waiting for it, two).
      if (hierarchy) hierarchy->arena().abort(e.what());
      throw;
    }
    return inline_data;
  }

  // "all_reduce(f32, 100, sum) call #3 in group [0, 1]": for errors of the
  // steps after the exchange.
  std::string what() const {
    return mpi::to_string(exchange->current()) + " call #" + std::to_string(exchange->current().call) +
           " in group " + exchange->group_name();
  }

  // The rank-order sources: this member's data, the others' from the exchange.
  std::vector<const std::byte*> sources(const std::byte* mine) const {
    std::vector<const std::byte*> all(static_cast<std::size_t>(size()));
    for (int q = 0; q < size(); ++q) {
      all[static_cast<std::size_t>(q)] = q == rank() ? mine : exchange->received(q).data();
    }
    return all;
  }

  void wait_for(MPI_Request& request, const std::string& step) {
    mpi::wait_collective(request, collective_wait, what() + " (" + step + ")");
  }
};

MpiBackend::MpiBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MpiBackend::~MpiBackend() = default;

std::shared_ptr<MpiBackend> MpiBackend::create(MpiOptions options) {
  (void)calls_checked();  // a bad AXON_CHECK_COLLECTIVES fails every rank here, not at its first call
  mpi::ensure_initialized();
  int world_rank = 0, world_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  MPI_Comm own = MPI_COMM_NULL;
  check(MPI_Comm_dup(MPI_COMM_WORLD, &own), "MPI_Comm_dup", world_rank, "creating the world");
  std::vector<int> ranks(static_cast<std::size_t>(world_size));
  for (int r = 0; r < world_size; ++r) ranks[static_cast<std::size_t>(r)] = r;
  auto impl = std::make_unique<Impl>(own, std::move(ranks));
  int* upper = nullptr;
  int found = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &upper, &found);
  if (found && upper) impl->tag_upper_bound = *upper;
  impl->hierarchy = mpi::Hierarchy::build(impl->comm, options);
  return std::shared_ptr<MpiBackend>(new MpiBackend(std::move(impl)));
}

// Why: a second World::init() made a second MPI world that worked, where
// under axon-launch it throws; and where only one rank made it, that rank
// waited in it for peers that never came. A process is one rank: refused
// here, before anything collective, as ShmBackend::from_environment does.
std::shared_ptr<MpiBackend> MpiBackend::from_environment() {
  static std::mutex mutex;
  static std::optional<std::pair<int, int>> attached;  // (rank, world size) of the first call
  std::lock_guard lock(mutex);
  if (attached) {
    throw InvalidArgument("rank " + std::to_string(attached->first) +
                          ": World::init() (MpiBackend::from_environment) was already called in this "
                          "process, which is rank " + std::to_string(attached->first) + " of " +
                          std::to_string(attached->second) +
                          " of the MPI job: a process is one rank and attaches once; keep the World "
                          "the first call returned (copies share it)");
  }
  MpiOptions options;
  if (const auto hierarchical = env::flag("AXON_HIERARCHICAL")) options.hierarchical = *hierarchical;
  if (const auto node = env::integer("AXON_NODE_ID", 0, 1'000'000'000)) {
    options.node_id = static_cast<int>(*node);
  }
  auto backend = create(options);
  attached = std::make_pair(backend->rank(), backend->world_size());
  return backend;
}

std::string_view MpiBackend::name() const { return "mpi"; }
int MpiBackend::rank() const { return impl_->rank(); }
int MpiBackend::world_size() const { return impl_->size(); }
bool MpiBackend::hierarchical() const { return impl_->hierarchy != nullptr; }
int MpiBackend::nodes() const { return impl_->hierarchy ? impl_->hierarchy->nodes() : 1; }

void MpiBackend::abort(const std::string& reason) {
  if (!impl_->aborted.load(std::memory_order_acquire)) {
    impl_->abort_reason = reason.empty() ? "(no reason)" : reason;
    impl_->aborted.store(true, std::memory_order_release);
  }
  // Every other process's waits, current and future, throw with the reason
  // (each wait polls for the notice); ranks of this node waiting in shared
  // memory wake and throw at once.
  const std::string notice =
      "rank " + std::to_string(impl_->world_rank()) + " aborted: " + (reason.empty() ? "(no reason)" : reason);
  mpi::note_job_aborted_here(notice);
  mpi::tell_job_aborted(notice);
  if (impl_->hierarchy) impl_->hierarchy->arena().abort(reason);
}

void MpiBackend::do_all_reduce(MutableBuffer data, ReduceOp op) {
  const mpi::CallInFlight in_flight("all_reduce", impl_->world_rank(), impl_->group_name);
  const std::size_t bytes = data.count * size_of(data.type);
  const auto call = mpi::describe_call(CollectiveOp::AllReduce, data.type, data.count, -1, &op);
  impl_->check_usable("all_reduce", &call);
  if (impl_->size() == 1) {  // the buffer as it is, as the shared-memory backend leaves it (NaN payloads too)
    impl_->begin(call, false, none);
    return;
  }
  const std::span<const std::byte> mine(data.data, bytes);
  if (impl_->begin(call, bytes <= kInline, [&](int) { return mine; })) {
    if (data.count > 0) kernels::reduce(data.type, op, impl_->sources(data.data), data.data, data.count);
    return;
  }
  if (!impl_->hierarchy) {
    return mpi::ordered_all_reduce(impl_->coll, data.data, data.count, data.type, op, impl_->collective_wait,
                                   impl_->what(), impl_->scratch);
  }
  // Hierarchical: each node's sum in local-rank order, then the nodes' sums
  // in node order (see mpi/hierarchy.hpp); halves are reduced in f32.
  std::vector<float> wide;
  std::byte* values = data.data;
  DataType type = data.type;
  if (mpi::is_half(type)) {
    wide = mpi::widen_to_f32(data.data, data.count, data.type);
    values = bytes_of(wide);
    type = DataType::F32;
  }
  through_hierarchy(*impl_->hierarchy, [&] { impl_->hierarchy->all_reduce(values, data.count, type, combining(op), impl_->collective_wait); });
  if (op == ReduceOp::Average) mpi::finish_average(values, data.count, type, impl_->size());
  if (!wide.empty()) mpi::round_to_storage(wide.data(), data.data, data.count, data.type);
}

void MpiBackend::do_broadcast(MutableBuffer data, int src) {
  const mpi::CallInFlight in_flight("broadcast", impl_->world_rank(), impl_->group_name);
  const std::size_t bytes = data.count * size_of(data.type);
  const auto call = mpi::describe_call(CollectiveOp::Broadcast, data.type, data.count, src);
  impl_->check_usable("broadcast", &call);
  const std::span<const std::byte> mine(data.data, bytes);
  const bool root = rank() == src;
  if (impl_->begin(call, bytes <= kInline, [&](int) { return root ? mine : std::span<const std::byte>(); })) {
    if (!root && bytes > 0) std::memcpy(data.data, impl_->exchange->received(src).data(), bytes);
    return;
  }
  if (impl_->hierarchy) {
    return through_hierarchy(*impl_->hierarchy, [&] { impl_->hierarchy->broadcast(data.data, data.count, data.type, src, impl_->collective_wait); });
  }
  for (std::size_t done = 0; done < bytes;) {
    const std::size_t part = std::min(kMaxChunk, bytes - done);
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Ibcast(data.data + done, static_cast<int>(part), MPI_BYTE, src, impl_->coll.get(), &request),
          "broadcast", impl_->world_rank(), "MPI_Ibcast of " + impl_->what());
    impl_->wait_for(request, "MPI_Ibcast");
    done += part;
  }
}

void MpiBackend::do_all_gather(ConstBuffer send, MutableBuffer recv) {
  const mpi::CallInFlight in_flight("all_gather", impl_->world_rank(), impl_->group_name);
  const std::size_t bytes = send.count * size_of(send.type);
  std::byte* mine = recv.data + static_cast<std::size_t>(rank()) * bytes;
  const auto call = mpi::describe_call(CollectiveOp::AllGather, send.type, send.count);
  impl_->check_usable("all_gather", &call);
  const std::span<const std::byte> own(send.data, bytes);
  if (impl_->begin(call, bytes <= kInline, [&](int) { return own; })) {
    if (bytes == 0) return;
    std::memmove(mine, send.data, bytes);  // first: `send` may overlap the others' places
    for (int q = 0; q < world_size(); ++q) {
      if (q != rank()) std::memcpy(recv.data + static_cast<std::size_t>(q) * bytes, impl_->exchange->received(q).data(), bytes);
    }
    return;
  }
  auto& copy = impl_->copy;
  if (send.data != mine && overlaps(send.data, bytes, recv.data, recv.count * size_of(recv.type))) {
    copy.assign(send.data, send.data + bytes);
    send.data = copy.data();
  }
  if (impl_->hierarchy) {
    if (send.data == mine) {
      copy.assign(send.data, send.data + bytes);
      send.data = copy.data();
    }
    return through_hierarchy(
        *impl_->hierarchy, [&] { impl_->hierarchy->all_gather(send.data, recv.data, send.count, send.type, impl_->collective_wait); });
  }
  const int n = int_count(bytes, "all_gather", impl_->world_rank());
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Iallgather(send.data == mine ? MPI_IN_PLACE : send.data, n, MPI_BYTE, recv.data, n, MPI_BYTE,
                       impl_->coll.get(), &request),
        "all_gather", impl_->world_rank(), "MPI_Iallgather of " + impl_->what());
  impl_->wait_for(request, "MPI_Iallgather");
}

void MpiBackend::do_reduce_scatter(ConstBuffer send, MutableBuffer recv, ReduceOp op) {
  const mpi::CallInFlight in_flight("reduce_scatter", impl_->world_rank(), impl_->group_name);
  const std::size_t bytes = recv.count * size_of(recv.type);
  const auto call = mpi::describe_call(CollectiveOp::ReduceScatter, recv.type, recv.count, -1, &op);
  impl_->check_usable("reduce_scatter", &call);
  const std::byte* mine = send.data + static_cast<std::size_t>(rank()) * bytes;
  if (impl_->size() == 1) {  // as it is, NaN payloads too, as all_reduce and the shared-memory backend leave it
    impl_->begin(call, false, none);
    if (bytes > 0 && mine != recv.data) std::memmove(recv.data, mine, bytes);
    return;
  }
  if (impl_->begin(call, bytes <= kInline, [&](int peer) {
        return std::span<const std::byte>(send.data + static_cast<std::size_t>(peer) * bytes, bytes);
      })) {
    if (bytes == 0) return;
    if (mine != recv.data && overlaps(mine, bytes, recv.data, bytes)) {
      impl_->copy.assign(mine, mine + bytes);
      mine = impl_->copy.data();
    }
    return kernels::reduce(recv.type, op, impl_->sources(mine), recv.data, recv.count);
  }
  mpi::ordered_reduce_scatter(impl_->coll, send.data, recv.data, recv.count, recv.type, op, impl_->collective_wait,
                              impl_->what(), impl_->scratch);
}

void MpiBackend::do_gather(ConstBuffer send, MutableBuffer recv, int dst) {
  const mpi::CallInFlight in_flight("gather", impl_->world_rank(), impl_->group_name);
  const std::size_t bytes = send.count * size_of(send.type);
  const bool root = rank() == dst;
  const auto call = mpi::describe_call(CollectiveOp::Gather, send.type, send.count, dst);
  impl_->check_usable("gather", &call);
  const std::span<const std::byte> own(send.data, bytes);
  if (impl_->begin(call, bytes <= kInline,
                   [&](int peer) { return peer == dst ? own : std::span<const std::byte>(); })) {
    if (!root || bytes == 0) return;
    std::memmove(recv.data + static_cast<std::size_t>(dst) * bytes, send.data, bytes);
    for (int q = 0; q < world_size(); ++q) {
      if (q != dst) std::memcpy(recv.data + static_cast<std::size_t>(q) * bytes, impl_->exchange->received(q).data(), bytes);
    }
    return;
  }
  const int n = int_count(bytes, "gather", impl_->world_rank());
  const void* from = send.data;
  if (root && send.data == recv.data + static_cast<std::size_t>(dst) * bytes) {
    from = MPI_IN_PLACE;
  } else if (root && overlaps(send.data, bytes, recv.data, recv.count * size_of(recv.type))) {
    impl_->copy.assign(send.data, send.data + bytes);
    from = impl_->copy.data();
  }
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Igather(from, n, MPI_BYTE, recv.data, n, MPI_BYTE, dst, impl_->coll.get(), &request), "gather",
        impl_->world_rank(), "MPI_Igather of " + impl_->what());
  impl_->wait_for(request, "MPI_Igather");
}

void MpiBackend::do_scatter(ConstBuffer send, MutableBuffer recv, int src) {
  const mpi::CallInFlight in_flight("scatter", impl_->world_rank(), impl_->group_name);
  const std::size_t bytes = recv.count * size_of(recv.type);
  const bool root = rank() == src;
  const auto call = mpi::describe_call(CollectiveOp::Scatter, recv.type, recv.count, src);
  impl_->check_usable("scatter", &call);
  if (impl_->begin(call, bytes <= kInline, [&](int peer) {
        return root ? std::span<const std::byte>(send.data + static_cast<std::size_t>(peer) * bytes, bytes)
                    : std::span<const std::byte>();
      })) {
    if (bytes == 0) return;
    if (root) {
      std::memmove(recv.data, send.data + static_cast<std::size_t>(src) * bytes, bytes);
    } else {
      std::memcpy(recv.data, impl_->exchange->received(src).data(), bytes);
    }
    return;
  }
  const int n = int_count(bytes, "scatter", impl_->world_rank());
  void* to = recv.data;
  if (root && recv.data == send.data + static_cast<std::size_t>(src) * bytes) {
    to = MPI_IN_PLACE;
  } else if (root && overlaps(send.data, send.count * size_of(send.type), recv.data, bytes)) {
    impl_->copy.assign(send.data, send.data + send.count * size_of(send.type));
    send.data = impl_->copy.data();
  }
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Iscatter(send.data, n, MPI_BYTE, to, n, MPI_BYTE, src, impl_->coll.get(), &request), "scatter",
        impl_->world_rank(), "MPI_Iscatter of " + impl_->what());
  impl_->wait_for(request, "MPI_Iscatter");
}

void MpiBackend::do_reduce(ConstBuffer send, MutableBuffer recv, int dst, ReduceOp op) {
  const mpi::CallInFlight in_flight("reduce", impl_->world_rank(), impl_->group_name);
  const std::size_t bytes = send.count * size_of(send.type);
  const bool root = rank() == dst;
  const auto call = mpi::describe_call(CollectiveOp::Reduce, send.type, send.count, dst, &op);
  impl_->check_usable("reduce", &call);
  const std::span<const std::byte> own(send.data, bytes);
  if (impl_->size() == 1) {  // as it is, NaN payloads too, as all_reduce and the shared-memory backend leave it
    impl_->begin(call, false, none);
    if (bytes > 0 && send.data != recv.data) std::memmove(recv.data, send.data, bytes);
    return;
  }
  if (impl_->begin(call, bytes <= kInline,
                   [&](int peer) { return peer == dst ? own : std::span<const std::byte>(); })) {
    if (!root || bytes == 0) return;
    const std::byte* mine = send.data;
    if (mine != recv.data && overlaps(mine, bytes, recv.data, bytes)) {
      impl_->copy.assign(mine, mine + bytes);
      mine = impl_->copy.data();
    }
    return kernels::reduce(send.type, op, impl_->sources(mine), recv.data, send.count);
  }
  mpi::ordered_reduce(impl_->coll, send.data, recv.data, send.count, send.type, op, dst, impl_->collective_wait,
                      impl_->what(), impl_->scratch);
}

// Flat even with a node hierarchy: every block has its own destination, so
// there is nothing for a node leader to combine. MPI_Alltoall counts are
// per block, in bytes.
void MpiBackend::do_all_to_all(ConstBuffer send, MutableBuffer recv) {
  const mpi::CallInFlight in_flight("all_to_all", impl_->world_rank(), impl_->group_name);
  const std::size_t es = size_of(send.type);
  const std::size_t block = send.count / static_cast<std::size_t>(world_size());
  const std::size_t bytes = block * es;
  const auto call = mpi::describe_call(CollectiveOp::AllToAll, send.type, block);
  impl_->check_usable("all_to_all", &call);
  auto& copy = impl_->copy;
  if (overlaps(send.data, send.count * es, recv.data, recv.count * es)) {
    copy.assign(send.data, send.data + send.count * es);
    send.data = copy.data();
  }
  if (impl_->begin(call, bytes <= kInline, [&](int peer) {
        return std::span<const std::byte>(send.data + static_cast<std::size_t>(peer) * bytes, bytes);
      })) {
    if (bytes == 0) return;
    const auto me = static_cast<std::size_t>(rank());
    std::memcpy(recv.data + me * bytes, send.data + me * bytes, bytes);
    for (int q = 0; q < world_size(); ++q) {
      if (q != rank()) std::memcpy(recv.data + static_cast<std::size_t>(q) * bytes, impl_->exchange->received(q).data(), bytes);
    }
    return;
  }
  const int n = int_count(bytes, "all_to_all", impl_->world_rank());
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Ialltoall(send.data, n, MPI_BYTE, recv.data, n, MPI_BYTE, impl_->coll.get(), &request),
        "all_to_all", impl_->world_rank(), "MPI_Ialltoall of " + impl_->what());
  impl_->wait_for(request, "MPI_Ialltoall");
}

void MpiBackend::do_count_refused_collective() { impl_->exchange->count_refused_call(); }
void MpiBackend::do_mark_after_refused_thread() { impl_->exchange->mark_after_refused_thread(); }

void MpiBackend::do_barrier() {
  const mpi::CallInFlight in_flight("barrier", impl_->world_rank(), impl_->group_name);
  const auto call = mpi::describe_call(CollectiveOp::Barrier, DataType::F32, 0);
  impl_->check_usable("barrier", &call);
  // With the check on, the call exchange is the barrier: every member hears
  // from every other.
  if (calls_checked()) return static_cast<void>(impl_->begin(call, true, none));
  impl_->reap_sends();
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Ibarrier(impl_->coll.get(), &request), "barrier", impl_->world_rank(), "MPI_Ibarrier");
  mpi::wait_collective(request, impl_->collective_wait, "barrier in group " + impl_->exchange->group_name());
}

namespace {
// `world_peer`: the peer as the job numbers it, as every other message here
// (and the shared-memory backend's) names ranks, in a subgroup too.
std::string p2p_what(const char* op, DataType type, std::size_t count, const char* dir, int world_peer, int tag) {
  return std::string(op) + "(" + std::string(to_string(type)) + ", " + std::to_string(count) + ") " +
         dir + " rank " + std::to_string(world_peer) + " with tag " + std::to_string(tag);
}
}  // namespace

void MpiBackend::do_send(ConstBuffer data, int dst, int tag) {
  const mpi::CallInFlight in_flight("send", impl_->world_rank(), impl_->group_name);
  impl_->check_usable("send");
  if (tag > impl_->tag_upper_bound) {
    throw InvalidArgument("send on rank " + std::to_string(impl_->world_rank()) + ": invalid tag " + std::to_string(tag) +
                          " (MPI allows 0.." + std::to_string(impl_->tag_upper_bound) + ")");
  }
  impl_->reap_sends();
  // MPI_Send may wait for the receiver (rendezvous above the eager limit),
  // so a ring of sends then receives would deadlock. Instead the data is
  // copied and sent without waiting; the copy goes once MPI has taken it
  // (tested on every later call, and at the latest when this endpoint is
  // destroyed), which is unlimited buffering as far as the program can tell.
  const std::size_t bytes = data.count * size_of(data.type);
  PendingSend send;
  send.what = p2p_what("send", data.type, data.count, "to", impl_->world_ranks[static_cast<std::size_t>(dst)], tag);
  // Within MPI's int count, checked before the copy (the review of the
  // message's change: after it, a 2 GiB copy was made, or bad_alloc thrown,
  // first), and the words made only when it is not.
  if (kP2pHeaderBytes + bytes > static_cast<std::size_t>(INT_MAX)) {
    (void)int_count(kP2pHeaderBytes + bytes, send.what + " (with its 8-byte header)", impl_->world_rank());
  }
  // The message leads with its element type, as a shared-memory one carries
  // it in its cell header, so that a recv into another type fails the same way.
  send.data.resize(kP2pHeaderBytes + bytes);
  const P2pHeader header{static_cast<std::uint32_t>(data.type), kP2pMagic};
  std::memcpy(send.data.data(), &header, sizeof header);
  if (bytes > 0) std::memcpy(send.data.data() + kP2pHeaderBytes, data.data, bytes);
  check(MPI_Isend(send.data.data(), static_cast<int>(send.data.size()), MPI_BYTE, dst, tag, impl_->comm.get(),
                  &send.request),
        "send", impl_->world_rank(), "MPI_Isend of " + send.what);
  int done = 0;
  check(MPI_Test(&send.request, &done, MPI_STATUS_IGNORE), "send", impl_->world_rank(), send.what);
  if (!done) {
    std::lock_guard lock(impl_->sends_mutex);
    impl_->sends.push_back(std::move(send));
  }
}

void MpiBackend::do_recv(MutableBuffer data, int src, int tag) {
  const mpi::CallInFlight in_flight("recv", impl_->world_rank(), impl_->group_name);
  impl_->check_usable("recv");
  if (tag > impl_->tag_upper_bound) {
    throw InvalidArgument("recv on rank " + std::to_string(impl_->world_rank()) + ": invalid tag " + std::to_string(tag) +
                          " (MPI allows 0.." + std::to_string(impl_->tag_upper_bound) + ")");
  }
  impl_->reap_sends();
  const std::size_t bytes = data.count * size_of(data.type);
  const int world_src = impl_->world_ranks[static_cast<std::size_t>(src)];
  const std::string what = p2p_what("recv", data.type, data.count, "from", world_src, tag);
  const int me = impl_->world_rank();
  if (kP2pHeaderBytes + bytes > static_cast<std::size_t>(INT_MAX)) {
    (void)int_count(kP2pHeaderBytes + bytes, what + " (with its 8-byte header)", me);
  }
  // Probed, then taken whole into a buffer of ours, and copied into the
  // caller's only once its size and element type are known to match: a
  // message of another size or type is named and the caller's buffer left as
  // it was, as in shared memory (a receive into the caller's buffer filled
  // it; review 12 found that for equal sizes of another type). The copy is
  // the price: MPI point-to-point is the across-machines path, whose
  // transfer costs more.
  MPI_Message message = MPI_MESSAGE_NULL;
  MPI_Status status;
  mpi::wait_until(
      [&] {
        int found = 0;
        check(MPI_Improbe(src, tag, impl_->comm.get(), &found, &message, &status), "recv", me, "MPI_Improbe of " + what);
        return found != 0;
      },
      impl_->wait, [&] { return what + ": no message has come"; });
  int total = 0;
  MPI_Get_count(&status, MPI_BYTE, &total);
  std::vector<std::byte> whole(static_cast<std::size_t>(total));
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Imrecv(whole.data(), total, MPI_BYTE, &message, &request), "recv", me, "MPI_Imrecv of " + what);
  try {
    const int rc = mpi::wait_all(std::span<MPI_Request>(&request, 1), impl_->wait, [&](std::span<const MPI_Request>) {
      return what + ": the message has come but has not finished arriving";
    });
    check(rc, "recv", me, what);
  } catch (const Error&) {
    // A matched receive cannot be cancelled, and MPI writes into its buffer
    // until it completes: wait for that, then fail.
    if (request != MPI_REQUEST_NULL) MPI_Wait(&request, MPI_STATUS_IGNORE);
    throw;
  }
  P2pHeader header{};
  if (whole.size() >= kP2pHeaderBytes) std::memcpy(&header, whole.data(), kP2pHeaderBytes);
  if (static_cast<std::size_t>(total) < kP2pHeaderBytes || header.magic != kP2pMagic) {
    throw Error("recv on rank " + std::to_string(me) + " from rank " + std::to_string(world_src) + " with tag " +
                std::to_string(tag) + ": a message without this library's header (" + std::to_string(total) +
                " bytes): another program or library sent it on this communicator");
  }
  // The same exception and words as the shared-memory backends' (a program
  // behaves the same under both launchers).
  const auto had = static_cast<std::size_t>(total) - kP2pHeaderBytes;
  const auto had_type = static_cast<DataType>(header.type);
  if (had != bytes || had_type != data.type) {
    // In a subgroup, which one, as in shared memory.
    int job_size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &job_size);
    bool whole_job = static_cast<int>(impl_->world_ranks.size()) == job_size;
    for (std::size_t m = 0; whole_job && m < impl_->world_ranks.size(); ++m) {
      whole_job = impl_->world_ranks[m] == static_cast<int>(m);
    }
    throw RecvMismatch({"rank " + std::to_string(me), "rank " + std::to_string(world_src), tag, had, had_type, bytes,
                        data.type},
                       whole_job ? std::string() : " in group " + bracketed_ranks(impl_->world_ranks));
  }
  if (bytes > 0) std::memcpy(data.data, whole.data() + kP2pHeaderBytes, bytes);
}

std::shared_ptr<Backend> MpiBackend::do_new_group(const std::vector<int>& ranks) {
  const mpi::CallInFlight in_flight("new_group", impl_->world_rank(), impl_->group_name);
  impl_->check_usable("new_group");
  std::vector<int> world;
  world.reserve(ranks.size());
  for (const int r : ranks) world.push_back(impl_->world_ranks[static_cast<std::size_t>(r)]);
  // The hash of the list (as world ranks) rides in the descriptor, as in the
  // shared-memory backend, so ranks that pass different lists get a
  // CollectiveMismatch.
  auto call = mpi::describe_call(CollectiveOp::NewGroup, DataType::F32, ranks.size());
  call.detail = shm::hash_of_ranks(world);
  impl_->begin(call, false, none);
  const auto found = std::find(ranks.begin(), ranks.end(), rank());
  const int color = found == ranks.end() ? MPI_UNDEFINED : 0;
  const int key = static_cast<int>(found - ranks.begin());
  MPI_Comm made = MPI_COMM_NULL;
  check(MPI_Comm_split(impl_->comm.get(), color, key, &made), "new_group", impl_->world_rank(),
        "MPI_Comm_split into a group of " + std::to_string(ranks.size()) + " ranks");
  if (made == MPI_COMM_NULL) return nullptr;
  auto impl = std::make_unique<Impl>(made, std::move(world));
  impl->tag_upper_bound = impl_->tag_upper_bound;
  return std::shared_ptr<MpiBackend>(new MpiBackend(std::move(impl)));
}

}  // namespace axonml::distributed
