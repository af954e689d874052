// mpi_rank_checks [--nodes N]: run under mpirun, every rank. Checks every
// Backend op of the world World::init() gives (an MpiBackend, hierarchical
// or not as the environment says; --nodes N: expect N nodes, 0 = flat) and
// of a flat MpiBackend, for every dtype and reduce op and sizes around the
// node and slot boundaries, against a reference computed with the library's
// own reduce kernels (the semantics every backend shares). Then: the
// hierarchical and flat results of random floats agree (within float
// reassociation) and are bitwise identical on every rank; subgroups, point
// to point, and the errors. Exits 1 after printing every failed check.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "axonml/distributed.hpp"
#include "axonml/distributed/mpi_backend.hpp"
#include "kernels/reduce.hpp"

using namespace axonml::distributed;

namespace {

int failures = 0;
int checks = 0;
int me = 0;

void expect(bool ok, const std::string& what) {
  ++checks;
  if (!ok) {
    ++failures;
    std::fprintf(stderr, "[rank %d] FAILED: %s\n", me, what.c_str());
  }
}

// Small integers: every sum and product of 4 ranks is exact in f32, and
// exact or rounded once in bf16 / f16 exactly as the kernels round.
template <typename T> T input(int rank, std::size_t i) {
  const int v = static_cast<int>((static_cast<std::size_t>(rank) * 7 + i * 3) % 11) - 5;
  return static_cast<T>(static_cast<float>(v == 0 ? 1 : v));
}
template <> std::int32_t input<std::int32_t>(int rank, std::size_t i) {
  return static_cast<std::int32_t>((static_cast<std::size_t>(rank) * 7 + i * 3) % 11) - 5;
}
template <> std::int64_t input<std::int64_t>(int rank, std::size_t i) {
  return input<std::int32_t>(rank, i);
}

template <typename T> std::vector<T> inputs(int rank, std::size_t count, std::size_t salt = 0) {
  std::vector<T> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = input<T>(rank, i + salt);
  return v;
}

template <typename T> bool same_bytes(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// Element-wise reduction of every rank's vector, in rank order, by the kernels.
template <typename T> std::vector<T> reference(const std::vector<std::vector<T>>& all, ReduceOp op) {
  std::vector<const std::byte*> sources;
  for (const auto& v : all) sources.push_back(reinterpret_cast<const std::byte*>(v.data()));
  std::vector<T> out(all.front().size());
  kernels::reduce(data_type_v<T>, op, sources, reinterpret_cast<std::byte*>(out.data()), out.size());
  return out;
}

template <typename T> void check_type(Backend& b, const std::string& label) {
  const int n = b.world_size();
  const int r = b.rank();
  const std::string type(to_string(data_type_v<T>));
  for (const std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000},
                                   std::size_t{1001}, std::size_t{70001}}) {
    const std::string at = label + " " + type + " count " + std::to_string(count);
    std::vector<std::vector<T>> all(static_cast<std::size_t>(n));
    for (int q = 0; q < n; ++q) all[static_cast<std::size_t>(q)] = inputs<T>(q, count);

    for (const ReduceOp op : {ReduceOp::Sum, ReduceOp::Product, ReduceOp::Min, ReduceOp::Max,
                              ReduceOp::Average}) {
      const std::string with = at + " " + std::string(to_string(op));
      const auto expected = reference(all, op);
      auto data = all[static_cast<std::size_t>(r)];
      b.all_reduce(std::span<T>(data), op);
      expect(same_bytes(data, expected), "all_reduce " + with);

      std::vector<T> result(count);
      b.reduce(std::span<const T>(all[static_cast<std::size_t>(r)]), std::span<T>(result), n - 1, op);
      if (r == n - 1) expect(same_bytes(result, expected), "reduce " + with);

      // reduce_scatter: `count` per rank out of n * count.
      std::vector<std::vector<T>> wide(static_cast<std::size_t>(n));
      for (int q = 0; q < n; ++q) wide[static_cast<std::size_t>(q)] = inputs<T>(q, count * static_cast<std::size_t>(n), 5);
      const auto wide_expected = reference(wide, op);
      std::vector<T> block(count);
      b.reduce_scatter(std::span<const T>(wide[static_cast<std::size_t>(r)]), std::span<T>(block), op);
      const std::vector<T> mine(wide_expected.begin() + static_cast<std::ptrdiff_t>(count * static_cast<std::size_t>(r)),
                                wide_expected.begin() + static_cast<std::ptrdiff_t>(count * static_cast<std::size_t>(r + 1)));
      expect(same_bytes(block, mine), "reduce_scatter " + with);
    }

    std::vector<T> concatenated;
    for (const auto& v : all) concatenated.insert(concatenated.end(), v.begin(), v.end());
    for (const int root : {0, n - 1, n / 2}) {
      const std::string from = at + " root " + std::to_string(root);
      auto data = r == root ? all[static_cast<std::size_t>(r)] : std::vector<T>(count);
      b.broadcast(std::span<T>(data), root);
      expect(same_bytes(data, all[static_cast<std::size_t>(root)]), "broadcast " + from);

      std::vector<T> gathered(r == root ? count * static_cast<std::size_t>(n) : 0);
      b.gather(std::span<const T>(all[static_cast<std::size_t>(r)]), std::span<T>(gathered), root);
      if (r == root) expect(same_bytes(gathered, concatenated), "gather " + from);

      std::vector<T> piece(count);
      const std::vector<T> none;
      b.scatter(std::span<const T>(r == root ? concatenated : none), std::span<T>(piece), root);
      expect(same_bytes(piece, all[static_cast<std::size_t>(r)]), "scatter " + from);
    }
    std::vector<T> gathered(count * static_cast<std::size_t>(n));
    b.all_gather(std::span<const T>(all[static_cast<std::size_t>(r)]), std::span<T>(gathered));
    expect(same_bytes(gathered, concatenated), "all_gather " + at);

    // all_to_all: block q of rank p's wide input goes to rank q.
    std::vector<std::vector<T>> wide(static_cast<std::size_t>(n));
    for (int q = 0; q < n; ++q) wide[static_cast<std::size_t>(q)] = inputs<T>(q, count * static_cast<std::size_t>(n), 9);
    std::vector<T> exchanged(count * static_cast<std::size_t>(n));
    b.all_to_all(std::span<const T>(wide[static_cast<std::size_t>(r)]), std::span<T>(exchanged));
    std::vector<T> expected_blocks;
    for (int q = 0; q < n; ++q) {
      const auto& theirs = wide[static_cast<std::size_t>(q)];
      const auto begin = theirs.begin() + static_cast<std::ptrdiff_t>(count * static_cast<std::size_t>(r));
      expected_blocks.insert(expected_blocks.end(), begin, begin + static_cast<std::ptrdiff_t>(count));
    }
    expect(same_bytes(exchanged, expected_blocks), "all_to_all " + at);
  }
}

