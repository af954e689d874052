// A rank program for axon-launch: thousands of random collectives, every
// result verified.
//
//   axon-launch -n 8 stress_collectives [--seed S] [--ops N]
//   stress_collectives ... --endless            run until killed (fault tests)
//   stress_collectives ... --exit-rank R --exit-at K --exit-code C
//                                               rank R exits C before op K
//
// Every rank draws the same sequence of operations from the seed: op kind
// (each collective, a send/recv pair, a shift where every member sends
// first), ReduceOp, element type, element count (mostly small, sometimes up
// to a few MiB), root, and one of a few groups made up front (the world,
// evens, odds, the world reversed, the first three, the upper half). Ranks
// outside an op's group skip it, so groups run concurrently. Inputs are small
// integers that every rank can recompute for any (rank, element, op), and
// every result is checked against a reference built from them (exact, except
// a tolerance for floating-point Average). Sums of at most 8 values in
// -2..4, and products of values in {-1, 1, 2}, are exact in every type.
//
// --mode picks what runs (default mixed, the above):
//   thread-per-group  each rank runs one thread per group it belongs to, each
//                     with its own random sequence of ops on that group alone
//                     (collectives and point to point), all at once;
//   p2p-subgroups     only send/recv ops, in batches of four on random groups:
//                     every sender sends all four first, receivers receive in
//                     reverse order, with equal tags on different groups, so
//                     messages wait in the stash and must not cross groups;
//   nan               all_reduce (every reduce op) of f32/f64/bf16/f16 whose
//                     inputs hold NaNs with a different payload and sign on
//                     every rank, each rank's buffer at its own offset from a
//                     64-byte boundary: NaN results must be the canonical NaN
//                     (in a group of one, the input's own bits: it combines
//                     nothing) and every member's result bitwise the same.
//
// Prints the seed first ("stress seed=S ops=N"); on a wrong result, prints
// the op and what to rerun, and exits 1. A caught PeerFailure is printed as
// "stress rank K caught PeerFailure: ..." and exits 1.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "axonml/distributed.hpp"

using namespace axonml::distributed;

