// A libtorch program that holds its group as the concrete type, as the README's
// close_store_together_as_it_goes() needs (c10::make_intrusive<ProcessGroupAxon>),
// and calls every collective with its options left out, as code written for
// ProcessGroupGloo does. The overrides once dropped the base's default
// options, so these calls did not compile (a review). Run under axon-launch
// -n 2; each op's result is checked on every rank.
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "axonml/torch/process_group.hpp"

namespace {

int failures = 0;

void expect(bool ok, const char* what, int rank) {
  if (!ok) {
    std::fprintf(stderr, "rank %d: %s gave a wrong result\n", rank, what);
    ++failures;
  }
}

}  // namespace

int main() {
  const int rank = std::atoi(std::getenv("RANK"));
  const int size = std::atoi(std::getenv("WORLD_SIZE"));
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(std::atoi(std::getenv("MASTER_PORT")));
  options.isServer = rank == 0;
  options.numWorkers = size;
  auto store = c10::make_intrusive<c10d::TCPStore>(std::getenv("MASTER_ADDR"), options);
  c10::intrusive_ptr<axonml::torch::ProcessGroupAxon> pg =
      c10::make_intrusive<axonml::torch::ProcessGroupAxon>(store, rank, size, std::chrono::seconds(60));
  pg->close_store_together_as_it_goes();

  const auto mine = [&] { return at::full({4}, rank + 1, at::kFloat); };
  const float sum = static_cast<float>(size * (size + 1) / 2);
  {
    std::vector<at::Tensor> t{mine()};
    pg->allreduce(t)->wait();
    expect(t[0].eq(sum).all().item<bool>(), "allreduce", rank);
  }
  {
    std::vector<at::Tensor> t{mine(), mine()};
    pg->allreduce_coalesced(t)->wait();
    expect(t[0].eq(sum).all().item<bool>() && t[1].eq(sum).all().item<bool>(), "allreduce_coalesced", rank);
  }
  {
    std::vector<at::Tensor> t{mine()};
    pg->broadcast(t)->wait();
    expect(t[0].eq(1).all().item<bool>(), "broadcast", rank);
  }
  {
    std::vector<at::Tensor> t{mine()};
    pg->reduce(t)->wait();
    expect(rank != 0 || t[0].eq(sum).all().item<bool>(), "reduce", rank);
  }
  const at::Tensor by_rank = at::arange(1, size + 1, at::kFloat).repeat_interleave(4);
  {
    std::vector<at::Tensor> in{mine()};
    std::vector<std::vector<at::Tensor>> out(1);
    for (int r = 0; r < size; ++r) out[0].push_back(at::empty({4}));
    pg->allgather(out, in)->wait();
    expect(at::cat(out[0]).equal(by_rank), "allgather", rank);
  }
  {
    at::Tensor in = mine();
    at::Tensor out = at::empty({4 * size});
    pg->_allgather_base(out, in)->wait();
    expect(out.equal(by_rank), "_allgather_base", rank);
  }
  {
    std::vector<at::Tensor> in{mine()};
    std::vector<std::vector<at::Tensor>> out(size);  // one list per rank
    for (auto& list : out) list.push_back(at::empty({4}));
    pg->allgather_coalesced(out, in)->wait();
    std::vector<at::Tensor> got;
    for (auto& list : out) got.push_back(list[0]);
    expect(at::cat(got).equal(by_rank), "allgather_coalesced", rank);
  }
  {
    std::vector<at::Tensor> in{mine()};
    std::vector<std::vector<at::Tensor>> out(rank == 0 ? 1 : 0);
    if (rank == 0) {
      for (int r = 0; r < size; ++r) out[0].push_back(at::empty({4}));
    }
    pg->gather(out, in)->wait();
    expect(rank != 0 || at::cat(out[0]).equal(by_rank), "gather", rank);
  }
  {
    std::vector<at::Tensor> out{at::empty({4})};
    std::vector<std::vector<at::Tensor>> in(rank == 0 ? 1 : 0);
    if (rank == 0) {
      for (int r = 0; r < size; ++r) in[0].push_back(at::full({4}, r + 1, at::kFloat));
    }
    pg->scatter(out, in)->wait();
    expect(out[0].eq(rank + 1).all().item<bool>(), "scatter", rank);
  }
  {
    std::vector<at::Tensor> out{at::empty({4})};
    std::vector<std::vector<at::Tensor>> in(1);
    for (int r = 0; r < size; ++r) in[0].push_back(mine());
    pg->reduce_scatter(out, in)->wait();
    expect(out[0].eq(sum).all().item<bool>(), "reduce_scatter", rank);
  }
  {
    at::Tensor in = at::full({4 * size}, rank + 1, at::kFloat);
    at::Tensor out = at::empty({4});
    pg->_reduce_scatter_base(out, in)->wait();
    expect(out.eq(sum).all().item<bool>(), "_reduce_scatter_base", rank);
  }
  {
    at::Tensor in = at::full({4 * size}, rank + 1, at::kFloat);
    at::Tensor out = at::empty({4 * size});
    std::vector<int64_t> splits;
    pg->alltoall_base(out, in, splits, splits)->wait();
    expect(out.equal(by_rank), "alltoall_base", rank);
  }
  {
    std::vector<at::Tensor> in, out;
    for (int r = 0; r < size; ++r) {
      in.push_back(mine());
      out.push_back(at::empty({4}));
    }
    pg->alltoall(out, in)->wait();
    expect(at::cat(out).equal(by_rank), "alltoall", rank);
  }
  pg->barrier()->wait();
  std::printf("rank %d: %d of 14 calls with default options gave a wrong result\n", rank, failures);
  return failures == 0 ? 0 : 1;
}
