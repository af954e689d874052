#include "axonml/torch/process_group.hpp"

#include <ATen/MemoryOverlap.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <netdb.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <new>
#include <array>
#include <atomic>
#include <cctype>
#include <charconv>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>

#include "axonml/distributed/error.hpp"
#include "axonml/distributed/store_backend.hpp"
#include "base/collective_op.hpp"
#include "base/env.hpp"
#include "base/hash.hpp"
#include "base/log.hpp"
#include "base/text.hpp"
#include "kernels/reduce.hpp"
#include "shm/arena_layout.hpp"
#include "shm/launcher_report.hpp"
#include "shm/wait.hpp"
#include "torch/arena_storage.hpp"
#include "torch/buffers.hpp"
#include "torch/comm_thread.hpp"
#include "torch/interrupts.hpp"
#include "torch/without_gil.hpp"

namespace axonml::torch {
namespace ad = axonml::distributed;
using c10d::OpType;

namespace {

// Whether `store` (under any PrefixStores) is a TCPStore, whose server runs
// in rank 0 under env:// and tcp:// (a client's connection breaks when rank
// 0 drops it). 1.13's TCPStore does not say whether it is the server.
c10d::TCPStore* tcp_store(c10::intrusive_ptr<c10d::Store> store) {
  while (auto* prefixed = dynamic_cast<c10d::PrefixStore*>(store.get())) store = prefixed->getUnderlyingStore();
  return dynamic_cast<c10d::TCPStore*>(store.get());
}

// Whether `store` lives in this process, which is global rank `global_rank`:
// under env:// and tcp:// the TCPStore's server runs in global rank 0's.
bool store_lives_in_process_of(const c10::intrusive_ptr<c10d::Store>& store, int global_rank) {
  return global_rank == 0 && tcp_store(store) != nullptr;
}

// The c10d store PyTorch passes, as the runtime's KeyValueStore.
class C10dStore final : public ad::KeyValueStore {
 public:
  // A FileStore (init_method="file://...") creates its file at its first
  // write, and until then its check() waits out the whole timeout for the
  // file to appear, then fails with "open(...): No such file or directory"
  // (found by a review: the set-up's first call is a check()). Adding 0 to a
  // key writes, so the file exists before any check(); for other stores it
  // is one harmless round trip.
  explicit C10dStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {
    store_->add("axon/store_opened", 0);
  }
  void set(const std::string& key, const std::string& value) override {
    store_->set(key, std::vector<std::uint8_t>(value.begin(), value.end()));
  }
  std::string get(const std::string& key) override {
    const auto bytes = store_->get(key);
    return std::string(bytes.begin(), bytes.end());
  }
  std::optional<bool> has(const std::string& key) override { return store_->check({key}); }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

// Copies `c` (contiguous, t's shape) into t. An expanded t (stride 0 in a
// dimension: several elements share one place) refuses copy_(); each place
// then gets the last element that maps to it, as a copy in element order
// leaves it (Gloo's result).
void copy_back(at::Tensor& t, const at::Tensor& c) {
  if (at::has_internal_overlap(t) != at::MemOverlap::Yes) return void(t.copy_(c));
  at::Tensor places = t;
  at::Tensor values = c.view(t.sizes());
  for (std::int64_t d = 0; d < t.dim(); ++d) {
    if (t.stride(d) == 0 && t.size(d) > 1) {
      places = places.narrow(d, t.size(d) - 1, 1);
      values = values.narrow(d, t.size(d) - 1, 1);
    }
  }
  places.copy_(values);  // other overlaps (as_strided's) still refuse, naming it
}

// Runs `fn` on a contiguous tensor with t's values and copies the result
// back when t itself is not contiguous.
template <class Fn> void in_place(at::Tensor& t, Fn&& fn) {
  if (t.is_contiguous()) return fn(t);
  at::Tensor c = t.contiguous();
  fn(c);
  copy_back(t, c);
}

void check_root(std::int64_t root, int size, const std::string& where, const char* role) {
  if (root < 0 || root >= size) {
    throw ad::InvalidArgument(where + ": invalid " + role + " " + std::to_string(root) + " (" + role +
                              " should be in the 0.." + std::to_string(size - 1) + " range)");
  }
}

// (Views, not strings: a literal of more than 15 characters made a string
// on the heap in every op, errors or not.)
void check_count(const std::string& where, std::string_view what, std::int64_t actual,
                 std::int64_t expected, std::string_view why) {
  if (actual != expected) {
    throw ad::InvalidArgument(where + ": " + std::string(what) + " has " + std::to_string(actual) +
                              " but must have " + std::to_string(expected) + " (" + std::string(why) + ")");
  }
}

// `t` shaped as `expected` (both named in the message): Gloo's and MPI's
// allgather, gather and scatter require it, and where only the counts were
// compared the elements landed reshaped, hiding a caller's mistake (a review).
void check_shape(const std::string& where, std::string_view what, const at::Tensor& t, std::string_view expected_what,
                 const at::Tensor& expected) {
  if (t.sizes() != expected.sizes()) {
    throw ad::InvalidArgument(where + ": " + std::string(what) + " has shape " + c10::str(t.sizes()) + ", but " +
                              std::string(expected_what) + " has " + c10::str(expected.sizes()) +
                              "; they must have the same shape, as Gloo requires");
  }
}

// Every tensor valid and of the first one's dtype.
at::ScalarType check_all(const std::vector<at::Tensor>& tensors, const std::string& where) {
  if (tensors.empty()) throw ad::InvalidArgument(where + ": no tensors given");
  for (const auto& t : tensors) check_tensor(t, where);
  const at::ScalarType type = tensors.front().scalar_type();
  for (const auto& t : tensors) check_same_dtype(t, type, where);
  return type;
}

// The list of one tensor per rank that only the root passes (gather's
// outputs on dst, scatter's inputs on src), checked against the local
// tensor; empty on every other rank, where passing one is an error.
std::vector<at::Tensor> root_tensor_list(const std::vector<std::vector<at::Tensor>>& lists, int root, int rank, int size,
                         const at::Tensor& local, const std::string& where, const std::string& what,
                         const char* role) {
  if (rank != root) {
    if (!lists.empty() && !lists[0].empty()) {
      throw ad::InvalidArgument(where + ": only " + role + " (rank " + std::to_string(root) +
                                ") may pass " + what + " tensors");
    }
    return {};
  }
  check_count(where, "the " + what + " list", static_cast<std::int64_t>(lists.size()), 1,
              std::string("one list on ") + role);
  check_count(where, "the " + what + " list on " + role, static_cast<std::int64_t>(lists[0].size()),
              size, "one tensor per rank");
  check_all(lists[0], where);
  for (std::size_t i = 0; i < lists[0].size(); ++i) {
    check_same_dtype(lists[0][i], local.scalar_type(), where);
    check_shape(where, what + " tensor " + std::to_string(i), lists[0][i],
                std::string("the ") + (what == "output" ? "input" : "output"), local);
  }
  return lists[0];
}

// Why: given several tensors, allreduce reduced each across the ranks on its
// own and broadcast ignored rootTensor, where Gloo's multi-device form
// (all_reduce_multigpu, broadcast_multigpu) combines every tensor of every
// rank: other results, and no error (a review).
void check_one_tensor(const std::vector<at::Tensor>& tensors, const std::string& where, const char* coalesced) {
  if (tensors.size() == 1) return;  // the text below is made only for the error
  check_count(where, "the tensor list", static_cast<std::int64_t>(tensors.size()), 1,
              std::string("one tensor per process; the multi-device form (*_multigpu) is not supported") +
                  (*coalesced ? std::string(", ") + coalesced + " takes several tensors" : std::string()));
}

// The root's tensor in a list of one (BroadcastOptions, ReduceOptions).
void check_root_tensor(std::int64_t root_tensor, const std::string& where) {
  if (root_tensor != 0) {
    throw ad::InvalidArgument(where + ": invalid rootTensor " + std::to_string(root_tensor) +
                              " (the index of the root's tensor in its list of one tensor: 0)");
  }
}

void check_reducible(const c10d::ReduceOp& op, at::ScalarType type, const std::string& where) {
  if (!native_op(op, where) || !native_type(type)) check_fallback(op, type, where);
}

std::int64_t total_bytes(const std::vector<at::Tensor>& tensors) {
  std::int64_t bytes = 0;
  for (const auto& t : tensors) bytes += static_cast<std::int64_t>(t.nbytes());
  return bytes;
}

at::Tensor flat_of(const at::Tensor& t) { return t.contiguous().view(-1); }

const char* op_name(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return "SUM";
    case c10d::ReduceOp::AVG: return "AVG";
    case c10d::ReduceOp::PRODUCT: return "PRODUCT";
    case c10d::ReduceOp::MIN: return "MIN";
    case c10d::ReduceOp::MAX: return "MAX";
    case c10d::ReduceOp::BAND: return "BAND";
    case c10d::ReduceOp::BOR: return "BOR";
    case c10d::ReduceOp::BXOR: return "BXOR";
    default: return "another op";
  }
}

// This backend's own collectives, which the runtime sees as ordinary ones:
// each is marked (Backend::label_next_collective) so that a peer's user call
// of the same op and size is a mismatch, not a silent exchange of these
// numbers for that peer's data (found by a review: an int16 all_reduce
// paired with a peer's all_gather of four int64, which returned the
// descriptor). Names as mismatch messages show them, on every rank.
enum class Step : std::uint8_t {
  ReductionAgreement = 1,
  AllToAllSplits = 2,
  ArenaAgreement = 3,
  ListAgreement = 4,
  PlacedSizes = 5,
};

void name_steps() {
  static std::once_flag named;
  std::call_once(named, [] {
    ad::name_internal_step(static_cast<std::uint8_t>(Step::ReductionAgreement),
                           "the axon backend comparing the ranks' op, dtype, count and root before a reduction it "
                           "combines itself (int8, uint8, int16, bool or complex tensors, or BAND, BOR, BXOR)");
    ad::name_internal_step(static_cast<std::uint8_t>(Step::AllToAllSplits),
                           "the axon backend sharing the ranks' split sizes and dtypes, which begins an all_to_all "
                           "of a tensor list or uneven splits");
    ad::name_internal_step(static_cast<std::uint8_t>(Step::ArenaAgreement),
                           "the axon backend agreeing whether every rank's tensor lies in the group's shared memory "
                           "(an all_reduce in a group with room, place_in_arena, zero_copy_allreduce_hook)");
    ad::name_internal_step(static_cast<std::uint8_t>(Step::ListAgreement),
                           "the axon backend comparing the ranks' tensor lists, which begins allreduce_coalesced "
                           "and allgather_coalesced");
    ad::name_internal_step(static_cast<std::uint8_t>(Step::PlacedSizes),
                           "place_in_arena comparing the ranks' tensor sizes");
  });
}

// The next collective on `b` is `step`; the mark is cleared after it,
// whatever became of it.
class Marked {
 public:
  Marked(ad::Backend& b, Step step) : b_(b) { b_.label_next_collective(static_cast<std::uint8_t>(step)); }
  ~Marked() {
    try {
      b_.label_next_collective(0);
    } catch (...) {  // another thread inside a collective here: then this one made no call either
    }
  }
  Marked(const Marked&) = delete;
  Marked& operator=(const Marked&) = delete;