namespace {

struct CheckFailed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// splitmix64: the same sequence on every rank and every platform.
struct Rng {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  std::uint64_t below(std::uint64_t n) { return n == 0 ? 0 : next() % n; }
};

enum class Kind { AllReduce, Broadcast, AllGather, ReduceScatter, Gather, Scatter, Reduce, Barrier,
                  Pair, Shift };
constexpr const char* kKindNames[] = {"all_reduce", "broadcast", "all_gather", "reduce_scatter",
                                      "gather",     "scatter",   "reduce",     "barrier",
                                      "send/recv pair", "send/recv shift"};
// Relative weights of the kinds above.
constexpr int kKindWeights[] = {6, 3, 3, 3, 2, 2, 2, 1, 2, 2};

constexpr DataType kTypes[] = {DataType::F32, DataType::F64, DataType::BF16, DataType::F16,
                               DataType::I32, DataType::I64};
constexpr ReduceOp kReduceOps[] = {ReduceOp::Sum, ReduceOp::Product, ReduceOp::Min, ReduceOp::Max,
                                   ReduceOp::Average};

// One drawn operation; every field is drawn on every rank, used or not.
struct Op {
  std::uint64_t index;
  Kind kind;
  DataType type;
  ReduceOp reduce_op;
  std::size_t group;
  std::size_t count;  // elements per rank
  int root;           // group rank
  int peer_a;         // pair: src; shift: distance
  int peer_b;         // pair: dst
  int tag;
};

struct Group {
  std::string name;
  std::vector<int> members;  // world ranks by group rank
  ProcessGroup pg;
};

// Input element i of `world_rank` in op `salt`: an integer in -2..4, or in
// {-1, 1, 2} for products.
int input_value(int world_rank, std::size_t i, std::uint64_t salt, bool product) {
  std::uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ULL ^ (salt + 7) * 0xC2B2AE3D27D4EB4FULL ^
                    static_cast<std::uint64_t>(world_rank + 3) * 0x165667B19E3779F9ULL;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ULL;
  h ^= h >> 32;
  if (product) {
    constexpr int values[] = {-1, 1, 2};
    return values[h % 3];
  }
  return static_cast<int>(h % 7) - 2;
}

template <typename T> T make(double v) {
  if constexpr (std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>) {
    return T(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}
template <typename T> double value_of(T x) {
  if constexpr (std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>) {
    return static_cast<double>(static_cast<float>(x));
  } else {
    return static_cast<double>(x);
  }
}

template <typename T> double tolerance() {
  if constexpr (std::is_same_v<T, float>) return 1e-5;
  if constexpr (std::is_same_v<T, double>) return 1e-12;
  if constexpr (std::is_same_v<T, bfloat16>) return 2e-2;
  if constexpr (std::is_same_v<T, float16>) return 4e-3;
  return 0;
}

// The reduction of element i over `members`: exact integers, then Average
// divides (truncating for integer types, as the kernels do).
template <typename T>
double reference(ReduceOp op, const std::vector<int>& members, std::size_t i, std::uint64_t salt) {
  const bool product = op == ReduceOp::Product;
  long long acc = input_value(members[0], i, salt, product);
  for (std::size_t m = 1; m < members.size(); ++m) {
    const long long x = input_value(members[m], i, salt, product);
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Average: acc += x; break;
      case ReduceOp::Product: acc *= x; break;
      case ReduceOp::Min: acc = std::min(acc, x); break;
      case ReduceOp::Max: acc = std::max(acc, x); break;
    }
  }
  if (op != ReduceOp::Average) return static_cast<double>(acc);
  const auto n = static_cast<long long>(members.size());
  if constexpr (std::is_integral_v<T>) return static_cast<double>(acc / n);
  return static_cast<double>(acc) / static_cast<double>(n);
}

enum class Mode { Mixed, ThreadPerGroup, P2pSubgroups, Nan };

class Runner {
 public:
  // `only_group` >= 0 pins every op to that group (thread-per-group mode).
  Runner(World& world, std::vector<Group>& groups, std::uint64_t seed, Mode mode = Mode::Mixed,
         int only_group = -1)
      : world_(world), groups_(groups), seed_(seed), rng_{seed}, mode_(mode), only_group_(only_group) {}

  Op draw(std::uint64_t index, std::size_t max_bytes) {
    Op op{};
    op.index = index;
    int total = 0;
    for (int w : kKindWeights) total += w;
    int pick = static_cast<int>(rng_.below(static_cast<std::uint64_t>(total)));
    int k = 0;
    while (pick >= kKindWeights[k]) pick -= kKindWeights[k++];
    op.kind = static_cast<Kind>(k);
    op.type = kTypes[rng_.below(std::size(kTypes))];
    op.reduce_op = kReduceOps[rng_.below(std::size(kReduceOps))];
    op.group = rng_.below(groups_.size());
    if (only_group_ >= 0) op.group = static_cast<std::size_t>(only_group_);
    if (mode_ == Mode::P2pSubgroups) op.kind = k % 2 ? Kind::Pair : Kind::Shift;
    if (mode_ == Mode::Nan) {
      op.kind = Kind::AllReduce;
      op.type = kTypes[static_cast<std::size_t>(k) % 4];  // the floating-point types
      op.reduce_op = kReduceOps[op.index % std::size(kReduceOps)];
    }
    const int n = static_cast<int>(groups_[op.group].members.size());
    const std::size_t element = size_of(op.type);
    // Mostly small, sometimes a slot or two, rarely megabytes; ops whose
    // buffers hold n blocks get n times less per rank.
    const std::uint64_t size_class = rng_.below(100);
    const std::uint64_t drawn = rng_.next();
    const bool blocks = op.kind == Kind::AllGather || op.kind == Kind::ReduceScatter ||
                        op.kind == Kind::Gather || op.kind == Kind::Scatter;
    const std::size_t cap = std::max<std::size_t>(1, max_bytes / element / (blocks ? n : 1));
    const std::size_t limit = size_class < 60 ? 257 : size_class < 90 ? 40000 : cap + 1;
    op.count = std::min<std::size_t>(drawn % limit, cap);
    op.root = static_cast<int>(rng_.below(static_cast<std::uint64_t>(n)));
    op.peer_a = static_cast<int>(rng_.below(static_cast<std::uint64_t>(n)));
    op.peer_b = static_cast<int>(rng_.below(static_cast<std::uint64_t>(n)));
    op.tag = static_cast<int>(rng_.below(4));
    return op;
  }

  // p2p-subgroups: sends of every op of the batch, then receives in reverse.
  // Ops on one group get distinct tags, ops on different groups equal ones.
  void run_batch(std::vector<Op> batch) {
    for (std::size_t k = 0; k < batch.size(); ++k) {
      batch[k].tag = 0;
      for (std::size_t j = 0; j < k; ++j) batch[k].tag += batch[j].group == batch[k].group;
    }
    for (const Op& op : batch) run_p2p(op, /*sending=*/true);
    for (auto op = batch.rbegin(); op != batch.rend(); ++op) run_p2p(*op, /*sending=*/false);
  }

  void run(const Op& op) {
    Group& g = groups_[op.group];
    if (!g.pg.is_member()) return;
    if (mode_ == Mode::Nan) {
      switch (op.type) {
        case DataType::F32: return run_nan<float, std::uint32_t>(op, g, 0x7fc00000u);
        case DataType::F64: return run_nan<double, std::uint64_t>(op, g, 0x7ff8000000000000ULL);
        case DataType::BF16: return run_nan<bfloat16, std::uint16_t>(op, g, 0x7fc0u);
        default: return run_nan<float16, std::uint16_t>(op, g, 0x7e00u);
      }
    }
    switch (op.type) {
      case DataType::F32: return run_typed<float>(op, g);
      case DataType::F64: return run_typed<double>(op, g);
      case DataType::BF16: return run_typed<bfloat16>(op, g);
      case DataType::F16: return run_typed<float16>(op, g);
      case DataType::I32: return run_typed<std::int32_t>(op, g);
      case DataType::I64: return run_typed<std::int64_t>(op, g);
    }
  }

 private:
  template <typename T>
  std::vector<T> inputs(int world_rank, std::size_t count, const Op& op, bool product) const {
    std::vector<T> v(count);
    for (std::size_t i = 0; i < count; ++i) v[i] = make<T>(input_value(world_rank, i, op.index, product));
    return v;
  }

  std::string describe(const Op& op, const Group& g) const {
    std::string s = "op #" + std::to_string(op.index) + " " + kKindNames[static_cast<int>(op.kind)] +
                    "(" + std::string(to_string(op.type)) + ", " + std::to_string(op.count) +
                    " elements";
    switch (op.kind) {
      case Kind::AllReduce:
      case Kind::ReduceScatter:
      case Kind::Reduce: s += ", " + std::string(to_string(op.reduce_op)); break;
      default: break;
    }
    return s + ") on " + g.name + " at rank " + std::to_string(world_.rank()) + " (seed " +
           std::to_string(seed_) + ")";
  }

  // Checks got[i] against want(i) for every i.
  template <typename T, typename Want>
  void expect(const Op& op, const Group& g, const char* what, const std::vector<T>& got, Want want) const {
    const double tol = op.reduce_op == ReduceOp::Average ? tolerance<T>() : 0.0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      const double w = want(i);
      const double v = value_of(got[i]);
      if (std::fabs(v - w) <= tol * std::max(1.0, std::fabs(w))) continue;
      throw CheckFailed(describe(op, g) + ": " + what + " element " + std::to_string(i) + " is " +
                        std::to_string(v) + " but should be " + std::to_string(w));
    }
  }

  template <typename T> void run_typed(const Op& op, Group& g) {
    Backend& b = g.pg.backend();
    const int n = b.world_size();
    const int me = b.rank();
    const int my_world = world_.rank();
    const std::size_t count = op.count;
    const std::size_t n_count = count * static_cast<std::size_t>(n);
    const bool product = op.reduce_op == ReduceOp::Product;
    const T sentinel = make<T>(-99);
    auto plain = [&](std::size_t world_rank, std::size_t i) {
      return static_cast<double>(input_value(static_cast<int>(world_rank), i, op.index, false));
    };
    auto member = [&](int group_rank) { return g.members[static_cast<std::size_t>(group_rank)]; };

    switch (op.kind) {
      case Kind::AllReduce: {
        auto data = inputs<T>(my_world, count, op, product);
        b.all_reduce(std::span<T>(data), op.reduce_op);
        expect(op, g, "result", data, [&](std::size_t i) {
          return reference<T>(op.reduce_op, g.members, i, op.index);
        });
        break;
      }
      case Kind::ReduceScatter: {
        const auto send = inputs<T>(my_world, n_count, op, product);
        std::vector<T> recv(count, sentinel);
        b.reduce_scatter<T>(send, recv, op.reduce_op);
        const std::size_t offset = count * static_cast<std::size_t>(me);
        expect(op, g, "recv", recv, [&](std::size_t i) {
          return reference<T>(op.reduce_op, g.members, offset + i, op.index);
        });
        break;
      }
      case Kind::Reduce: {
        const auto send = inputs<T>(my_world, count, op, product);
        std::vector<T> recv(me == op.root ? count : 0, sentinel);
        b.reduce<T>(send, recv, op.root, op.reduce_op);
        expect(op, g, "recv on root", recv, [&](std::size_t i) {
          return reference<T>(op.reduce_op, g.members, i, op.index);
        });
        break;
      }
      case Kind::Broadcast: {
        auto data = me == op.root ? inputs<T>(my_world, count, op, false) : std::vector<T>(count, sentinel);
        b.broadcast(std::span<T>(data), op.root);
        const int root_world = member(op.root);
        expect(op, g, "data", data, [&](std::size_t i) { return plain(root_world, i); });
        break;
      }
      case Kind::AllGather:
      case Kind::Gather: {
        const bool all = op.kind == Kind::AllGather;
        const auto send = inputs<T>(my_world, count, op, false);
        std::vector<T> recv(all || me == op.root ? n_count : 0, sentinel);
        if (all) {
          b.all_gather<T>(send, recv);
        } else {
          b.gather<T>(send, recv, op.root);
        }
        expect(op, g, "recv", recv, [&](std::size_t i) {
          return plain(member(static_cast<int>(i / count)), i % count);
        });
        break;
      }
      case Kind::Scatter: {
        const int root_world = member(op.root);
        const auto send = me == op.root ? inputs<T>(root_world, n_count, op, false) : std::vector<T>{};
        std::vector<T> recv(count, sentinel);
        b.scatter<T>(send, recv, op.root);
        const std::size_t offset = count * static_cast<std::size_t>(me);
        expect(op, g, "recv", recv, [&](std::size_t i) { return plain(root_world, offset + i); });
        break;
      }
      case Kind::Barrier: b.barrier(); break;
      case Kind::Pair: {
        // src -> dst; with src == dst the op is a barrier-free no-op.
        if (op.peer_a == op.peer_b) break;
        if (me == op.peer_a) {
          auto data = inputs<T>(my_world, count, op, false);
          b.send(std::span<T>(data), op.peer_b, op.tag);
        } else if (me == op.peer_b) {
          std::vector<T> data(count, sentinel);
          b.recv(std::span<T>(data), op.peer_a, op.tag);
          const int src_world = member(op.peer_a);
          expect(op, g, "recv", data, [&](std::size_t i) { return plain(src_world, i); });
        }
        break;
      }
      case Kind::Shift: {
        // Everyone sends first to the member `distance` ahead, then receives.
        const int distance = n > 1 ? 1 + op.peer_a % (n - 1) : 0;
        if (distance == 0) break;
        auto out = inputs<T>(my_world, count, op, false);
        b.send(std::span<T>(out), (me + distance) % n, op.tag);
        std::vector<T> in(count, sentinel);
        const int from = (me - distance + n) % n;
        b.recv(std::span<T>(in), from, op.tag);
        const int from_world = member(from);
        expect(op, g, "recv", in, [&](std::size_t i) { return plain(from_world, i); });
        break;
      }
    }
  }

  void run_p2p(const Op& op, bool sending) {
    Group& g = groups_[op.group];
    if (!g.pg.is_member()) return;
    switch (op.type) {
      case DataType::F32: return p2p_phase<float>(op, g, sending);
      case DataType::F64: return p2p_phase<double>(op, g, sending);
      case DataType::BF16: return p2p_phase<bfloat16>(op, g, sending);
      case DataType::F16: return p2p_phase<float16>(op, g, sending);
      case DataType::I32: return p2p_phase<std::int32_t>(op, g, sending);
      case DataType::I64: return p2p_phase<std::int64_t>(op, g, sending);
    }
  }

  // One half of a Pair or Shift op: its send, or its receive and check.
  // Inputs are salted with the op index, so a message from another op (or
  // another group) fails the check.
  template <typename T> void p2p_phase(const Op& op, Group& g, bool sending) {
    Backend& b = g.pg.backend();
    const int n = b.world_size();
    const int me = b.rank();
    int to = -1, from = -1;
    if (op.kind == Kind::Pair) {
      if (op.peer_a == op.peer_b) return;
      if (me == op.peer_a) to = op.peer_b;
      if (me == op.peer_b) from = op.peer_a;
    } else {
      const int distance = n > 1 ? 1 + op.peer_a % (n - 1) : 0;
      if (distance == 0) return;
      to = (me + distance) % n;
      from = (me - distance + n) % n;
    }
    if (sending && to >= 0) {
      auto data = inputs<T>(world_.rank(), op.count, op, false);
      b.send(std::span<T>(data), to, op.tag);
    }
    if (!sending && from >= 0) {
      std::vector<T> data(op.count, make<T>(-99));
      b.recv(std::span<T>(data), from, op.tag);
      const int from_world = g.members[static_cast<std::size_t>(from)];
      expect(op, g, "recv", data, [&](std::size_t i) {
        return static_cast<double>(input_value(from_world, i, op.index, false));
      });
    }
  }

  // NaN payloads: element i is a NaN on every member when i % 3 == 0 (payload
  // and sign differ by rank), an ordinary value otherwise. The buffer starts
  // world-rank elements past a 64-byte boundary.
  template <typename T, typename Bits> void run_nan(const Op& op, Group& g, Bits quiet_nan) {
    Backend& b = g.pg.backend();
    const int my_world = world_.rank();
    const std::size_t count = op.count;
    const bool product = op.reduce_op == ReduceOp::Product;
    std::vector<unsigned char> storage((count + 64) * sizeof(T) + 64);
    const auto address = reinterpret_cast<std::uintptr_t>(storage.data());
    T* data = reinterpret_cast<T*>(storage.data() + (64 - address % 64) % 64) + my_world;
    for (std::size_t i = 0; i < count; ++i) {
      if (i % 3 == 0) {
        const Bits sign = static_cast<Bits>(static_cast<Bits>(my_world % 2) << (8 * sizeof(Bits) - 1));
        const Bits bits = static_cast<Bits>(sign | quiet_nan | static_cast<Bits>(1 + my_world + i % 7));
        std::memcpy(static_cast<void*>(data + i), &bits, sizeof(T));
      } else {
        data[i] = make<T>(input_value(my_world, i, op.index, product));
      }
    }
    std::vector<Bits> written(count);
    if (count != 0) std::memcpy(written.data(), static_cast<const void*>(data), count * sizeof(T));
    b.all_reduce(std::span<T>(data, count), op.reduce_op);
    std::vector<Bits> bits(count);
    if (count != 0) std::memcpy(bits.data(), static_cast<const void*>(data), count * sizeof(T));  // no null to memcpy
    // A group of one combines nothing: its all_reduce hands the buffer back
    // untouched, NaN payloads and signs too (README); a group of more gives
    // the canonical NaN.
    const bool alone = g.members.size() == 1;
    for (std::size_t i = 0; i < count; i += 3) {
      const Bits expected = alone ? written[i] : quiet_nan;
      if (bits[i] != expected) {
        throw CheckFailed(describe(op, g) + ": element " + std::to_string(i) + " has bits " + std::to_string(bits[i]) +
                          (alone ? ", not its input's " : ", not the canonical NaN ") + std::to_string(expected));
      }
    }
    std::vector<T> ordinary(data, data + count);  // the NaNs, checked above, as 0
    for (std::size_t i = 0; i < count; i += 3) ordinary[i] = make<T>(0);
    expect(op, g, "result", ordinary, [&](std::size_t i) {
      return i % 3 == 0 ? 0.0 : reference<T>(op.reduce_op, g.members, i, op.index);
    });
    // Every member must hold the same bits: all-gather a hash of them.
    std::uint64_t hash = 1469598103934665603ULL;
    for (Bits x : bits) hash = (hash ^ static_cast<std::uint64_t>(x)) * 1099511628211ULL;
    std::vector<std::int64_t> mine{static_cast<std::int64_t>(hash)};
    std::vector<std::int64_t> all(static_cast<std::size_t>(b.world_size()));
    b.all_gather<std::int64_t>(mine, all);
    for (std::size_t m = 0; m < all.size(); ++m) {
      if (all[m] != all[0]) {
        throw CheckFailed(describe(op, g) + ": rank " + std::to_string(g.members[m]) +
                          "'s result differs bitwise from rank " + std::to_string(g.members[0]) + "'s");
      }
    }
  }

  World& world_;
  std::vector<Group>& groups_;
  std::uint64_t seed_;
  Rng rng_;
  Mode mode_;
  int only_group_;
};

struct Options {
  std::uint64_t seed = 0;
  bool seed_given = false;
  long long ops = 2000;
  bool endless = false;
  std::size_t max_bytes = 3u << 20;
  int exit_rank = -1;
  long long exit_at = -1;
  int exit_code = 3;
  Mode mode = Mode::Mixed;
};

constexpr const char* kUsage =
    "Usage: axon-launch -n N stress_collectives [OPTIONS]\n"
    "Runs random collectives and point-to-point messages on every rank and checks every result.\n"
    "\n"
    "Options:\n"
    "  --seed S          the sequence of operations (default: drawn per job and printed first)\n"
    "  --ops N           operations to run (default 2000)\n"
    "  --max-bytes B     largest message in bytes (default 3145728)\n"
    "  --endless         run until killed (the fault tests)\n"
    "  --exit-rank R --exit-at K [--exit-code C]\n"
    "                    rank R exits with status C (default 3) just before operation K\n"
    "  --mode M          mixed (default), thread-per-group, p2p-subgroups or nan\n"
    "  --tag T           ignored; marks the command line for pgrep\n"
    "  -h, --help        print this and exit\n"
    "\n"
    "A failure prints the seed to rerun: axon-launch -n N stress_collectives --seed S --ops N\n";

// Throws std::invalid_argument naming the argument that is wrong.
Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    // A whole number; stoll alone would say only "stoll" about "abc".
    auto number = [&]() -> long long {
      const std::string text = value();
      std::size_t used = 0;
      long long parsed = 0;
      try {
        parsed = std::stoll(text, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == 0 || used != text.size()) throw std::invalid_argument(a + " " + text + " is not a whole number");
      return parsed;
    };
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (a == "--seed") {
      o.seed = static_cast<std::uint64_t>(number());
      o.seed_given = true;
    } else if (a == "--ops") {
      o.ops = number();
    } else if (a == "--max-bytes") {
      o.max_bytes = static_cast<std::size_t>(number());
    } else if (a == "--endless") {
      o.endless = true;
    } else if (a == "--exit-rank") {
      o.exit_rank = static_cast<int>(number());
    } else if (a == "--exit-at") {
      o.exit_at = number();
    } else if (a == "--exit-code") {
      o.exit_code = static_cast<int>(number());
    } else if (a == "--mode") {
      const std::string m = value();
      if (m == "mixed") o.mode = Mode::Mixed;
      else if (m == "thread-per-group") o.mode = Mode::ThreadPerGroup;
      else if (m == "p2p-subgroups") o.mode = Mode::P2pSubgroups;
      else if (m == "nan") o.mode = Mode::Nan;
      else throw std::invalid_argument("unknown --mode " + m + " (mixed, thread-per-group, p2p-subgroups, nan)");
    } else if (a == "--tag") {
      value();  // only marks the command line (for pgrep in the fault tests)
    } else {
      throw std::invalid_argument("unknown argument " + a);
    }
  }
  return o;
}