void check_every_op(Backend& b, const std::string& label) {
  check_type<float>(b, label);
  check_type<double>(b, label);
  check_type<bfloat16>(b, label);
  check_type<float16>(b, label);
  check_type<std::int32_t>(b, label);
  check_type<std::int64_t>(b, label);
  b.barrier();
}

// Random floats: reassociation shows, so hierarchical may differ from flat in
// the last bits, but every rank must hold the very same bytes.
void check_random_floats(Backend& world, Backend& flat) {
  for (const std::size_t count : {std::size_t{3}, std::size_t{4097}, std::size_t{300001}}) {
    std::mt19937 random(static_cast<unsigned>(1234 + world.rank()));
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::vector<float> a(count);
    for (auto& x : a) x = uniform(random);
    auto b = a;
    world.all_reduce(std::span<float>(a), ReduceOp::Average);
    flat.all_reduce(std::span<float>(b), ReduceOp::Average);
    float worst = 0;
    for (std::size_t i = 0; i < count; ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
    expect(worst <= 1e-6f, "random all_reduce of " + std::to_string(count) +
                               ": world and flat differ by " + std::to_string(worst));
    for (auto* result : {&a, &b}) {
      std::vector<float> everyone(count * static_cast<std::size_t>(flat.world_size()));
      flat.all_gather(std::span<const float>(*result), std::span<float>(everyone));
      bool identical = true;
      for (int q = 0; q < flat.world_size(); ++q) {
        identical = identical && std::memcmp(everyone.data() + count * static_cast<std::size_t>(q),
                                             result->data(), count * sizeof(float)) == 0;
      }
      expect(identical, "random all_reduce of " + std::to_string(count) +
                            (result == &a ? " (world)" : " (flat)") + " is bitwise identical on every rank");
    }
  }
}

void check_groups_and_point_to_point(Backend& b) {
  const int n = b.world_size();
  const int r = b.rank();
  // The odd ranks, highest first: ranks are positions in the list.
  std::vector<int> odd;
  for (int q = n - 1; q >= 0; --q)
    if (q % 2 == 1) odd.push_back(q);
  auto group = b.new_group(odd);
  expect((group != nullptr) == (r % 2 == 1), "new_group membership");
  if (group) {
    expect(group->world_size() == static_cast<int>(odd.size()), "new_group size");
    expect(odd[static_cast<std::size_t>(group->rank())] == r, "new_group rank is the position in the list");
    std::vector<std::int64_t> v{r, 1};
    group->all_reduce(std::span<std::int64_t>(v), ReduceOp::Sum);
    std::int64_t sum = 0;
    for (int q : odd) sum += q;
    expect(v[0] == sum && v[1] == static_cast<std::int64_t>(odd.size()), "all_reduce in a subgroup");
  }

  // A ring, two tags, received in the opposite order of sending.
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  std::vector<double> one{double(r) + 0.5}, two{double(r) * 10, 7.0};
  b.send(std::span<double>(one), next, 1);
  b.send(std::span<double>(two), next, 2);
  std::vector<double> got_two(2), got_one(1);
  b.recv(std::span<double>(got_two), prev, 2);
  b.recv(std::span<double>(got_one), prev, 1);
  expect(got_one[0] == prev + 0.5 && got_two[0] == prev * 10 && got_two[1] == 7.0,
         "send / recv around a ring with tags");

  // A message shorter than the receive buffer names both sizes, as the
  // shared-memory backend does.
  std::vector<float> three(3, 1.0f), four(4);
  b.send(std::span<float>(three), next, 9);
  std::string error;
  try {
    b.recv(std::span<float>(four), prev, 9);
  } catch (const InvalidArgument& e) {
    error = e.what();
  }
  expect(error == "recv on rank " + std::to_string(r) + " from rank " + std::to_string(prev) +
                      " with tag 9: the message has 12 bytes but the buffer has 16",
         "recv of a shorter message throws InvalidArgument naming the sizes: '" + error + "'");

  // abort() ends the whole job, under either launcher: mpi_promises abort.
  b.barrier();
}

}  // namespace