 private:
  ad::Backend& b_;
};

// Whether a runtime mismatch message says that this rank was in `step`: its
// own call comes first ("...: rank 0: <this rank's call> vs rank 1: <the
// peer's>"). A peer's step is no news about this rank's call: a repeat of
// that mismatch on this rank's next reduction said "this rank called" that
// reduction (a review).
bool own_step(const std::string& what, Step step) {
  const std::size_t at = what.find("internal step " + std::to_string(static_cast<int>(step)) + ":");
  return at != std::string::npos && at < what.find(" vs ");
}

// The reductions that run by gathering and combining here.
enum class Fallback : std::int64_t { AllReduce = 1, Reduce = 2, ReduceScatter = 3 };

const char* name_of(std::int64_t kind) {
  switch (static_cast<Fallback>(kind)) {
    case Fallback::AllReduce: return "allreduce";
    case Fallback::Reduce: return "reduce";
    case Fallback::ReduceScatter: return "reduce_scatter";
  }
  return "another reduction";
}

// A reduction the runtime has no kernel for (a dtype or a bitwise op it does
// not reduce) moves as raw bytes, where the runtime's own check sees only
// byte counts: int8 SUM on one rank and int8 MAX on another would each get a
// different result. So the ranks first compare what each asked for (one
// all_gather of four numbers), and all throw the same CollectiveMismatch
// when they differ. `root` is -1 where the op has none.
void agree_on_fallback(ad::Backend& b, Fallback kind, const at::Tensor& t, const c10d::ReduceOp& op, int root,
                       const std::string& where) {
  const std::int64_t n = b.world_size();
  auto mine = at::empty({4}, at::kLong);
  auto* fields = mine.data_ptr<std::int64_t>();
  fields[0] = static_cast<std::int64_t>(kind);
  fields[1] = static_cast<std::int64_t>(t.scalar_type());
  fields[2] = static_cast<std::int64_t>(op.op_) << 32 | static_cast<std::uint32_t>(root);
  fields[3] = t.numel();
  auto all = at::empty({4 * n}, at::kLong);
  {
    const Marked marked(b, Step::ReductionAgreement);
    axonml::torch::all_gather(b, mine, all);
  }
  const auto* table = all.data_ptr<std::int64_t>();
  auto describe = [&](std::int64_t rank) {
    const std::int64_t* f = table + 4 * rank;
    const auto type = static_cast<at::ScalarType>(f[1]);
    const auto red = static_cast<c10d::ReduceOp::RedOpType>(f[2] >> 32);
    const auto its_root = static_cast<std::int32_t>(f[2] & 0xffffffff);
    std::string text = "rank " + std::to_string(rank) + ": " + name_of(f[0]) + "(" + c10::toString(type) + ", " +
                       std::to_string(f[3]) + ", " + op_name(c10d::ReduceOp(red));
    if (its_root >= 0) text += ", root " + std::to_string(its_root);
    return text + ")";
  };
  for (std::int64_t p = 1; p < n; ++p) {
    if (!std::equal(table + 4 * p, table + 4 * p + 4, table)) {
      throw ad::CollectiveMismatch(where + ": collective mismatch: " + describe(0) + " vs " + describe(p));
    }
  }
}

// Runs one reduction of `t` (natively or by gathering). The runtime's
// mismatch message names the calls as the runtime saw them, where a rank
// reducing without a runtime kernel shows as the all_gather(i64, 4) that
// begins it (agree_on_fallback, its internal step named): then the message
// also says what this rank called.
// The runtime repeats a group's mismatch, word for word, on every later call
// (the group is unusable): such a repeat gets the words its first throw got,
// which said what this rank called then, not what it calls now (found by a
// review: later calls said "this rank called allreduce(Float, ...)" of a
// mismatch between int8 calls). Keyed by the group's endpoint and the
// runtime's text: two groups of the same members word a mismatch alike (a
// review). Cold path; an entry per failed group.
struct Explanations {
  std::mutex mutex;
  std::map<std::pair<const ad::Backend*, std::string>, std::string> first;
};
Explanations& explanations() {
  static auto* kept = new Explanations;  // never destroyed: a group may go after static destructors
  return *kept;
}

std::string explained_once(const ad::Backend& group, const std::string& what,
                           const std::function<std::string()>& explain) {
  Explanations& e = explanations();
  std::lock_guard<std::mutex> lock(e.mutex);
  auto [it, fresh] = e.first.try_emplace({&group, what});
  if (fresh) it->second = what + explain();
  return it->second;
}

// A group's endpoint goes: its address may come back for another group.
void forget_explanations(const ad::Backend* group) noexcept {
  Explanations& e = explanations();
  std::lock_guard<std::mutex> lock(e.mutex);
  std::erase_if(e.first, [group](const auto& entry) { return entry.first.first == group; });
}

// Throws the runtime's mismatch `e`, met in one of this backend's `step`s,
// with what this rank called (`explain`) when this rank was in that step;
// as worded at its first throw when the group repeats a mismatch already
// explained, whichever step met it first (a review). A peer's step gets no
// words of this rank's: its call is in the runtime's words already.
[[noreturn]] void throw_explained(const ad::Backend& b, const ad::CollectiveMismatch& e, Step step,
                                  const std::function<std::string()>& explain) {
  const std::string what = e.what();
  {
    Explanations& kept = explanations();
    std::lock_guard<std::mutex> lock(kept.mutex);
    if (auto it = kept.first.find({&b, what}); it != kept.first.end()) throw ad::CollectiveMismatch(it->second);
  }
  if (!own_step(what, step)) throw ad::CollectiveMismatch(what);
  throw ad::CollectiveMismatch(explained_once(b, what, explain));
}

template <class Fn>
void reducing(const ad::Backend& b, Fallback kind, const at::Tensor& t, const c10d::ReduceOp& op, Fn&& fn) {
  try {
    fn();
  } catch (const ad::CollectiveMismatch& e) {
    throw_explained(b, e, Step::ReductionAgreement, [&] {
      return std::string(" (this rank called ") + name_of(static_cast<std::int64_t>(kind)) + "(" +
             c10::toString(t.scalar_type()) + ", " + std::to_string(t.numel()) + ", " + op_name(op) + "))";
    });
  }
}

// A reduction without a runtime kernel gathers every rank's data and
// combines it here, a piece at a time, so that it needs room for a piece
// from each rank rather than for each rank's whole tensor: at once, a 1 GiB
// uint8 MAX took 4 GiB more at n=2, and a 2 GiB one was killed for lack of
// memory (a review). 8 MiB a rank: pieces long enough that a gather's fixed
// cost does not show.
constexpr std::int64_t kFallbackPieceBytes = std::int64_t{8} << 20;

// Calls fn(piece, stacked) for consecutive pieces of `c` (contiguous), each
// at most kFallbackPieceBytes, with `stacked` contiguous room for `rows`
// pieces of that length, reused from piece to piece.
template <class Fn> void piece_by_piece(at::Tensor& c, std::int64_t rows, Fn&& fn) {
  at::Tensor flat = c.view({-1});
  const std::int64_t count = flat.numel();
  const std::int64_t per = std::min(count, std::max<std::int64_t>(1, kFallbackPieceBytes / c.element_size()));
  const at::Tensor room = at::empty({rows * per}, c.options());
  for (std::int64_t from = 0; from < count; from += per) {
    const std::int64_t length = std::min(per, count - from);
    at::Tensor piece = flat.narrow(0, from, length);
    at::Tensor stacked = room.narrow(0, 0, rows * length).view({rows, length});
    fn(piece, stacked);
  }
}

// t (contiguous) reduced over the group into itself, natively or by
// gathering every rank's tensor and combining in rank order.
void all_reduce_tensor(ad::Backend& b, at::Tensor& c, const c10d::ReduceOp& op, const std::string& where) {
  reducing(b, Fallback::AllReduce, c, op, [&] {
    const auto native = native_op(op, where);
    if (native && native_type(c.scalar_type())) return axonml::torch::all_reduce(b, c, *native);
    agree_on_fallback(b, Fallback::AllReduce, c, op, -1, where);
    piece_by_piece(c, b.world_size(), [&](at::Tensor& piece, at::Tensor& stacked) {
      axonml::torch::all_gather(b, piece, stacked);
      combine(stacked.unbind(0), op, piece);
    });
  });
}

// send (contiguous, world size x c's elements) reduced over the group, c
// receiving this rank's block, natively or by exchanging blocks and
// combining in rank order.
void reduce_scatter_tensor(ad::Backend& b, const at::Tensor& send, at::Tensor& c, const c10d::ReduceOp& op,
                           const std::string& where) {
  reducing(b, Fallback::ReduceScatter, c, op, [&] {
    const auto native = native_op(op, where);
    if (native && native_type(c.scalar_type())) return axonml::torch::reduce_scatter(b, send, c, *native);
    agree_on_fallback(b, Fallback::ReduceScatter, c, op, -1, where);
    auto blocks = at::empty_like(send);
    axonml::torch::all_to_all(b, send, blocks);
    combine(blocks.view({b.world_size(), -1}).unbind(0), op, c);
  });
}

}  // namespace

namespace {
// Every live ProcessGroupAxon, for finish_all_pending().
// Never destroyed: a C++ program may hold a group in a global, whose
// destructor runs among the static destructors, possibly after these would
// have run (the set's was, and the group's erase corrupted the heap at exit;
// a review).
std::mutex& live_groups_mutex() {
  static auto* mutex = new std::mutex;
  return *mutex;
}
std::set<ProcessGroupAxon*>& live_groups() {
  static auto* groups = new std::set<ProcessGroupAxon*>;
  return *groups;
}
// The threads of destroyed groups that were destroyed from one of their own
// ops (see ~ProcessGroupAxon), left running for the process's life; guarded
// by live_groups_mutex(). finish_all_pending() waits for them as for the
// live groups' threads: one still dropping that op's Python objects when
// the interpreter ends is ended by it, and that ended the process
// ("terminate called"; found when the review's case was rerun).
std::vector<CommThread*>& orphaned_threads() {
  static auto* threads = new std::vector<CommThread*>;
  return *threads;
}

// The world torch.distributed has now (ProcessGroupAxon::world_begins): a
// group made in it belongs to it.
std::atomic<std::uint64_t> current_world{0};

std::uint64_t next_group_serial() {
  static std::atomic<std::uint64_t> made{0};
  return made.fetch_add(1, std::memory_order_relaxed) + 1;
}

// The first failure from its peers (a PeerFailure: a member that exited, a
// timeout, an abort) that an op or the set-up of an axon group of this
// process met. A rank that goes on to leave another group while members
// wait for it there tells them this cause: they were told only that it left
// "in a collective it never called" (a review: rank 1 killed, rank 2
// waiting in a recv from it, rank 0 waiting for rank 2 in new_group([0, 2])
// was never told of rank 1). Dropped when any op of this process completes
// after it: a failure the program handled and went on from is no cause of
// what it does later (the next review found a caught timeout quoted long
// after). Not when its group is destroyed: PyTorch's
// destroy_process_group() drops the default group first, before the
// subgroups whose members the cause is for.
struct FailureSeen {
  std::uint64_t group;  // serial_ of the group that met it
  std::string reason;   // what() of the error
};
std::mutex& failure_seen_mutex() {
  static auto* mutex = new std::mutex;
  return *mutex;
}
std::optional<FailureSeen>& failure_seen() {
  static auto* seen = new std::optional<FailureSeen>;
  return *seen;
}

// Whether failure_seen() holds one: read by every op that completes.
std::atomic<bool> any_failure_seen{false};

// How an op of group `group` ended (nullptr: it completed).
void note_outcome(std::uint64_t group, const std::exception* error) noexcept {
  if (error == nullptr) {
    if (!any_failure_seen.load(std::memory_order_relaxed)) return;
    std::lock_guard<std::mutex> lock(failure_seen_mutex());
    failure_seen().reset();
    any_failure_seen.store(false, std::memory_order_relaxed);
    return;
  }
  if (dynamic_cast<const ad::PeerFailure*>(error) == nullptr) return;  // this rank's own input: not a cause
  try {
    std::lock_guard<std::mutex> lock(failure_seen_mutex());
    if (!failure_seen()) failure_seen() = FailureSeen{group, error->what()};
    any_failure_seen.store(true, std::memory_order_relaxed);
  } catch (const std::exception&) {
    // Out of memory: the leave's message then gives no cause.
  }
}

// A reason as a peer reads it after "rank R aborted: ": without the "rank R:"
// or "rank R (global rank G):" this rank's own message begins with, nor
// "job aborted: ", and cut before words that speak of "this rank" (the
// reader would take it for itself).
std::string cause_for_peers(std::string_view reason) {
  if (reason.starts_with("rank ")) {
    const std::size_t colon = reason.find(": ");
    const std::size_t space = reason.find(' ', 5);
    const bool plain = colon != std::string_view::npos && colon == space - 1;                // "rank 2: "
    constexpr std::string_view kGlobal = " (global rank ";
    const bool global = colon != std::string_view::npos && space < colon && reason.substr(space).starts_with(kGlobal) &&
                        reason[colon - 1] == ')' &&
                        reason.find(' ', space + kGlobal.size()) > colon;  // "rank 1 (global rank 2): "
    if (plain || global) reason.remove_prefix(colon + 2);
  }
  constexpr std::string_view kAborted = "job aborted: ";
  if (reason.starts_with(kAborted)) reason.remove_prefix(kAborted.size());
  if (const std::size_t self = reason.find(" while this rank "); self != std::string_view::npos) {
    reason = reason.substr(0, self);
  }
  return std::string(reason);
}
}  // namespace

ProcessGroupAxon::ProcessGroupAxon(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                   std::chrono::milliseconds timeout, std::vector<int> global_ranks,
                                   std::optional<std::size_t> shared_bytes, int job_size)
    : c10d::ProcessGroup(rank, size),
      fork_generation_(ad::shm::WaitContext::current_fork_generation.load(std::memory_order_relaxed)),
      owner_pid_(::getpid()),
      global_ranks_(std::move(global_ranks)),
      serial_(next_group_serial()),
      world_(current_world.load(std::memory_order_relaxed)),
      timeout_(timeout) {
  name_steps();
  if (global_ranks_.empty()) {
    for (int r = 0; r < size; ++r) global_ranks_.push_back(r);
    default_group_store_ = store;
    subgroup_ = false;
  }
  // The checks of this rank's own arguments and environment come before
  // the rendezvous, so that a bad value fails here; the peers, who will
  // wait for this rank's entry in the store, are told why it will not come
  // (they waited out the group's timeout, naming nothing; found by a review).
  std::string timeout_name = "the group's timeout";
  const std::chrono::milliseconds group_timeout = timeout;  // the set-up's, below
  const bool store_lives_here = store_lives_in_process_of(
      store, rank >= 0 && rank < static_cast<int>(global_ranks_.size()) ? global_ranks_[static_cast<std::size_t>(rank)]
                                                                         : -1);
  std::size_t room = 0;
  try {
    if (timeout.count() < 0) {
      throw ad::InvalidArgument("axon process group: a timeout of " + std::to_string(timeout.count()) +
                                " ms is negative");
    }
    if (static_cast<int>(global_ranks_.size()) != size) {
      throw ad::InvalidArgument("axon process group of " + std::to_string(size) + " ranks: " +
                                std::to_string(global_ranks_.size()) + " global ranks given " +
                                describe_global_ranks() + ", but there must be one per rank");
    }
    // new_group([0, 0, 1]) reaches here (PyTorch does not check): one
    // process would be two members, and the others waited out the timeout
    // for a host entry it never wrote (found by a review).
    std::vector<int> sorted = global_ranks_;
    std::sort(sorted.begin(), sorted.end());
    if (const auto twice = std::adjacent_find(sorted.begin(), sorted.end()); twice != sorted.end()) {
      throw ad::InvalidArgument("axon process group of global ranks " + describe_global_ranks() + ": rank " +
                                std::to_string(*twice) + " is listed twice (each process is one member)");
    }
    // The logging variables were read leniently by the first log line, and
    // AXON_KERNEL is read at the first reduction, on the communication thread.
    ad::log::reload_from_environment();
    ad::kernels::selected_isa();
    inline_bytes_ =
        ad::env::integer("AXON_TORCH_INLINE_BYTES", 0, std::int64_t{1} << 50).value_or(kDefaultInlineBytes);
    room = shared_bytes ? *shared_bytes
                        : static_cast<std::size_t>(ad::env::integer("AXON_TORCH_SHARED_MB", 0, 1 << 24).value_or(0))
                              << 20;
    // AXON_TIMEOUT (axon-launch --timeout sets it) bounds every wait of the
    // job's ranks, a PyTorch group's too: the shorter of it and the group's
    // timeout applies (found by a review: --timeout 3 left a torch program
    // waiting PyTorch's 30 minutes). Read before the rendezvous, as above.
    if (const auto seconds = ad::env::timeout_seconds("AXON_TIMEOUT")) {
      const std::chrono::milliseconds cap = ad::env::timeout_milliseconds(*seconds);
      if (timeout.count() <= 0 || cap < timeout) {
        timeout = cap;
        timeout_ = cap;
        timeout_name = "AXON_TIMEOUT, shorter than the group's timeout";
      }
    }
    // Before the rendezvous, as the checks above: a thread that cannot start
    // raised a bare "Resource temporarily unavailable" once the peers had
    // set up the group with this rank (a review, under ulimit -u).
    start_threads();
    for (const char* op : {"allreduce", "allreduce_coalesced", "broadcast", "reduce", "allgather", "_allgather_base",
                           "allgather_coalesced", "gather", "scatter", "reduce_scatter", "_reduce_scatter_base",
                           "alltoall_base", "alltoall", "send", "recv", "place_in_arena", "allreduce_in_arena"}) {
      op_sites_.emplace_back(op, make_op_site(op));
    }
  } catch (const std::exception& e) {
    try {
      C10dStore kv(store);
      ad::StoreBackend::give_up(kv, rank, size, global_ranks_, e.what(), store_lives_here);
    } catch (...) {  // the store failing too: this rank's own error is the one to raise
    }
    throw;
  }
  std::optional<C10dStore> kv;  // made below, where a store that fails is named
  ad::StoreOptions options;
  options.timeout = timeout;
  options.timeout_name = timeout_name;
  options.while_waiting = [this, rank] {
    // Named as the set-up names its ranks (by their global rank), which then
    // adds no name of its own to the peers' reason.
    check_interrupts_while(
        [&] { return "rank " + std::to_string(global_ranks_[static_cast<std::size_t>(rank)]) + ":"; },
        [&] { return "waited for its peers to set up the axon group of global ranks " + describe_global_ranks(); });
    give_up_if_a_process_exited();
  };
  // AXON_TIMEOUT bounds the ops; the set-up waits for peers still on their
  // way (importing torch takes seconds, longer on a loaded machine) as long as
  // PyTorch's own rendezvous does, as a C++ rank's --timeout does not count
  // start-up. A peer that exits or fails its set-up is still reported at once.
  options.setup_timeout = group_timeout;
  options.store_lives_here = store_lives_here;
  options.setup_timeout_name = "the group's timeout";
  options.group = "global ranks " + describe_global_ranks();
  // The default group is the job: its ranks are named by themselves, and
  // messages name no group. A subgroup's members by their ranks in the job.
  if (subgroup_) options.rank_names = global_ranks_;
  options.job_size = job_size;
  // No room for subgroups: a PyTorch subgroup makes an arena of its own. (A
  // C++ arena's room for three, five world areas, cost 160 MiB a group at
  // 64 ranks here.)
  options.arena_bytes = ad::shm::default_arena_bytes(size, 0, /*subgroups_alive=*/0);
  options.shared_bytes = room;
  if (room > 0) {
    options.size_remedy = "ask for less room for placed tensors than the " + ad::format_bytes(room) +
                          " it includes (axonml_torch.Options(shared_mb=) or AXON_TORCH_SHARED_MB)";
  } else {
    // Not the C++ StoreOptions a Python user cannot set (a review).
    options.size_remedy = "run fewer ranks (a group of " + std::to_string(size) + " ranks needs this much)";
  }
  try {
    try {
      kv.emplace(store);
      backend_ = ad::StoreBackend::create(*kv, rank, size, options);
    } catch (const ad::Error&) {
      throw;
    } catch (const std::bad_alloc&) {
      throw;
    } catch (const std::exception& e) {
      // The store itself failed outside a wait (publishing this rank's
      // entry, say): under env:// and tcp:// it lives in global rank 0's
      // process, gone. A member that went (give_up_if_a_process_exited), or
      // else the process that took the store with it, is the reason to give.
      const auto gone = process_gone_with_the_store([this] { give_up_if_a_process_exited(); });
      const std::string where = "rank " + std::to_string(rank) + " (global rank " +
                                std::to_string(global_ranks_[static_cast<std::size_t>(rank)]) + "): ";
      const std::string failed = "the store failed (" + std::string(e.what()) +
                                 ") while this rank set up the axon group of global ranks " + describe_global_ranks();
      if (gone) throw ad::PeerFailure(where + gone->second + ", and " + failed);
      throw ad::Error(where + failed + "; under env:// and tcp:// the store lives in global rank 0's process, so "
                      "that process may have failed or exited: see its error");
    }
  } catch (const Interrupted& e) {
    // Ctrl-C to this rank alone: the cause of its peers' failure, which
    // the launcher's summary names.
    const int self = global_ranks_[static_cast<std::size_t>(rank)];
    if (ad::shm::started_by_launcher_as(self)) ad::shm::report_group_failure_to_launcher(self, e.what());
    throw;
  } catch (const ad::PeerFailure& e) {  // a Timeout too
    note_outcome(serial_, &e);
    // axon-launch's summary gives the reason, as for a group that fails
    // later (it named only the first rank to exit, a survivor; a review).
    // Not for this rank's own bad input, which its own error names (and a
    // program may catch, trying another backend). A member that went before
    // the group was set up is blamed, as one that leaves a group later is
    // (the summary named a member that waited for it; a review).
    ad::shm::report_group_failure_to_launcher(member_gone_in(e.what()), e.what());
    throw;
  }
  // Rank 0 sized the arena every rank maps, so every rank reads the same.
  shared_room_ = backend_->arena_bytes() > options.arena_bytes;
  std::lock_guard<std::mutex> lock(live_groups_mutex());
  live_groups().insert(this);
}


void ProcessGroupAxon::start_threads() {
  try {
    auto on_outcome = [serial = serial_](const std::exception* e) { note_outcome(serial, e); };
    thread_ = std::make_unique<CommThread>(on_outcome);
    send_thread_ = std::make_unique<CommThread>(on_outcome);
    recv_thread_ = std::make_unique<CommThread>(on_outcome);
  } catch (const std::system_error& e) {
    std::string limit;
    if (rlimit r{}; ::getrlimit(RLIMIT_NPROC, &r) == 0 && r.rlim_cur != RLIM_INFINITY) {
      limit = " (ulimit -u is " + std::to_string(r.rlim_cur) + ")";
    }
    throw ad::Error("axon process group of global ranks " + describe_global_ranks() + " on global rank " +
                    std::to_string(global_ranks_[static_cast<std::size_t>(getRank())]) +
                    ": cannot start its three communication threads (" + e.what() +
                    "): the limit on this user's processes and threads" + limit +
                    " or the memory is spent; raise it, or destroy groups no longer used");
  }
}

// Queued collectives and sends run to the end, as Gloo's do. A receive still
// waiting afterwards may wait for ever (nothing in this rank will send it
// now): it is cancelled by marking the group's shared memory failed, which
// also ends the peers' ops on this group with an error naming this rank,
// rather than leaving every rank to wait out the group's timeout.
// A thread whose run token the caller holds (the caller is in one of its
// ops, or their callbacks: the last reference to the group dropped there)
// cannot be waited for: it would wait for itself, for ever (found by a
// review). Its queue runs here instead, first: the other threads' ops may
// need what is queued behind the caller's (a send's callback that dropped
// the group, with a second send queued and an all_reduce on the collective
// thread that the peer reaches only after receiving both; the review of the
// change). The op the caller is in ends after.
void ProcessGroupAxon::finish_pending() {
  for (CommThread* thread : {thread_.get(), send_thread_.get()}) {
    if (thread->token_held_here()) thread->run_queued_here();
  }
  for (CommThread* thread : {thread_.get(), send_thread_.get()}) {
    if (!thread->token_held_here()) thread->wait_idle();
  }
  // Not idle(): a receive that has returned, whose thread is still dropping
  // its tensors (that may wait for the GIL this thread's caller holds), was
  // taken for one still waiting, and its peer's next op on the group failed
  // (found by a review: a send/recv exchange, then the program's end). On
  // the receive thread itself the caller's own op no longer counts.
  if (recv_thread_->has_unfinished_ops()) {
    backend_->abort("it destroyed the process group while a receive (recv or irecv) still waited for a message");
  }
  if (recv_thread_->token_held_here()) {
    recv_thread_->run_queued_here();
  } else {
    recv_thread_->wait_idle();
  }
}

// Not under live_groups_mutex() while waiting: an op's callback that drops
// its group's last reference runs the destructor, which takes that mutex,
// on the very thread waited for (a hang at the program's end; the review
// of the change). Each group is kept alive by a reference of its own
// instead, taken only while it has others (one whose count reached zero is
// being destroyed, and finishes its ops itself).
void ProcessGroupAxon::finish_all_pending() {
  std::vector<c10::intrusive_ptr<ProcessGroupAxon>> groups;
  {
    std::lock_guard<std::mutex> lock(live_groups_mutex());  // no group is freed while a reference is taken
    for (ProcessGroupAxon* group : live_groups()) {
      if (group->in_forked_child() || c10::raw::intrusive_ptr::use_count(group) == 0) continue;
      c10::raw::weak_intrusive_ptr::incref(group);
      if (auto kept = c10::weak_intrusive_ptr<ProcessGroupAxon>::reclaim(group).lock()) groups.push_back(std::move(kept));
    }
  }
  for (const auto& group : groups) group->finish_pending();
  std::vector<CommThread*> orphans;
  {
    std::lock_guard<std::mutex> lock(live_groups_mutex());
    orphans = orphaned_threads();
  }
  for (CommThread* thread : orphans) {
    if (!thread->token_held_here()) thread->wait_idle();
  }
  groups.clear();  // may destroy a group, which takes live_groups_mutex()
}

namespace {
std::atomic<bool>& program_ending() {
  static std::atomic<bool> ending{false};
  return ending;
}

// What the program ends on ("an uncaught ValueError: bad shape"), as the
// Python module saw it; written once, before program_ending() is set, and
// never destroyed (a group may be destroyed after the statics at exit).
std::string& program_end_cause() {
  static auto* cause = new std::string;
  return *cause;
}

// "an uncaught ValueError: bad shape", the text cut to a line's worth: the
// abort's reason keeps 1015 characters, and the group and the ranks that
// wait come after it.
std::string uncaught_exception(const std::string& type, const std::string& text) {
  constexpr std::size_t kMostOfText = 120;
  std::string line;
  for (const char c : cause_for_peers(text)) {  // whitespace runs as one space
    const bool space = std::isspace(static_cast<unsigned char>(c)) != 0;
    if (!space) {
      line += c;
    } else if (!line.empty() && line.back() != ' ') {
      line += ' ';
    }
  }
  while (!line.empty() && line.back() == ' ') line.pop_back();
  if (line.size() > kMostOfText) line = line.substr(0, kMostOfText - 3) + "...";
  return "an uncaught " + type + (line.empty() ? "" : ": " + line);
}
}  // namespace

void ProcessGroupAxon::program_ends(const std::string& uncaught_type, const std::string& uncaught_text) {
  // Written before program_ending() is set, which readers check first; by
  // the first call only (the Python module's atexit function).
  if (!program_ending().load() && !uncaught_type.empty()) {
    program_end_cause() = uncaught_exception(uncaught_type, uncaught_text);
  }
  program_ending().store(true);
  // After Ctrl-C ended a wait whose op still runs (for a peer that may not
  // come within the group's timeout), the program's end does not wait for
  // that op: the groups with ops still pending are aborted, which ends them
  // here and names this rank to the peers. (The program stayed until the
  // peer came, 15 s, and further Ctrl-Cs did nothing; a review.)
  if (interrupted_ops_pending()) {
    std::lock_guard<std::mutex> lock(live_groups_mutex());
    for (ProcessGroupAxon* group : live_groups()) {
      if (group->in_forked_child()) continue;
      const bool pending = group->thread_->has_unfinished_ops() || group->send_thread_->has_unfinished_ops() ||
                           group->recv_thread_->has_unfinished_ops();
      if (pending) {
        group->backend_->abort("its program ended after a Python signal handler (Ctrl-C's KeyboardInterrupt, most "
                               "often) interrupted a wait, with an op of the group still pending");
      }
    }
  }
  finish_all_pending();
  // Abort for the ranks left waiting before saying this rank left: a peer
  // that sees `left` first would report only that (found when the suite ran
  // under load), losing the collective it waits for and who else waits.
  release_ranks_left_waiting_everywhere();
  std::lock_guard<std::mutex> lock(live_groups_mutex());
  for (ProcessGroupAxon* group : live_groups()) group->leave_for_good();  // nothing in a forked child
}

// Why: rank 0 stays up to 5 s at the end of its program, keeping its store
// up for the others (close_store_together). A peer waiting meanwhile for a
// message rank 0 never sent used to wait all that time, watching a process
// that was still alive.
void ProcessGroupAxon::leave_for_good() noexcept {
  if (in_forked_child()) return;
  try {
    // Why, for the peers that come to wait for this rank after it has gone
    // (release_ranks_left_waiting() tells those already waiting).
    backend_->leave_for_good(program_ending().load() && !program_end_cause().empty()
                                 ? "its program ended on " + program_end_cause()
                                 : std::string());
  } catch (const std::exception&) {
  }
}

void ProcessGroupAxon::release_ranks_left_waiting_everywhere() noexcept {
  std::lock_guard<std::mutex> lock(live_groups_mutex());
  for (ProcessGroupAxon* group : live_groups()) group->release_ranks_left_waiting();
}

// The runtime's count of forks (shm::WaitContext), as the group's own
// shared memory tells a forked child from the rank.
bool ProcessGroupAxon::in_forked_child() const { return ad::shm::WaitContext::forked_since(fork_generation_); }

// Why: a DataLoader worker's send waited forever for the group's send
// thread, which a forked child does not have; an all_reduce did too, unless
// it ran on the caller's thread and the shared memory refused it (a review).
void ProcessGroupAxon::refuse_in_forked_child(c10d::OpType type) const {
  if (!in_forked_child()) return;
  std::string op = c10d::opTypeToString(type);
  for (char& c : op) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  refuse_in_forked_child(op);
}

void ProcessGroupAxon::refuse_in_forked_child(const std::string& op) const {
  if (!in_forked_child()) return;
  throw ad::InvalidArgument(where_of(op.c_str()).text() + ": this process (pid " + std::to_string(::getpid()) +
                            ") was forked from global rank " +
                            std::to_string(global_ranks_[static_cast<std::size_t>(getRank())]) +
                            "'s process (pid " + std::to_string(owner_pid_) +
                            ") after the group was made; only that process takes part in the group's ops (a "
                            "forked child may read shared tensors, and must not call collectives, sends or "
                            "receives); nothing was done");
}

// Joining the threads may take as long as the pending ops, and their tensors
// may need Python's GIL (torch/without_gil.hpp).
ProcessGroupAxon::~ProcessGroupAxon() {
  {
    std::lock_guard<std::mutex> lock(live_groups_mutex());
    live_groups().erase(this);
    // A thread this one is running an op of (see finish_pending) cannot be
    // joined: it is left, idle once that op returns, for the process's life.
    // Listed in the same step as the group leaves the live ones, so that the
    // program's end never misses it (the review of the change).
    if (!in_forked_child()) {
      for (const auto* thread : {&thread_, &send_thread_, &recv_thread_}) {
        if ((*thread)->token_held_here()) orphaned_threads().push_back(thread->get());
      }
    }
  }
  forget_explanations(backend_.get());
  if (in_forked_child()) {
    // The threads were not forked: joining them would wait for nothing that
    // exists. Left as they are; the rank's part stays with its parent.
    (void)thread_.release();
    (void)send_thread_.release();
    (void)recv_thread_.release();
    // Nor the store: rank 0's TCPStore, destroyed here, stopped the server
    // thread its parent runs for every rank (their shared control pipe), and
    // crashed the child; every rank then hung in the store (a review: a
    // DataLoader worker's destroy_process_group). Kept, it is never destroyed here.
    (void)default_group_store_.release();
    return;
  }
  wait_without_gil([this] {
    finish_pending();
    for (auto* thread : {&thread_, &send_thread_, &recv_thread_}) {
      if ((*thread)->token_held_here()) {
        (void)thread->release();  // in orphaned_threads() since the start
      } else {
        thread->reset();
      }
    }
    release_ranks_left_waiting();  // before leaving: program_ends() says why
    leave_for_good();
    close_store_together();
  });
}

// Why: a rank whose program ends with an exception leaves its peers in the
// collective it never reached. They used to learn of it only when its
// process exited, after close_store_together()'s wait for them to count in,
// which they never do from inside that collective: 5.2 s every time.
void ProcessGroupAxon::release_ranks_left_waiting() noexcept {
  if (in_forked_child()) return;
  try {
    const std::vector<int> waiting = backend_->ranks_waiting_for_this_rank();
    if (waiting.empty()) return;
    std::vector<int> global;
    for (int member : waiting) global.push_back(global_ranks_[static_cast<std::size_t>(member)]);
    std::optional<FailureSeen> cause;
    {
      std::lock_guard<std::mutex> lock(failure_seen_mutex());
      if (failure_seen() && failure_seen()->group != serial_) cause = failure_seen();
    }
    const std::string left = "it left the group of global ranks " + describe_global_ranks();
    // Why the program ended, when it ended on an exception: a peer of a
    // rank that ended on Ctrl-C's KeyboardInterrupt, or on an error of its
    // own, read only that it left, as if it had misbehaved.
    const std::string how = program_ending().load() && !program_end_cause().empty()
                                ? " (its program ended on " + program_end_cause() + ")"
                                : " (destroy_process_group, or the end of its program)";
    // The cause first: the reason keeps 1015 characters (ArenaHeader), and
    // group lists of many ranks come after it.
    backend_->abort(cause ? "after another of its groups failed (" + cause_for_peers(cause->reason) + "), " + left +
                                " while global rank(s) " + ad::joined_ranks(global) + " waited for it"
                          : left + how + " while global rank(s) " + ad::joined_ranks(global) +
                                " waited for it in a collective it never called");
  } catch (const std::exception&) {
    // Aborting is best effort: the peers still see this process exit.
  }
}

namespace {

// Whether nothing listens at host:port any more (a connection is refused).
// Rank 0's store closes its clients' connections a moment before its
// listening socket; a connection made in between is accepted by the kernel
// and then reset, which failed a re-init's TCPStore ("Connection reset by
// peer", 1 run in 5 of tests/torch/test_reinit.py's late case).
bool refused_at(const std::string& host, std::uint16_t port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return true;
  bool refused = true;
  for (addrinfo* a = found; a != nullptr && refused; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      refused = false;
    } else if (errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int error = 0;
      socklen_t length = sizeof(error);
      if (::poll(&p, 1, 50) <= 0 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0 || error == 0) {
        refused = false;  // connected, or no answer yet: something may still listen
      }
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return refused;
}

// Set in the default group's TCPStore itself (no prefix) as its ranks close
// it: a store that answers without it at the same port is a new one.
constexpr const char* kClosedStoreMarker = "axon/closed_store";

// Whether the store this group closed no longer listens at host:port:
// nothing does (refused), or a store that lacks kClosedStoreMarker answers
// (rank 0 listens again, for a new group). The old one, still closing,
// answers with the marker, or accepts and then resets the connection, or
// does not answer (found by a fresh-clone make test: 200 ms of waiting for
// a refusal did not cover a loaded rank 0, and the re-init's TCPStore met
// the old listener: "Connection reset by peer").
bool closed_store_gone(const std::string& host, std::uint16_t port) {
  if (refused_at(host, port)) return true;
  try {
    c10d::TCPStoreOptions options;
    options.port = port;
    options.isServer = false;
    options.waitWorkers = false;  // a probe, not one of the new store's workers
    // Whole seconds: 1.13's client counts its connect timeout in them, and
    // 500 ms became 0 s, which failed every probe at once with a c10d ERROR
    // line, so a rank whose rank 0 listened again already (spawn, re-init
    // without a barrier) waited all of kCloseWait, logging thousands of them
    // (found by a review).
    options.timeout = std::chrono::seconds(1);
    c10d::TCPStore probe(host, options);
    return !probe.check({kClosedStoreMarker});
  } catch (const std::exception&) {
    return false;  // reset, or no answer: the old one, going
  }
}

}  // namespace

// Why: PyTorch 1.13's new_group ends with a barrier in the store that every
// rank of the job polls every 10 ms. Rank 0 may leave it, call
// destroy_process_group() and take the store it hosts down with it while a
// rank outside the new group has yet to see the barrier complete; that rank
// then fails with "Broken pipe". Gloo's slower destroy (30-40 ms) mostly hides
// the race; this group's takes about 1 ms, and a 4-rank new_group + destroy
// failed 3 runs of 3. So every rank counts itself in as its default group
// goes, and rank 0 waits until all have (bounded: a rank may go on without
// destroying, or have exited; kCloseWait or the group's timeout, if
// shorter).
//
// That wait keeps rank 0's store up, so the other ranks wait too, until it
// is down: a rank that returned at once and called init_process_group()
// again reached the old store, still up while rank 0 waited for a late rank,
// and read the old group's keys there ("cannot open rank 0's arena
// /proc/<pid>/fd/20"; 4 of 4 runs with one rank 1 s late to destroy, where
// Gloo, whose rank 0 does not wait, passed). Once all have counted in, rank
// 0 returns and drops the store at once: the others wait for their
// connection to break, at most kServerGoneWait more (a program may hold
// rank 0's store itself), and then for its listening socket to close
// (closed_store_gone). Nothing here may throw: a store already gone is no error.
void ProcessGroupAxon::close_store_together() {
  if (!closes_store_together_ || !default_group_store_ || getSize() == 1) return;
  constexpr auto kCloseWait = std::chrono::seconds(5);
  constexpr auto kServerGoneWait = std::chrono::seconds(1);
  const std::string key = "axon/closed";
  c10d::TCPStore* tcp = tcp_store(default_group_store_);
  const bool wait_for_server = getRank() != 0 && tcp != nullptr;
  // Past the program's end no init_process_group() follows, so the others'
  // destroy is no reason to stay: the store needs this rank only as rank 0.
  if (getRank() != 0 && (!wait_for_server || program_ending().load())) {
    try {
      default_group_store_->add(key, 1);
    } catch (const std::exception&) {
    }
    return;
  }
  auto limit = std::chrono::milliseconds(kCloseWait);
  if (timeout_.count() > 0) limit = std::min(limit, timeout_);
  auto deadline = std::chrono::steady_clock::now() + limit;
  auto pause = std::chrono::microseconds(200);
  auto exited = [this](int rank) {
    for (const ad::ExitedPeer& peer : backend_->exited_peers()) {
      if (peer.rank == rank) return true;
    }
    return false;
  };
  bool all_in = false;
  bool store_broke = false;
  try {
    std::int64_t closed = default_group_store_->add(key, 1);
    if (tcp != nullptr) tcp->add(kClosedStoreMarker, 1);
    // A rank that has exited counts itself in no more (or did, before it went).
    while (std::chrono::steady_clock::now() < deadline) {
      // A peer that enters a collective now, in this group or another this
      // process is leaving with it, would never count in.
      release_ranks_left_waiting();
      if (program_ending().load()) release_ranks_left_waiting_everywhere();
      if (!all_in && closed + static_cast<std::int64_t>(backend_->exited_peers().size()) >= getSize()) {
        if (getRank() == 0) return;
        all_in = true;
        deadline = std::min(deadline, std::chrono::steady_clock::now() + kServerGoneWait);
      }
      if (all_in && exited(0)) return;
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(10'000));
      closed = default_group_store_->add(key, 0);  // throws once rank 0's store is down
    }
  } catch (const std::exception&) {
    // The store is gone (its host has closed it) or failing: nothing to wait for.
    store_broke = true;
  }
  // A store still answering after kServerGoneWait is held by the program
  // (rank 0's listener stays with it): nothing will close. A store that broke
  // before this rank saw every rank in was most often closed by rank 0, who
  // saw them all first: its listener may be open still (a rank that returned
  // at once met it in its next init_process_group: "Connection reset by
  // peer", 3 runs in 15 of a review's spawn re-init loop).
  if (getRank() == 0 || !store_broke) return;
  // Our connection has broken (or the wait ran out): wait until rank 0's
  // listening socket is gone too, or a new store listens in its place.
  // Most often it closes within milliseconds of the connection, which plain
  // connects see; a store is asked for the marker only after kPlainWatch. A
  // c10d client that meets a listener closing under it retries the refused
  // connect until its timeout and logs an ERROR ("The client socket has
  // timed out after 0s"), which a clean shutdown must not print (found by a
  // review: 3 runs of 6 at n=4, asking from the start).
  constexpr auto kPlainWatch = std::chrono::milliseconds(300);
  const auto watch_start = std::chrono::steady_clock::now();
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    if (now - watch_start >= kCloseWait) return;
    if (now - watch_start < kPlainWatch ? refused_at(tcp->getHost(), tcp->getPort())
                                        : closed_store_gone(tcp->getHost(), tcp->getPort())) {
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// Why: a C++ program's group made without global_ranks (the documented
// way) waited here too, though the program holds its store: every rank but
// 0 took 1 s to destroy it, waiting for rank 0's store to close, and rank
// 0's next group waited for them (a review: 100 groups made and destroyed
// took 100 s).
void ProcessGroupAxon::close_store_together_as_it_goes() { closes_store_together_ = true; }

c10::intrusive_ptr<c10d::ProcessGroup> ProcessGroupAxon::create(const c10::intrusive_ptr<c10d::Store>& store,
                                                                int rank, int size,
                                                                std::chrono::milliseconds timeout,
                                                                std::vector<int> global_ranks,
                                                                std::optional<std::size_t> shared_bytes,
                                                                int job_size) {
  return c10::make_intrusive<ProcessGroupAxon>(store, rank, size, timeout, std::move(global_ranks), shared_bytes,
                                               job_size);
}

// "axon allreduce on rank 1 of 2"; in a subgroup "(global rank 2)" and the
// group too: roots and peers are given as ranks in the group, but the user
// knows the process by its rank in the job, and new_group([0, 1]) of four
// ranks is not the job even where the two numberings agree.
ProcessGroupAxon::OpSite ProcessGroupAxon::where_of(const char* op) const {
  // Made by the constructor and read without a lock: a process forked while
  // a thread held one would have waited for ever here (a review).
  for (const auto& [name, site] : op_sites_) {
    if (name == op) return site;
  }
  return make_op_site(op);
}

ProcessGroupAxon::OpSite ProcessGroupAxon::make_op_site(const char* op) const {
  std::string where = std::string("axon ") + op + " on rank " + std::to_string(getRank()) + " of " +
                      std::to_string(getSize());
  if (subgroup_) {
    const int global = global_ranks_[static_cast<std::size_t>(getRank())];
    if (global != getRank()) where += " (global rank " + std::to_string(global) + ")";
    where += " in the group of global ranks " + describe_global_ranks();
  }
  return OpSite(std::make_shared<const std::string>(std::move(where)));
}

std::string ProcessGroupAxon::describe_global_ranks() const { return ad::bracketed_ranks(global_ranks_); }

// Called by the set-up of this group, before it is live: the others are
// those of live_groups(), whose mutex keeps them alive meanwhile. Only a
// member of this group can hold up its set-up.
void ProcessGroupAxon::note_failure_elsewhere(const std::string& reason) {
  std::lock_guard<std::mutex> lock(failure_seen_mutex());
  if (!failure_seen()) failure_seen() = FailureSeen{0, reason};  // 0: no group's serial
  any_failure_seen.store(true, std::memory_order_relaxed);
}

// The members of the current world's default group that have left it for
// good, as (global rank, description). Under live_groups_mutex(). An older
// default group the program still holds, which every other member has
// left, must not count (a review: it failed a later world's new_group
// naming live ranks); nor one of the current world made without
// global_ranks by other means than init_process_group: the newest counts.
std::vector<std::pair<int, std::string>> ProcessGroupAxon::left_default_group_locked() {
  std::vector<std::pair<int, std::string>> left;
  const std::uint64_t world = current_world.load(std::memory_order_relaxed);
  const ProcessGroupAxon* newest = nullptr;
  for (const ProcessGroupAxon* group : live_groups()) {
    if (group->world_ != world || group->subgroup_ || group->in_forked_child()) continue;
    if (newest == nullptr || group->serial_ > newest->serial_) newest = group;
  }
  for (const ProcessGroupAxon* group : {newest}) {
    if (group == nullptr) continue;
    for (const int rank : group->backend_->left_peers()) {
      const int global = group->global_ranks_[static_cast<std::size_t>(rank)];
      const std::string why = group->backend_->left_reason(rank);  // "its program ended on an uncaught ..."
      left.emplace_back(global, "global rank " + std::to_string(global) + " left the job's default group (" +
                                    (why.empty() ? "its program ended, or it called destroy_process_group()" : why) +
                                    ")");
    }
  }
  return left;
}

int ProcessGroupAxon::member_gone_in(const std::string& reason) const {
  // Global ranks are the job's only in a process axon-launch started as its rank.
  const int self = global_ranks_[static_cast<std::size_t>(getRank())];
  if (!ad::shm::started_by_launcher_as(self)) return -1;
  const auto number_at = [&](std::size_t at) {
    int global = -1;
    const auto [end, error] = std::from_chars(reason.data() + at, reason.data() + reason.size(), global);
    return error == std::errc() ? global : -1;
  };
  // The words of give_up_if_a_process_exited(), here or (through the
  // store) a peer's: the first member it names.
  constexpr std::string_view kGone = ": its member global rank ";
  if (const std::size_t at = reason.find(kGone); at != std::string::npos) return number_at(at + kGone.size());
  // A member's set-up that a signal handler interrupted ("rank 0:
  // interrupted (a Python signal handler raised ..."): Ctrl-C to that one
  // rank (the summary blamed the peer it left waiting when that peer's
  // exit was reaped first, 3 runs of 14; a review).
  const std::string interrupted = ":" + std::string(kInterruptedWords);
  if (const std::size_t at = reason.find(interrupted); at != std::string::npos) {
    constexpr std::string_view kRank = "rank ";
    const std::size_t named = reason.rfind(kRank, at);
    if (named != std::string::npos) return number_at(named + kRank.size());
  }
  return -1;
}

void ProcessGroupAxon::give_up_if_a_process_exited() const {
  // Under axon-launch the launcher says which ranks have ended, the first
  // group of a process too: a member that exited, even with status 0,
  // before this group was set up never comes (the others waited out the
  // timeout, and the launcher blamed one of them; found by a review).
  const int self = global_ranks_[static_cast<std::size_t>(getRank())];
  auto gave_up = [&](const std::string& why) {
    return ad::PeerFailure("rank " + std::to_string(getRank()) + " (global rank " + std::to_string(self) +
                           "): gave up setting up the axon group of global ranks " + describe_global_ranks() + ": " +
                           why);
  };
  for (int global : ad::shm::started_by_launcher_as(self) ? global_ranks_ : std::vector<int>{}) {
    if (global == self) continue;
    const auto status = ad::shm::launcher_saw_end_of(global);
    if (!status) continue;
    throw gave_up("its member global rank " + std::to_string(global) + " " + ad::shm::describe_end(*status) +
                  " before the group was set up, as axon-launch saw");
  }
  std::lock_guard<std::mutex> lock(live_groups_mutex());
  // Every member gone, not only the first found: a late rank found the one
  // that ended because of another's death (rank 0, whose new_group had
  // raised) and named it alone, as "exited or was killed", leaving out the
  // killed rank and the exception rank 0 ended on (a review). Those that
  // died without a word come first (a kill, a crash: the likelier cause),
  // then those whose program ended, with what it ended on.
  std::vector<int> named;
  std::string died, ended;
  const auto left = subgroup_ ? left_default_group_locked() : std::vector<std::pair<int, std::string>>{};
  for (const ProcessGroupAxon* group : live_groups()) {
    for (const ad::ExitedPeer& peer : group->backend_->exited_peers()) {
      const int global = group->global_ranks_[static_cast<std::size_t>(peer.rank)];
      if (std::find(global_ranks_.begin(), global_ranks_.end(), global) == global_ranks_.end()) continue;
      if (std::find(named.begin(), named.end(), global) != named.end()) continue;
      named.push_back(global);
      const auto note = std::find_if(left.begin(), left.end(), [&](const auto& l) { return l.first == global; });
      if (note != left.end()) {
        ended += "; its member " + note->second + ", and its process has exited";
      } else {
        died += "; its member global rank " + std::to_string(global) + " (pid " + std::to_string(peer.pid) +
                ") exited or was killed, as this process's axon group of global ranks " +
                group->describe_global_ranks() + " saw";
      }
    }
  }
  if (!named.empty()) throw gave_up((died + ended).substr(2));
  // A member that left the world's default group comes to no group of this
  // world: its program is ending (rank 0's lingers up to 5 s, keeping the
  // store up), and the others waited for it until then, to get a bare
  // "Broken pipe" (a review). Only for a subgroup: while a default group
  // sets up, the one before it (destroyed, but perhaps still held) is still
  // the current world's, and every member has left it.
  for (const auto& [global, description] : left) {
    if (std::find(global_ranks_.begin(), global_ranks_.end(), global) == global_ranks_.end()) continue;
    throw gave_up("its member " + description + " before the group was set up");
  }
}

void ProcessGroupAxon::world_begins(const c10::intrusive_ptr<c10d::ProcessGroup>& default_group) {
  std::lock_guard<std::mutex> lock(live_groups_mutex());
  {
    // A cause met in the world before is none of the new world's peers' business.
    std::lock_guard<std::mutex> seen(failure_seen_mutex());
    failure_seen().reset();
    any_failure_seen.store(false, std::memory_order_relaxed);
  }
  const std::uint64_t world = current_world.fetch_add(1, std::memory_order_relaxed) + 1;
  if (auto* axon = dynamic_cast<ProcessGroupAxon*>(default_group.get())) axon->world_ = world;
}

std::vector<std::pair<int, std::string>> ProcessGroupAxon::exited_processes(bool with_left) {
  std::vector<std::pair<int, std::string>> exited;
  std::lock_guard<std::mutex> lock(live_groups_mutex());
  const std::uint64_t world = current_world.load(std::memory_order_relaxed);
  for (const ProcessGroupAxon* group : live_groups()) {
    if (group->world_ != world) continue;  // a group kept from a world destroyed since (found by a review)
    for (const ad::ExitedPeer& peer : group->backend_->exited_peers()) {
      const int global = group->global_ranks_[static_cast<std::size_t>(peer.rank)];
      if (std::any_of(exited.begin(), exited.end(), [&](const auto& seen) { return seen.first == global; })) continue;
      exited.emplace_back(global, "global rank " + std::to_string(global) + " (pid " + std::to_string(peer.pid) +
                                      ") exited or was killed, as this process's axon group of global ranks " +
                                      group->describe_global_ranks() + " saw");
    }
  }
  for (auto& left : with_left ? left_default_group_locked() : std::vector<std::pair<int, std::string>>{}) {
    if (std::none_of(exited.begin(), exited.end(), [&](const auto& seen) { return seen.first == left.first; })) {
      exited.push_back(std::move(left));
    }
  }
  return exited;
}

std::optional<std::pair<int, std::string>> ProcessGroupAxon::process_gone_with_the_store(
    const std::function<void()>& between_looks) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  for (;;) {
    if (between_looks) between_looks();
    // Rank 0 having left the default group counts: its program is ending,
    // and the store ends with it.
    for (auto& process : exited_processes(/*with_left=*/true)) {
      if (process.first == 0) return std::move(process);
    }
    if (std::chrono::steady_clock::now() >= until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  auto exited = exited_processes(/*with_left=*/false);
  if (exited.empty()) return std::nullopt;
  return std::move(exited.front());
}

// Held by every collective entry point from its first check until it calls
// collective(): an exception before then is a refusal of this rank alone
// (wrong arguments here), and the call is counted as made, so that this
// rank's next call shows the peers still in it that it is out of step
// instead of pairing with their call (found by a review: the ranks got each
// other's steps' sums with no error). Once collective() is reached the
// runtime's own calls count.
class ProcessGroupAxon::RefusalCount {
 public:
  explicit RefusalCount(ProcessGroupAxon& group)
      : group_(group), exceptions_(std::uncaught_exceptions()), outer_(innermost_) {
    innermost_ = this;
  }
  ~RefusalCount() {
    innermost_ = outer_;
    if (!reached_ && std::uncaught_exceptions() > exceptions_) group_.count_refused_collective();
  }
  RefusalCount(const RefusalCount&) = delete;
  RefusalCount& operator=(const RefusalCount&) = delete;

  // The innermost entry point of `group` on this thread, and those of the
  // same group it was called from, reached collective().
  static void reached(const ProcessGroupAxon& group) {
    for (RefusalCount* c = innermost_; c; c = c->outer_) {
      if (&c->group_ == &group) c->reached_ = true;
    }
  }

 private:
  ProcessGroupAxon& group_;
  int exceptions_;
  RefusalCount* outer_;
  bool reached_ = false;
  static thread_local RefusalCount* innermost_;
};

thread_local ProcessGroupAxon::RefusalCount* ProcessGroupAxon::RefusalCount::innermost_ = nullptr;

void ProcessGroupAxon::count_refused_collective() noexcept {
  if (in_forked_child() || !thread_) return;
  try {
    // In call order with this group's other collectives, on the thread that runs them.
    auto work = c10::make_intrusive<AxonWork>(getRank(), OpType::UNKNOWN, Tensors{});
    thread_->push(work, [b = backend_] { b->count_refused_collective(); });
  } catch (...) {
    // Out of memory, say: the refusal's own error is on its way to the caller.
  }
}

c10::intrusive_ptr<c10d::Work> ProcessGroupAxon::collective(OpType type, Tensors outputs, std::int64_t bytes,
                                                          std::function<void()> run,
                                                          std::optional<std::vector<Tensors>> output_lists) {
  RefusalCount::reached(*this);
  refuse_in_forked_child(type);
  auto work = c10::make_intrusive<AxonWork>(getRank(), type, std::move(outputs));
  if (output_lists) work->complete_future_with_lists(std::move(*output_lists));
  // From a callback of this group's op, push() and run_here_or_push() run
  // the op at once, nested (comm_thread.hpp).
  if (bytes <= inline_bytes_) {
    ad::Backend* b = backend_.get();
    thread_->run_here_or_push(
        work, std::move(run), [b] { b->announce_next(); },
        [b](std::chrono::nanoseconds at_most) { return b->peers_arrived_within_spin(at_most); }, kInlinePatience);
  } else {
    thread_->push(work, std::move(run));
  }
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupAxon::point_to_point(CommThread& thread, OpType type, Tensors outputs,
                                                              std::function<void()> run, int source_rank) {
  refuse_in_forked_child(type);
  auto work = c10::make_intrusive<AxonWork>(getRank(), type, std::move(outputs), source_rank);
  thread.push(work, std::move(run));
  return work;
}

namespace {

// Whether every rank's `tensor` lies in the arena once this returns: each
// rank whose tensor is not `there` reserves a block where it can move (when
// `movable`), the ranks agree (one int32 MIN), and only then do they move.
// A rank whose tensor lies in the arena and one whose does not would meet as
// a collective mismatch in the all_reduce (the runtime tells zero-copy
// buffers apart).
bool agree_in_arena(ad::StoreBackend& b, const at::Tensor& tensor, bool there, bool movable, KeepOld keep_old,
                    const std::string& where) {
  std::shared_ptr<std::byte> block = there || !movable ? nullptr : reserve_for(tensor, b);
  std::int32_t all_can = there || block ? 1 : 0;
  try {
    const Marked marked(b, Step::ArenaAgreement);
    b.all_reduce(std::span<std::int32_t>(&all_can, 1), ad::ReduceOp::Min);
  } catch (const ad::CollectiveMismatch& e) {
    throw_explained(b, e, Step::ArenaAgreement, [&] { return " (this rank called " + where + ")"; });
  }
  if (all_can == 0) return false;
  if (block) move_storage_into(tensor, std::move(block), keep_old);
  return true;
}

// An all_reduce of `t` that meets the peers whatever lies where: when every
// rank's tensor is in the arena (after moving it there, when `move`), the
// runtime reads them in place; otherwise every rank all-reduces privately, a
// tensor in the arena through a private copy.
void all_reduce_where_agreed(ad::StoreBackend& b, at::Tensor& t, const c10d::ReduceOp& op, bool move,
                             const std::string& where) {
  const bool there = t.is_contiguous() && storage_in_arena(t, b);
  const bool movable = move && t.is_contiguous();
  if (agree_in_arena(b, t, there, movable, KeepOld::No, where) || !there) {
    return in_place(t, [&](at::Tensor& c) { all_reduce_tensor(b, c, op, where); });
  }
  at::Tensor staged = t.clone(at::MemoryFormat::Contiguous);  // PyTorch's memory: private
  all_reduce_tensor(b, staged, op, where);
  t.copy_(staged);
}

// Whether all_reduce of `t` must agree first: in a group with room for
// placed tensors, a reduction the runtime runs of more than the smallest
// size it reads in place (ArenaBackend's zero-copy limit, at least 8 KiB).
bool may_meet_placed(bool room, const at::Tensor& t, const c10d::ReduceOp& op, const std::string& where) {
  constexpr std::size_t kSmallestInPlace = std::size_t{8} << 10;
  return room && t.nbytes() > kSmallestInPlace && native_type(t.scalar_type()) && native_op(op, where);
}

// One tensor of allreduce() or allreduce_coalesced(), agreeing first where
// a placed tensor may meet a private one (may_meet_placed).
// Whether two of `tensors` may share memory: views of one storage that
// overlap, or that are too irregular for ATen to tell. Only tensors of one
// storage can, so only those are compared: a model's gradient list, one
// storage each, costs a sort, not every pair.
bool any_two_overlap(const std::vector<at::Tensor>& tensors) {
  std::vector<std::pair<const void*, std::size_t>> by_storage;  // (storage, index)
  by_storage.reserve(tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    by_storage.emplace_back(tensors[i].storage().unsafeGetStorageImpl(), i);
  }
  std::sort(by_storage.begin(), by_storage.end());
  for (std::size_t first = 0; first < by_storage.size(); ++first) {
    for (std::size_t other = first + 1; other < by_storage.size() && by_storage[other].first == by_storage[first].first;
         ++other) {
      const at::Tensor& a = tensors[by_storage[first].second];
      const at::Tensor& b = tensors[by_storage[other].second];
      // Same storage: anything but a clear "no" (TooHard: not dense) may overlap.
      if (at::get_overlap_status(a, b) != at::MemOverlapStatus::No) return true;
    }
  }
  return false;
}

// allreduce_coalesced's and allgather_coalesced's first step: the ranks compare their lists (how many
// tensors; each one's dtype and element count, folded into a hash) in one
// all_reduce of four int64, and every rank throws CollectiveMismatch when
// they differ. Why: the list runs as one all_reduce per tensor, so a rank
// with a longer list paired its extra tensor with the others' next call,
// and those ranks got that call's sum with no error (found by a review).
void agree_on_the_list(ad::StoreBackend& b, const std::vector<at::Tensor>& tensors, const std::string& where) {
  ad::Fnv1a fold;
  for (const auto& t : tensors) {
    fold.add(static_cast<std::uint64_t>(t.scalar_type())).add(static_cast<std::uint64_t>(t.numel()));
  }
  const auto count = static_cast<std::int64_t>(tensors.size());
  const auto hash = static_cast<std::int64_t>(fold.value() >> 1);  // >= 0: its negation fits
  std::array<std::int64_t, 4> least{count, -count, hash, -hash};  // min, -max of each
  try {
    const Marked marked(b, Step::ListAgreement);
    b.all_reduce(std::span<std::int64_t>(least), ad::ReduceOp::Min);
  } catch (const ad::CollectiveMismatch& e) {
    throw_explained(b, e, Step::ListAgreement, [&] { return " (this rank called " + where + ")"; });
  }
  if (least[0] == -least[1] && least[2] == -least[3]) return;
  std::string mine;
  for (std::size_t i = 0; i < tensors.size() && i < 8; ++i) {
    mine += (i ? ", " : "") + std::string(c10::toString(tensors[i].scalar_type())) + " of " +
            std::to_string(tensors[i].numel());
  }
  if (tensors.size() > 8) mine += ", ...";
  throw ad::CollectiveMismatch(
      where + ": the ranks passed different tensor lists (" +
      (least[0] != -least[1] ? std::to_string(least[0]) + " to " + std::to_string(-least[1]) + " tensors"
                             : "the same number of tensors, of different dtypes or sizes") +
      "); this rank passed " + std::to_string(count) + ": [" + mine + "]. Every rank must pass tensors of the same "
      "dtypes and sizes, in the same order");
}

void all_reduce_one(ad::StoreBackend& b, at::Tensor& t, const c10d::ReduceOp& op, bool room,
                    const std::string& where) {
  if (may_meet_placed(room, t, op, where)) return all_reduce_where_agreed(b, t, op, /*move=*/false, where);
  in_place(t, [&](at::Tensor& c) { all_reduce_tensor(b, c, op, where); });
}

}  // namespace

bool ProcessGroupAxon::place_in_arena(const at::Tensor& tensor) {
  const RefusalCount refusal(*this);
  refuse_in_forked_child("place_in_arena");  // by its name: its collective's type is UNKNOWN
  const OpSite where = where_of("place_in_arena");
  check_tensor(tensor, where);
  auto placed = std::make_shared<bool>(false);
  // Without room asked for, nothing is placed, not even a tensor that would fit
  // in the default arena's spare pages: all_reduce agrees where tensors lie
  // only in groups with room, so a placed tensor there would meet a rank's
  // private copy as a collective mismatch instead of as a private tensor.
  auto work = collective(OpType::UNKNOWN, {tensor}, sizeof(std::int32_t),
                         [b = backend_, tensor, placed, where, room = shared_room_] {
    // Sizes that differ would place fine and fail at the first all_reduce:
    // say so here, where the cause is.
    const auto bytes = static_cast<std::int64_t>(tensor.storage().nbytes());
    std::array<std::int64_t, 2> least_and_most{bytes, -bytes};
    try {
      const Marked marked(*b, Step::PlacedSizes);
      b->all_reduce(std::span<std::int64_t>(least_and_most), ad::ReduceOp::Min);
    } catch (const ad::CollectiveMismatch& e) {
      throw_explained(*b, e, Step::PlacedSizes, [&] { return " (this rank called " + where.text() + ")"; });
    }
    if (least_and_most[0] != -least_and_most[1]) {
      throw ad::InvalidArgument(where.text() + ": the ranks' tensors differ in size (storages of " +
                                std::to_string(least_and_most[0]) + " to " + std::to_string(-least_and_most[1]) +
                                " bytes, this rank's " + std::to_string(bytes) +
                                "); every rank places a tensor of the same size");
    }
    *placed = agree_in_arena(*b, tensor, storage_in_arena(tensor, *b), /*movable=*/room, KeepOld::UntilStorageGoes,
                             where);
  });
  work->wait();
  return *placed;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupAxon::allreduce_in_arena(at::Tensor& tensor,
                                                                  const c10d::AllreduceOptions& opts) {
  const RefusalCount refusal(*this);
  const OpSite where = where_of("allreduce_in_arena");
  const at::ScalarType type = check_all({tensor}, where);
  check_reducible(opts.reduceOp, type, where);
  const bool native = native_type(type) && native_op(opts.reduceOp, where);
  return collective(OpType::ALLREDUCE, {tensor}, static_cast<std::int64_t>(tensor.nbytes()),
                    [b = backend_, tensor, op = opts.reduceOp, where, native, room = shared_room_]() mutable {
    if (!native) return in_place(tensor, [&](at::Tensor& c) { all_reduce_tensor(*b, c, op, where); });
    all_reduce_where_agreed(*b, tensor, op, /*move=*/room, where);  // no room: as place_in_arena
  });
}

bool ProcessGroupAxon::in_arena(const at::Tensor& tensor) const {
  return tensor.defined() && tensor.device().is_cpu() && storage_in_arena(tensor, *backend_);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupAxon::broadcast(Tensors& tensors, const c10d::BroadcastOptions& opts) {
  const RefusalCount refusal(*this);
  const OpSite where = where_of("broadcast");
  check_all(tensors, where);
  check_one_tensor(tensors, where, "");
  check_root_tensor(opts.rootTensor, where);
  check_root(opts.rootRank, getSize(), where, "src");
  const int root = static_cast<int>(opts.rootRank);
  return collective(OpType::BROADCAST, tensors, total_bytes(tensors), [b = backend_, tensors, root]() mutable {
    for (auto& t : tensors) in_place(t, [&](at::Tensor& c) { axonml::torch::broadcast(*b, c, root); });
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupAxon::allreduce(Tensors& tensors, const c10d::AllreduceOptions& opts) {
  const RefusalCount refusal(*this);
  const OpSite where = where_of("allreduce");
  check_reducible(opts.reduceOp, check_all(tensors, where), where);
  check_one_tensor(tensors, where, "all_reduce_coalesced");
  // The op's one tensor, not the list: a vector fewer to copy and free in
  // every call.
  return collective(OpType::ALLREDUCE, tensors, total_bytes(tensors),
                    [b = backend_, t = tensors.front(), op = opts.reduceOp, where, room = shared_room_]() mutable {
    all_reduce_one(*b, t, op, room, where);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupAxon::allreduce_coalesced(Tensors& tensors,
                                                                   const c10d::AllreduceCoalescedOptions& opts) {
  const RefusalCount refusal(*this);
  const OpSite where = where_of("allreduce_coalesced");
  check_reducible(opts.reduceOp, check_all(tensors, where), where);
  return collective(OpType::ALLREDUCE_COALESCED, tensors, total_bytes(tensors),
                    [b = backend_, tensors, op = opts.reduceOp, where, room = shared_room_]() mutable {
    agree_on_the_list(*b, tensors, where);
    if (!any_two_overlap(tensors)) {
      for (auto& t : tensors) all_reduce_one(*b, t, op, room, where);
      return;
    }
    // Views that share elements: reducing them one after the other would
    // reduce the shared elements twice. Reduce copies of the inputs, as Gloo
    // does (it flattens them), and write the results back: the shared
    // elements get the same value from each copy.
    std::vector<at::Tensor> copies;
    copies.reserve(tensors.size());
    for (const auto& t : tensors) copies.push_back(t.clone(at::MemoryFormat::Contiguous));
    for (auto& c : copies) all_reduce_one(*b, c, op, room, where);
    for (std::size_t i = 0; i < tensors.size(); ++i) copy_back(tensors[i], copies[i]);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupAxon::reduce(Tensors& tensors, const c10d::ReduceOptions& opts) {
  const RefusalCount refusal(*this);
  const OpSite where = where_of("reduce");
  check_reducible(opts.reduceOp, check_all(tensors, where), where);
  check_one_tensor(tensors, where, "");
  check_root_tensor(opts.rootTensor, where);
  check_root(opts.rootRank, getSize(), where, "dst");
  const int root = static_cast<int>(opts.rootRank);
  return collective(OpType::REDUCE, tensors, total_bytes(tensors), [b = backend_, tensors, op = opts.reduceOp, root, where]() mutable {
    for (auto& t : tensors) {
      in_place(t, [&](at::Tensor& c) {
        reducing(*b, Fallback::Reduce, c, op, [&] {
          const auto native = native_op(op, where);
          // In place: the runtime copies the root's input aside itself, and
          // only there (a copy here, on every rank, took the tensor's size
          // on ranks that receive nothing; a review).
          if (native && native_type(c.scalar_type())) return axonml::torch::reduce(*b, c, c, root, *native);
          agree_on_fallback(*b, Fallback::Reduce, c, op, root, where);
          const bool is_root = b->rank() == root;
          piece_by_piece(c, is_root ? b->world_size() : 0, [&](at::Tensor& piece, at::Tensor& stacked) {
            axonml::torch::gather(*b, piece, stacked, root);
            if (is_root) combine(stacked.unbind(0), op, piece);
          });
        });
      });
    }
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupAxon::allgather(std::vector<Tensors>& outputs, Tensors& inputs,
                                                         const c10d::AllgatherOptions&) {
  const RefusalCount refusal(*this);
  const OpSite where = where_of("allgather");
  check_count(where, "the input list", static_cast<std::int64_t>(inputs.size()), 1, "one tensor per process");
  check_count(where, "the output list", static_cast<std::int64_t>(outputs.size()), 1, "one list per process");
  const at::ScalarType type = check_all(inputs, where);
  check_count(where, "the output list", static_cast<std::int64_t>(outputs[0].size()), getSize(), "one tensor per rank");
  check_all(outputs[0], where);
  for (std::size_t r = 0; r < outputs[0].size(); ++r) {
    check_same_dtype(outputs[0][r], type, where);
    check_shape(where, "output tensor " + std::to_string(r), outputs[0][r], "the input", inputs[0]);
  }
  return collective(OpType::ALLGATHER, outputs[0], total_bytes(outputs[0]), [b = backend_, input = inputs[0], outs = outputs[0]]() mutable {
    const std::int64_t count = input.numel();
    auto flat = at::empty({b->world_size() * count}, input.options());
    axonml::torch::all_gather(*b, flat_of(input), flat);
    for (std::size_t r = 0; r < outs.size(); ++r) {
      outs[r].copy_(flat.narrow(0, static_cast<std::int64_t>(r) * count, count).view(outs[r].sizes()));
    }
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupAxon::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                               const c10d::AllgatherOptions&) {
  const RefusalCount refusal(*this);
  const OpSite where = where_of("_allgather_base");
  check_all({output, input}, where);
  check_count(where, "the output tensor", output.numel(), input.numel() * getSize(),
              "elements of the input x world size");
  return collective(OpType::_ALLGATHER_BASE, {output}, total_bytes({output}), [b = backend_, output, input]() mutable {
    in_place(output, [&](at::Tensor& c) { axonml::torch::all_gather(*b, flat_of(input), c); });
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupAxon::allgather_coalesced(std::vector<Tensors>& outputs, Tensors& inputs,
                                                                   const c10d::AllgatherOptions&) {
  const RefusalCount refusal(*this);
  const OpSite where = where_of("allgather_coalesced");
  const at::ScalarType type = check_all(inputs, where);
  check_count(where, "the output list", static_cast<std::int64_t>(outputs.size()), getSize(), "one list per rank");
  Tensors all_outputs;
  for (auto& list : outputs) {
    check_count(where, "an output list", static_cast<std::int64_t>(list.size()),
                static_cast<std::int64_t>(inputs.size()), "one tensor per input");
    check_all(list, where);
    for (std::size_t i = 0; i < list.size(); ++i) {
      check_same_dtype(list[i], type, where);
      check_shape(where, "output tensor " + std::to_string(i), list[i], "input " + std::to_string(i), inputs[i]);
      all_outputs.push_back(list[i]);
    }
  }
  return collective(OpType::ALLGATHER_COALESCED, all_outputs, total_bytes(all_outputs),
                    [b = backend_, inputs, outputs, where]() mutable {
    agree_on_the_list(*b, inputs, where);  // one all_gather per tensor: as allreduce_coalesced
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const std::int64_t count = inputs[i].numel();
      auto flat = at::empty({b->world_size() * count}, inputs[i].options());
      axonml::torch::all_gather(*b, flat_of(inputs[i]), flat);
      for (std::size_t r = 0; r < outputs.size(); ++r) {
        outputs[r][i].copy_(flat.narrow(0, static_cast<std::int64_t>(r) * count, count).view(outputs[r][i].sizes()));
      }
    }
  }, outputs);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupAxon::gather(std::vector<Tensors>& outputs, Tensors& inputs,
                                                      const c10d::GatherOptions& opts) {
  const RefusalCount refusal(*this);
  const OpSite where = where_of("gather");
  check_count(where, "the input list", static_cast<std::int64_t>(inputs.size()), 1, "one tensor per process");
  check_all(inputs, where);
  check_root(opts.rootRank, getSize(), where, "dst");
  const int root = static_cast<int>(opts.rootRank);
  Tensors outs = root_tensor_list(outputs, root, getRank(), getSize(), inputs[0], where, "output", "dst");
  return collective(OpType::GATHER, outs, std::max(total_bytes(outs), total_bytes(inputs)), [b = backend_, input = inputs[0], outs, root]() mutable {
    const std::int64_t count = input.numel();
    const bool is_root = b->rank() == root;
    auto flat = at::empty({is_root ? b->world_size() * count : 0}, input.options());
    axonml::torch::gather(*b, flat_of(input), flat, root);
    for (std::size_t r = 0; r < outs.size(); ++r) {
      outs[r].copy_(flat.narrow(0, static_cast<std::int64_t>(r) * count, count).view(outs[r].sizes()));
    }
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupAxon::scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                                                       const c10d::ScatterOptions& opts) {
  const RefusalCount refusal(*this);
  const OpSite where = where_of("scatter");
  check_count(where, "the output list", static_cast<std::int64_t>(outputs.size()), 1, "one tensor per process");
  check_all(outputs, where);
  check_root(opts.rootRank, getSize(), where, "src");
  const int root = static_cast<int>(opts.rootRank);
  Tensors ins = root_tensor_list(inputs, root, getRank(), getSize(), outputs[0], where, "input", "src");
  return collective(OpType::SCATTER, outputs, std::max(total_bytes(outputs), total_bytes(ins)), [b = backend_, output = outputs[0], ins, root]() mutable {
    at::Tensor send = ins.empty() ? at::empty({0}, output.options()) : at::cat(
        [&] { Tensors flat; for (auto& t : ins) flat.push_back(t.reshape(-1)); return flat; }());
    in_place(output, [&](at::Tensor& c) { axonml::torch::scatter(*b, send, c, root); });
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupAxon::reduce_scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                                                              const c10d::ReduceScatterOptions& opts) {
  const RefusalCount refusal(*this);
  const OpSite where = where_of("reduce_scatter");
  check_count(where, "the output list", static_cast<std::int64_t>(outputs.size()), 1, "one tensor per process");
  check_count(where, "the input list", static_cast<std::int64_t>(inputs.size()), 1, "one list per process");
  const at::ScalarType type = check_all(outputs, where);
  check_reducible(opts.reduceOp, type, where);
  check_count(where, "the input list", static_cast<std::int64_t>(inputs[0].size()), getSize(), "one tensor per rank");
  check_all(inputs[0], where);
  for (const auto& i : inputs[0]) {
    check_same_dtype(i, type, where);
    check_count(where, "an input tensor", i.numel(), outputs[0].numel(), "elements of the output");
  }
  Tensors ins = inputs[0];
  return collective(OpType::REDUCE_SCATTER, outputs, total_bytes(ins), [b = backend_, output = outputs[0], ins, op = opts.reduceOp, where]() mutable {
    Tensors flat;
    for (auto& t : ins) flat.push_back(t.reshape(-1));
    const at::Tensor send = at::cat(flat);
    in_place(output, [&](at::Tensor& c) { reduce_scatter_tensor(*b, send, c, op, where); });
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupAxon::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                    const c10d::ReduceScatterOptions& opts) {
  const RefusalCount refusal(*this);
  const OpSite where = where_of("_reduce_scatter_base");
  const at::ScalarType type = check_all({output, input}, where);
  check_reducible(opts.reduceOp, type, where);
  check_count(where, "the input tensor", input.numel(), output.numel() * getSize(),
              "elements of the output x world size");
  return collective(OpType::_REDUCE_SCATTER_BASE, {output}, total_bytes({input}), [b = backend_, output, input, op = opts.reduceOp, where]() mutable {
    const at::Tensor send = flat_of(input);
    in_place(output, [&](at::Tensor& c) { reduce_scatter_tensor(*b, send, c, op, where); });
  });
}

namespace {

// All-to-all of blocks of different sizes: every rank learns every block's
// byte count, every output's room for it and every rank's dtype (one
// all_gather), pads each block to the largest, exchanges equal blocks, and
// unpads. Every rank checks every pair, not only what comes to it, so when
// two ranks disagree all ranks throw the same error; a rank that alone found
// it would leave the others waiting in the exchange. `send_blocks[q]` goes
// to rank q, `recv_blocks[p]` comes from rank p (both byte views of
// contiguous memory of dtype `type`). The dtype is compared because the
// blocks move as bytes: float32 on one rank and int32 on another handed the
// bits over with no error, where every other collective raises (a review).
void uneven_all_to_all(ad::Backend& b, const std::vector<at::Tensor>& send_blocks,
                       const std::vector<at::Tensor>& recv_blocks, at::ScalarType type, const std::string& where) {
  const std::int64_t n = b.world_size();
  const std::int64_t row = 2 * n + 1;  // [bytes to each rank | room for each rank's bytes | dtype]
  auto mine = at::empty({row}, at::kLong);
  for (std::int64_t q = 0; q < n; ++q) {
    mine[q] = static_cast<std::int64_t>(send_blocks[static_cast<std::size_t>(q)].numel());
    mine[n + q] = static_cast<std::int64_t>(recv_blocks[static_cast<std::size_t>(q)].numel());
  }
  mine[2 * n] = static_cast<std::int64_t>(type);
  auto all = at::empty({n * row}, at::kLong);
  try {
    const Marked marked(b, Step::AllToAllSplits);
    axonml::torch::all_gather(b, mine, all);
  } catch (const ad::CollectiveMismatch& e) {
    throw_explained(b, e, Step::AllToAllSplits, [&] { return " (this rank called " + where + ")"; });
  }
  auto table = all.view({n, row});
  const auto* cells = table.data_ptr<std::int64_t>();
  for (std::int64_t p = 1; p < n; ++p) {
    if (cells[p * row + 2 * n] != cells[2 * n]) {
      auto passes = [&](std::int64_t rank) {
        return "rank " + std::to_string(rank) + " passes " +
               std::string(c10::toString(static_cast<at::ScalarType>(cells[rank * row + 2 * n]))) + " tensors";
      };
      throw ad::CollectiveMismatch(where + ": collective mismatch: the ranks' dtypes differ: " + passes(0) + ", " +
                                   passes(p) + "; every rank must pass tensors of one dtype");
    }
  }
  const std::int64_t widest = std::max<std::int64_t>(table.narrow(1, 0, n).max().item<std::int64_t>(), 0);
  for (std::int64_t p = 0; p < n; ++p) {
    for (std::int64_t q = 0; q < n; ++q) {
      const std::int64_t sends = cells[p * row + q];
      const std::int64_t room = cells[q * row + n + p];
      if (sends != room) {
        throw ad::InvalidArgument(where + ": the ranks' split sizes disagree: rank " + std::to_string(p) +
                                  " sends " + std::to_string(sends) + " bytes to rank " + std::to_string(q) +
                                  ", whose output has room for " + std::to_string(room) + " bytes from it");
      }
    }
  }
  const std::int64_t stride = widest + (widest % 2);  // whole 16-bit words per block
  auto send = at::zeros({n * stride}, at::kByte);
  auto recv = at::empty({n * stride}, at::kByte);
  for (std::int64_t q = 0; q < n; ++q) {
    const auto& block = send_blocks[static_cast<std::size_t>(q)];
    send.narrow(0, q * stride, block.numel()).copy_(block);
  }
  axonml::torch::all_to_all(b, send, recv);
  for (std::int64_t p = 0; p < n; ++p) {
    auto block = recv_blocks[static_cast<std::size_t>(p)];
    block.copy_(recv.narrow(0, p * stride, block.numel()));
  }
}

std::vector<at::Tensor> split_bytes(const at::Tensor& flat_bytes, const std::vector<std::int64_t>& rows,
                                    std::int64_t row_bytes) {
  std::vector<at::Tensor> blocks;
  std::int64_t offset = 0;
  for (std::int64_t r : rows) {
    blocks.push_back(flat_bytes.narrow(0, offset, r * row_bytes));
    offset += r * row_bytes;
  }
  return blocks;
}

at::Tensor byte_view(const at::Tensor& contiguous) {
  return at::from_blob(contiguous.data_ptr(), {static_cast<std::int64_t>(contiguous.nbytes())},
                       at::TensorOptions().dtype(at::kByte));
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupAxon::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                             std::vector<int64_t>& output_splits,
                                                             std::vector<int64_t>& input_splits,
                                                             const c10d::AllToAllOptions&) {
  const RefusalCount refusal(*this);
  const OpSite where = where_of("alltoall_base");
  check_all({output, input}, where);
  const std::int64_t n = getSize();
  auto check_splits = [&](const std::vector<int64_t>& splits, const at::Tensor& t, const char* which) {
    if (splits.empty()) {
      if (t.dim() == 0 || t.size(0) % n != 0) {
        throw ad::InvalidArgument(where.text() + ": the " + which + " tensor's first dimension (" +
                                  (t.dim() ? std::to_string(t.size(0)) : std::string("none")) +
                                  ") does not split into " + std::to_string(n) + " equal parts");
      }
      return;
    }
    check_count(where, std::string("the ") + which + " split sizes", static_cast<std::int64_t>(splits.size()), n,
                "one per rank");
    std::int64_t total = 0;
    for (auto s : splits) {
      if (s < 0) throw ad::InvalidArgument(where.text() + ": negative split size " + std::to_string(s));
      total += s;
    }
    check_count(where, std::string("the ") + which + " tensor's first dimension", t.dim() ? t.size(0) : 0,
                total, std::string("the sum of the ") + which + " split sizes");
  };
  check_splits(input_splits, input, "input");
  check_splits(output_splits, output, "output");
  const bool even = input_splits.empty() && output_splits.empty();
  if (even) check_count(where, "the output tensor", output.numel(), input.numel(), "elements of the input");
  return collective(OpType::ALLTOALL_BASE, {output}, total_bytes({output, input}),
                 [b = backend_, output, input, in_splits = input_splits, out_splits = output_splits, even, where]() mutable {
    const at::Tensor send = input.contiguous();
    in_place(output, [&](at::Tensor& c) {
      if (even) return axonml::torch::all_to_all(*b, send.view(-1), c);
      const std::int64_t n = b->world_size();
      auto splits = [&](const std::vector<int64_t>& given, const at::Tensor& t) {
        return given.empty() ? std::vector<std::int64_t>(static_cast<std::size_t>(n), t.size(0) / n)
                             : std::vector<std::int64_t>(given.begin(), given.end());
      };
      const std::int64_t row_bytes =
          send.numel() ? static_cast<std::int64_t>(send.nbytes()) / send.size(0)
                       : (c.size(0) ? static_cast<std::int64_t>(c.nbytes()) / c.size(0)
                                    : static_cast<std::int64_t>(c.element_size()));
      uneven_all_to_all(*b, split_bytes(byte_view(send), splits(in_splits, send), row_bytes),
                        split_bytes(byte_view(c), splits(out_splits, c), row_bytes), send.scalar_type(), where);
    });
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupAxon::alltoall(Tensors& outputs, Tensors& inputs,
                                                        const c10d::AllToAllOptions&) {
  const RefusalCount refusal(*this);
  const OpSite where = where_of("alltoall");
  check_count(where, "the input list", static_cast<std::int64_t>(inputs.size()), getSize(), "one tensor per rank");
  check_count(where, "the output list", static_cast<std::int64_t>(outputs.size()), getSize(), "one tensor per rank");
  const at::ScalarType type = check_all(inputs, where);
  check_all(outputs, where);
  for (const auto& o : outputs) check_same_dtype(o, type, where);
  return collective(OpType::ALLTOALL, outputs, total_bytes(outputs) + total_bytes(inputs), [b = backend_, outputs, inputs, type, where]() mutable {
    std::vector<at::Tensor> send_blocks, recv_blocks, staged;
    for (auto& t : inputs) {
      staged.push_back(t.contiguous());
      send_blocks.push_back(byte_view(staged.back()));
    }
    std::vector<at::Tensor> contiguous_outputs;
    for (auto& t : outputs) {
      contiguous_outputs.push_back(t.is_contiguous() ? t : at::empty_like(t, at::MemoryFormat::Contiguous));
      recv_blocks.push_back(byte_view(contiguous_outputs.back()));
    }
    uneven_all_to_all(*b, send_blocks, recv_blocks, type, where);
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      if (!outputs[i].is_same(contiguous_outputs[i])) outputs[i].copy_(contiguous_outputs[i]);
    }
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupAxon::barrier(const c10d::BarrierOptions&) {
  return collective(OpType::BARRIER, {}, 0, [b = backend_] { b->barrier(); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupAxon::send(Tensors& tensors, int dst, int tag) {
  const OpSite where = where_of("send");
  check_count(where, "the tensor list", static_cast<std::int64_t>(tensors.size()), 1, "one tensor");
  check_all(tensors, where);
  check_root(dst, getSize(), where, "dst");
  if (dst == getRank()) throw ad::InvalidArgument(where.text() + ": cannot send to itself");
  // A copy now: the caller may change the tensor once send() returns.
  return point_to_point(*send_thread_, OpType::SEND, tensors, [b = backend_, data = flat_of(tensors[0]).clone(), dst, tag] {
    axonml::torch::send(*b, data, dst, tag);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupAxon::recv(Tensors& tensors, int src, int tag) {
  const OpSite where = where_of("recv");
  check_count(where, "the tensor list", static_cast<std::int64_t>(tensors.size()), 1, "one tensor");
  check_all(tensors, where);
  check_root(src, getSize(), where, "src");
  if (src == getRank()) throw ad::InvalidArgument(where.text() + ": cannot receive from itself");
  return point_to_point(
      *recv_thread_, OpType::RECV, tensors,
      [b = backend_, t = tensors[0], src, tag]() mutable {
        in_place(t, [&](at::Tensor& c) { axonml::torch::recv(*b, c, src, tag); });
      },
      src);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupAxon::recvAnysource(Tensors&, int) {
  throw ad::InvalidArgument(where_of("recv").text() +
                            ": receiving from any source is not supported by the axon backend; pass src");
}

}  // namespace axonml::torch