// Bad arguments are found before World::init(), so there is no rank to name.
Options parse_or_exit(int argc, char** argv) {
  try {
    return parse(argc, argv);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "stress_collectives: %s (see stress_collectives --help)\n", e.what());
    std::exit(2);
  }
}

std::vector<Group> make_groups(World& world) {
  const int n = world.world_size();
  std::vector<int> everyone(static_cast<std::size_t>(n)), evens, odds, first_three, upper_half;
  std::iota(everyone.begin(), everyone.end(), 0);
  for (int r = 0; r < n; ++r) {
    (r % 2 ? odds : evens).push_back(r);
    if (r < 3) first_three.push_back(r);
    if (r >= n / 2) upper_half.push_back(r);
  }
  std::vector<std::pair<std::string, std::vector<int>>> lists = {
      {"evens", evens}, {"odds", odds}, {"reversed world", {everyone.rbegin(), everyone.rend()}},
      {"first three", first_three}, {"upper half", upper_half}};
  std::vector<Group> groups;
  groups.push_back(Group{"world", everyone, world.default_group()});
  for (auto& [name, members] : lists) {
    if (members.empty()) continue;
    ProcessGroup pg = world.new_group(members);  // collective: every rank, same order
    groups.push_back(Group{name, members, std::move(pg)});
  }
  return groups;
}

