// A libtorch program that keeps its ProcessGroupAxon in a global, as a C++
// program may: the group is destroyed among the static destructors, after
// main returns. Its destructor used a registry of live groups that had been
// destroyed already, and corrupted the heap (SIGABRT at exit; a review).
//
//   axon-launch -n 2 torch_global_group [pending]
//
// With "pending", the last all-reduce is still queued when main returns.
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "axonml/torch/process_group.hpp"

namespace {
c10::intrusive_ptr<c10d::ProcessGroup> global_group;
}  // namespace

int main(int argc, char** argv) {
  const int rank = std::atoi(std::getenv("RANK"));
  const int size = std::atoi(std::getenv("WORLD_SIZE"));
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(std::atoi(std::getenv("MASTER_PORT")));
  options.isServer = rank == 0;
  options.numWorkers = size;
  auto store = c10::make_intrusive<c10d::TCPStore>(std::getenv("MASTER_ADDR"), options);
  global_group = axonml::torch::ProcessGroupAxon::create(store, rank, size, std::chrono::seconds(30));
  std::vector<at::Tensor> tensors{at::full({1000}, static_cast<float>(rank + 1))};
  global_group->allreduce(tensors)->wait();
  const float expected = static_cast<float>(size * (size + 1) / 2);
  if (tensors[0].ne(expected).sum().item<std::int64_t>() != 0) {
    std::printf("rank %d: wrong sum %g\n", rank, tensors[0][0].item<float>());
    return 1;
  }
  if (argc > 1 && std::strcmp(argv[1], "pending") == 0) {
    std::vector<at::Tensor> last{at::ones({1 << 20})};
    global_group->allreduce(last);  // not waited: the destructor lets it finish
  }
  std::printf("rank %d: sum %g, leaving the group to the static destructors\n", rank, expected);
  return 0;
}
