// A libtorch program that makes a ProcessGroupAxon without global_ranks
// (the documented C++ way, over a TCPStore it holds itself), all-reduces
// once and destroys it, three times, with rank 0 late to destroy by
// `late_ms`. Rank 0 prints every rank's slowest destroy, and exits 1 when one
// took `limit_ms` or more:
//
//   axon-launch -n 3 torch_group_destroy 2000 1000
//
// A group destroyed from C++ waits for no peer: every rank but 0 used to
// wait for rank 0 to destroy too and then up to 1 s for its store to close,
// as torch.distributed's default group must (a review: 100 groups made and
// destroyed took 100 s). Exits 1 when a sum is wrong.
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "axonml/torch/process_group.hpp"

int main(int argc, char** argv) {
  const int rank = std::atoi(std::getenv("RANK"));
  const int size = std::atoi(std::getenv("WORLD_SIZE"));
  const int late_ms = argc > 1 ? std::atoi(argv[1]) : 0;
  const double limit_ms = argc > 2 ? std::atof(argv[2]) : 1000;
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(std::atoi(std::getenv("MASTER_PORT")));
  options.isServer = rank == 0;
  options.numWorkers = size;
  options.timeout = std::chrono::seconds(60);
  auto store = c10::make_intrusive<c10d::TCPStore>(std::getenv("MASTER_ADDR"), options);
  double slowest_ms = 0;
  for (int cycle = 0; cycle < 3; ++cycle) {
    auto group = axonml::torch::ProcessGroupAxon::create(
        c10::make_intrusive<c10d::PrefixStore>("cycle" + std::to_string(cycle), store), rank, size,
        std::chrono::seconds(30));
    std::vector<at::Tensor> tensors{at::full({1000}, static_cast<float>(rank + 1))};
    group->allreduce(tensors)->wait();
    if (tensors[0].ne(static_cast<float>(size * (size + 1) / 2)).sum().item<std::int64_t>() != 0) {
      std::printf("rank %d: wrong sum %g in cycle %d\n", rank, tensors[0][0].item<float>(), cycle);
      return 1;
    }
    if (rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(late_ms));
    const auto start = std::chrono::steady_clock::now();
    group.reset();
    slowest_ms = std::max(slowest_ms, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  // Rank 0's store serves the others until they are done with it.
  const std::string mine = std::to_string(slowest_ms);
  store->set("slowest/" + std::to_string(rank), std::vector<std::uint8_t>(mine.begin(), mine.end()));
  store->add("done", 1);
  if (rank != 0) return 0;
  while (store->add("done", 0) < size) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  int status = 0;
  for (int r = 0; r < size; ++r) {
    const std::vector<std::uint8_t> value = store->get("slowest/" + std::to_string(r));
    const double ms = std::atof(std::string(value.begin(), value.end()).c_str());
    std::printf("rank %d: slowest destroy %.0f ms%s\n", r, ms, ms >= limit_ms ? " (too slow)" : "");
    if (ms >= limit_ms) status = 1;
  }
  return status;
}