// One thread per group this rank belongs to, each running `ops` random ops
// on its group alone (seeded per group, so members agree); returns the ops run.
std::uint64_t run_thread_per_group(World& world, std::vector<Group>& groups, const Options& options) {
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(groups.size());
  for (std::size_t gi = 0; gi < groups.size(); ++gi) {
    if (!groups[gi].pg.is_member()) continue;
    threads.emplace_back([&, gi] {
      try {
        Runner runner(world, groups, options.seed * 1000003ULL + gi, Mode::ThreadPerGroup,
                      static_cast<int>(gi));
        for (long long k = 0; k < options.ops; ++k) {
          runner.run(runner.draw(static_cast<std::uint64_t>(k), options.max_bytes));
        }
      } catch (...) {
        errors[gi] = std::current_exception();
        world.backend().abort("a thread of thread-per-group failed");
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return static_cast<std::uint64_t>(options.ops) * groups.size();
}

}  // namespace

int main(int argc, char** argv) {
  int rank = -1;
  try {
    Options options = parse_or_exit(argc, argv);
    if (!options.seed_given) {
      // A fresh seed, the same on every rank: derived from the launcher's pid.
      options.seed = std::hash<std::string>{}("axon-" + std::to_string(::getppid())) & 0xFFFFFFFFu;
    }
    World world = World::init();
    rank = world.rank();
    if (rank == 0) {
      std::printf("stress seed=%llu ops=%s (rerun: --seed %llu --ops N)\n",
                  static_cast<unsigned long long>(options.seed),
                  options.endless ? "endless" : std::to_string(options.ops).c_str(),
                  static_cast<unsigned long long>(options.seed));
    }
    std::printf("ready rank=%d pid=%d launcher=%d\n", rank, static_cast<int>(::getpid()),
                static_cast<int>(::getppid()));
    std::fflush(stdout);

    std::vector<Group> groups = make_groups(world);
    Runner runner(world, groups, options.seed, options.mode);
    const auto started = std::chrono::steady_clock::now();
    std::uint64_t index = 0;
    if (options.mode == Mode::ThreadPerGroup) {
      index = run_thread_per_group(world, groups, options);
    } else if (options.mode == Mode::P2pSubgroups) {
      for (; static_cast<long long>(index) < options.ops; index += 4) {
        std::vector<Op> batch;
        for (std::uint64_t k = 0; k < 4; ++k) batch.push_back(runner.draw(index + k, options.max_bytes));
        runner.run_batch(std::move(batch));
      }
    }
    for (; options.mode != Mode::ThreadPerGroup && options.mode != Mode::P2pSubgroups &&
           (options.endless || static_cast<long long>(index) < options.ops);
         ++index) {
      if (rank == options.exit_rank && static_cast<long long>(index) == options.exit_at) {
        const auto now = std::chrono::system_clock::now().time_since_epoch();
        std::printf("exiting rank=%d code=%d at_ns=%lld\n", rank, options.exit_code,
                    static_cast<long long>(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count()));
        std::fflush(stdout);
        std::_Exit(options.exit_code);
      }
      runner.run(runner.draw(index, options.max_bytes));
    }
    world.barrier();
    if (rank == 0) {
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      std::printf("stress: %llu random ops correct on %d rank%s in %.1f s\n",
                  static_cast<unsigned long long>(index), world.world_size(), world.world_size() == 1 ? "" : "s", seconds);
    }
    return 0;
  } catch (const PeerFailure& e) {
    std::fprintf(stderr, "stress rank %d caught PeerFailure: %s\n", rank, e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stress rank %d FAILED: %s\n", rank, e.what());
    return 1;
  }
}