int main(int argc, char** argv) {
  int expected_nodes = -1;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--nodes") expected_nodes = std::atoi(argv[i + 1]);
  }
  try {
    World world = World::init();
    me = world.rank();
    expect(world.backend().name() == "mpi", "World::init() under mpirun is the MPI backend");
    auto* mpi = dynamic_cast<MpiBackend*>(&world.backend());
    if (mpi != nullptr && expected_nodes >= 0) {
      const int nodes = mpi->hierarchical() ? mpi->nodes() : 0;
      expect(nodes == expected_nodes, "expected " + std::to_string(expected_nodes) +
                                          " nodes (0 = flat), have " + std::to_string(nodes));
    }
    auto flat = MpiBackend::create(MpiOptions{.hierarchical = false});
    check_every_op(world.backend(), "world");
    check_every_op(*flat, "flat");
    check_random_floats(world.backend(), *flat);
    check_groups_and_point_to_point(world.backend());
    int total = failures;
    flat->all_reduce(std::span<int>(&total, 1), ReduceOp::Sum);
    if (me == 0) {
      std::printf("mpi_rank_checks: %d ranks, %s, %d checks per rank, %d failures\n", world.world_size(),
                  mpi && mpi->hierarchical() ? ("hierarchical over " + std::to_string(mpi->nodes()) + " nodes").c_str()
                                             : "flat",
                  checks, total);
    }
    return total == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] error: %s\n", me, e.what());
    return 2;
  }
}
