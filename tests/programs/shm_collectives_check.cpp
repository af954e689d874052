// A rank program for axon-launch: runs every Backend operation on the world
// and on subgroups and checks each result against a reference that every rank
// computes from the deterministic inputs of all ranks.
//
//   axon-launch -n N shm_collectives_check
//
// Sweeps all_reduce, reduce_scatter and reduce over the five ReduceOps, plus
// broadcast, all_gather, gather, scatter, all_to_all, barrier, over element counts
// {0, 1, 17, 4096, 1<<20, one slot + 1}, on the world, on two disjoint
// subgroups at once (evens and odds) and on the world in reverse order; then
// send/recv rings where everyone sends first, with tags received out of
// order. Results that every rank shares are also hashed and all-gathered to
// check that they are bitwise equal everywhere. Exits 1 with a message naming
// the case on the first mismatch.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "axonml/distributed.hpp"

using namespace axonml::distributed;

namespace {

const ReduceOp kReduceOps[] = {ReduceOp::Sum, ReduceOp::Product, ReduceOp::Min, ReduceOp::Max,
                               ReduceOp::Average};

struct CheckFailed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Small integers in -2..4: with up to 8 ranks every sum, product (at most
// 4^8), min and max is exact in f32, so references compare bit for bit.
// `salt` makes each case's inputs differ.
float input_value(int world_rank, std::size_t i, int salt) {
  const auto mixed = i * 7 + static_cast<std::size_t>(world_rank) * 13 + static_cast<std::size_t>(salt) * 5;
  return static_cast<float>(static_cast<int>(mixed % 5) - 2 + world_rank % 3);
}

std::vector<float> inputs(int world_rank, std::size_t count, int salt) {
  std::vector<float> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = input_value(world_rank, i, salt);
  return v;
}

// The reduction of element i over the members, in member order.
float reduced(ReduceOp op, const std::vector<int>& members, std::size_t i, int salt) {
  float acc = input_value(members[0], i, salt);
  for (std::size_t m = 1; m < members.size(); ++m) {
    const float x = input_value(members[m], i, salt);
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Average: acc = acc + x; break;
      case ReduceOp::Product: acc = acc * x; break;
      case ReduceOp::Min: acc = std::min(acc, x); break;
      case ReduceOp::Max: acc = std::max(acc, x); break;
    }
  }
  if (op == ReduceOp::Average) acc = acc * (1.0f / static_cast<float>(members.size()));
  return acc;
}

std::uint64_t hash_bytes(const void* data, std::size_t bytes) {
  std::uint64_t h = 1469598103934665603ULL;
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

// One group under test: its communicator and members' world ranks.
struct GroupUnderTest {
  std::string name;
  Backend* backend;
  std::vector<int> members;  // world ranks, by group rank
  int world_rank;
};

class Checker {
 public:
  explicit Checker(const GroupUnderTest& g) : g_(g), n_(g.backend->world_size()), me_(g.backend->rank()) {}

  void expect(const std::string& what, const std::vector<float>& got,
              const std::function<float(std::size_t)>& want) const {
    for (std::size_t i = 0; i < got.size(); ++i) {
      const float w = want(i);
      if (std::memcmp(&got[i], &w, sizeof(float)) != 0) {
        std::ostringstream s;
        s << "rank " << g_.world_rank << " in " << g_.name << ": " << what << " (" << got.size()
          << " elements): element " << i << " is " << got[i] << " but should be " << w;
        throw CheckFailed(s.str());
      }
    }
  }

  // Checks that `result` is bitwise the same on every member.
  void expect_same_everywhere(const std::string& what, const std::vector<float>& result) const {
    const auto mine = static_cast<std::int64_t>(hash_bytes(result.data(), result.size() * sizeof(float)));
    std::vector<std::int64_t> all(static_cast<std::size_t>(n_));
    g_.backend->all_gather<std::int64_t>(std::span<const std::int64_t>(&mine, 1), std::span<std::int64_t>(all));
    for (int m = 0; m < n_; ++m) {
      if (all[static_cast<std::size_t>(m)] != mine) {
        throw CheckFailed("rank " + std::to_string(g_.world_rank) + " in " + g_.name + ": " + what +
                          ": result differs from group rank " + std::to_string(m) + "'s (hash)");
      }
    }
  }

  void run_all(const std::vector<std::size_t>& counts) {
    int salt = 0;
    for (std::size_t count : counts) {
      const std::string size = " of " + std::to_string(count);
      for (ReduceOp op : kReduceOps) {
        all_reduce(count, op, ++salt, "all_reduce(" + std::string(to_string(op)) + ")" + size);
        reduce_scatter(count, op, ++salt, "reduce_scatter(" + std::string(to_string(op)) + ")" + size);
        reduce(count, op, ++salt, "reduce(" + std::string(to_string(op)) + ")" + size);
      }
      broadcast(count, ++salt, "broadcast" + size);
      all_gather(count, ++salt, "all_gather" + size);
      gather(count, ++salt, "gather" + size);
      scatter(count, ++salt, "scatter" + size);
      all_to_all(count, ++salt, "all_to_all" + size);
      g_.backend->barrier();
    }
  }

 private:
  int root_for(int salt) const { return salt % n_; }

  void all_reduce(std::size_t count, ReduceOp op, int salt, const std::string& what) {
    auto data = inputs(g_.world_rank, count, salt);
    g_.backend->all_reduce(std::span<float>(data), op);
    expect(what, data, [&](std::size_t i) { return reduced(op, g_.members, i, salt); });
    expect_same_everywhere(what, data);
  }

  void reduce_scatter(std::size_t count, ReduceOp op, int salt, const std::string& what) {
    const auto send = inputs(g_.world_rank, count * static_cast<std::size_t>(n_), salt);
    std::vector<float> recv(count, -99.0f);
    g_.backend->reduce_scatter<float>(send, recv, op);
    const std::size_t offset = count * static_cast<std::size_t>(me_);
    expect(what, recv, [&](std::size_t i) { return reduced(op, g_.members, offset + i, salt); });
  }

  void reduce(std::size_t count, ReduceOp op, int salt, const std::string& what) {
    const int root = root_for(salt);
    const auto send = inputs(g_.world_rank, count, salt);
    std::vector<float> recv(me_ == root ? count : 0, -99.0f);
    g_.backend->reduce<float>(send, recv, root, op);
    if (me_ == root) expect(what, recv, [&](std::size_t i) { return reduced(op, g_.members, i, salt); });
  }

  void broadcast(std::size_t count, int salt, const std::string& what) {
    const int root = root_for(salt);
    auto data = me_ == root ? inputs(g_.world_rank, count, salt) : std::vector<float>(count, -99.0f);
    g_.backend->broadcast(std::span<float>(data), root);
    const int root_world = g_.members[static_cast<std::size_t>(root)];
    expect(what, data, [&](std::size_t i) { return input_value(root_world, i, salt); });
    expect_same_everywhere(what, data);
  }

  void all_gather(std::size_t count, int salt, const std::string& what) {
    const auto send = inputs(g_.world_rank, count, salt);
    std::vector<float> recv(count * static_cast<std::size_t>(n_), -99.0f);
    g_.backend->all_gather<float>(send, recv);
    expect(what, recv, [&](std::size_t i) {
      return input_value(g_.members[i / count], i % count, salt);
    });
    expect_same_everywhere(what, recv);
  }

  void gather(std::size_t count, int salt, const std::string& what) {
    const int root = root_for(salt);
    const auto send = inputs(g_.world_rank, count, salt);
    std::vector<float> recv(me_ == root ? count * static_cast<std::size_t>(n_) : 0, -99.0f);
    g_.backend->gather<float>(send, recv, root);
    if (me_ != root) return;
    expect(what, recv, [&](std::size_t i) {
      return input_value(g_.members[i / count], i % count, salt);
    });
  }

  void scatter(std::size_t count, int salt, const std::string& what) {
    const int root = root_for(salt);
    const int root_world = g_.members[static_cast<std::size_t>(root)];
    const auto send = me_ == root ? inputs(root_world, count * static_cast<std::size_t>(n_), salt)
                                  : std::vector<float>{};
    std::vector<float> recv(count, -99.0f);
    g_.backend->scatter<float>(send, recv, root);
    const std::size_t offset = count * static_cast<std::size_t>(me_);
    expect(what, recv, [&](std::size_t i) { return input_value(root_world, offset + i, salt); });
  }

  // Block q of member m's input goes to member q: member me's block m is
  // element me * count + i of member m's input.
  void all_to_all(std::size_t count, int salt, const std::string& what) {
    const std::size_t total = count * static_cast<std::size_t>(n_);
    const auto send = inputs(g_.world_rank, total, salt);
    std::vector<float> recv(total, -99.0f);
    g_.backend->all_to_all<float>(send, recv);
    expect(what, recv, [&](std::size_t i) {
      return input_value(g_.members[i / count], static_cast<std::size_t>(me_) * count + i % count, salt);
    });
  }

  const GroupUnderTest& g_;
  int n_;
  int me_;
};

// Everyone sends first to the next rank, three messages with tags 0, 1, 2 of
// different sizes plus a second tag-1 message, then receives from the
// previous rank in the order 2, 1, 0, 1: per (src, tag) order must hold.
void check_ring(Backend& world, std::size_t count) {
  const int n = world.world_size();
  const int me = world.rank();
  const int next = (me + 1) % n;
  const int prev = (me + n - 1) % n;
  const std::size_t sizes[] = {count, count / 2 + 1, 3, 5};
  const int tags[] = {0, 1, 2, 1};
  for (int m = 0; m < 4; ++m) {
    auto data = inputs(me, sizes[m], 1000 + m);
    world.send(std::span<float>(data), next, tags[m]);
  }
  for (int m : {2, 1, 0, 3}) {
    std::vector<float> got(sizes[m], -99.0f);
    world.recv(std::span<float>(got), prev, tags[m]);
    const auto want = inputs(prev, sizes[m], 1000 + m);
    if (!got.empty() && std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) != 0) {
      throw CheckFailed("rank " + std::to_string(me) + ": ring recv of message " + std::to_string(m) +
                        " (tag " + std::to_string(tags[m]) + ", " + std::to_string(sizes[m]) +
                        " elements) from rank " + std::to_string(prev) + " has the wrong contents");
    }
  }
}

std::string list(const std::vector<int>& ranks) {
  std::string s = "[";
  for (std::size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "]";
}

}  // namespace

int main() {
  int world_rank = -1;
  try {
    World world = World::init();
    world_rank = world.rank();
    const int n = world.world_size();
    auto* arena = dynamic_cast<ArenaBackend*>(&world.backend());
    const std::size_t slot_elements = arena ? arena->slot_bytes() / sizeof(float) : 4096;
    const std::vector<std::size_t> counts = {0, 1, 17, 4096, std::size_t{1} << 20, slot_elements + 1};
    const std::vector<std::size_t> small_counts = {0, 1, 17, slot_elements + 1};

    std::vector<int> everyone(static_cast<std::size_t>(n));
    std::iota(everyone.begin(), everyone.end(), 0);
    {
      GroupUnderTest g{"world", &world.backend(), everyone, world_rank};
      Checker(g).run_all(counts);
    }

    // Two disjoint subgroups running at the same time: evens and odds.
    std::vector<int> evens, odds;
    for (int r = 0; r < n; ++r) (r % 2 ? odds : evens).push_back(r);
    const ProcessGroup even_group = world.new_group(evens);
    const ProcessGroup odd_group = odds.empty() ? even_group : world.new_group(odds);
    const ProcessGroup& mine = world_rank % 2 ? odd_group : even_group;
    const auto& members = world_rank % 2 ? odds : evens;
    {
      GroupUnderTest g{"group " + list(members), &mine.backend(), members, world_rank};
      Checker(g).run_all(counts);
    }

    // The world in reverse: group rank k is world rank n-1-k.
    std::vector<int> reversed(everyone.rbegin(), everyone.rend());
    const ProcessGroup reversed_group = world.new_group(reversed);
    {
      GroupUnderTest g{"group " + list(reversed), &reversed_group.backend(), reversed, world_rank};
      Checker(g).run_all(small_counts);
    }

    for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{17}, std::size_t{1} << 20}) {
      check_ring(world.backend(), count);
    }
    world.barrier();
    if (world_rank == 0) std::printf("all collectives correct on %d ranks\n", n);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shm_collectives_check (rank %d) FAILED: %s\n", world_rank, e.what());
    return 1;
  }
}
