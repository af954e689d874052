// torch_allreduce: the axon backend from a libtorch C++ program, without
// Python. Links axonml::torch, makes a c10d::TCPStore from the env://
// variables (axon-launch sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT),
// builds ProcessGroupAxon over it and all-reduces two tensors, a small one
// and one of 4 MiB, checking every element. Run alone (no RANK) it is a world
// of one over an in-memory store.
//
//   build/release/launcher/axon-launch -n 2 build/release/examples/torch_allreduce
//
// Exits 0 only when every rank got the right sums; rank 0 then prints
// "every rank's result checked: 0 wrong".
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "axonml/torch/process_group.hpp"

namespace {

int env_int(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value ? std::stoi(value) : fallback;
}

// The rendezvous torch.distributed's env:// makes: rank 0 serves the store at
// MASTER_ADDR:MASTER_PORT, the others connect to it.
c10::intrusive_ptr<c10d::Store> env_store(int rank, int size) {
  if (size == 1 && !std::getenv("MASTER_PORT")) return c10::make_intrusive<c10d::HashStore>();
  const char* addr = std::getenv("MASTER_ADDR");
  const char* port = std::getenv("MASTER_PORT");
  if (!addr || !port) {
    throw std::runtime_error("MASTER_ADDR and MASTER_PORT must be set for WORLD_SIZE " + std::to_string(size) +
                             " (axon-launch sets them)");
  }
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(std::stoi(port));
  options.isServer = rank == 0;
  options.numWorkers = size;
  options.timeout = std::chrono::seconds(60);
  return c10::make_intrusive<c10d::TCPStore>(addr, options);
}

// Every element of `t` after an all-reduce SUM of (rank + 1) * (i % 7 + 1):
// n (n + 1) / 2 * (i % 7 + 1), exact in float.
std::int64_t count_wrong(const at::Tensor& t, int size) {
  const auto expected = at::remainder(at::arange(t.numel(), t.options()), 7).add_(1).mul_(size * (size + 1) / 2);
  return t.ne(expected).sum().item<std::int64_t>();
}

}  // namespace

int main() {
  try {
    const int rank = env_int("RANK", 0);
    const int size = env_int("WORLD_SIZE", 1);
    auto pg = axonml::torch::ProcessGroupAxon::create(env_store(rank, size), rank, size,
                                                       std::chrono::seconds(60));

    std::int64_t wrong = 0;
    for (std::int64_t count : {1000, 1 << 20}) {
      std::vector<at::Tensor> tensors{at::remainder(at::arange(count, at::kFloat), 7).add_(1).mul_(rank + 1)};
      pg->allreduce(tensors)->wait();  // SUM
      const std::int64_t bad = count_wrong(tensors[0], size);
      std::printf("rank %d of %d: allreduce sum of %lld floats, %lld wrong\n", rank, size,
                  static_cast<long long>(count), static_cast<long long>(bad));
      wrong += bad;
    }

    // Every rank's count of wrong elements, summed over the group, so that
    // rank 0's verdict covers them all.
    std::vector<at::Tensor> total{at::full({1}, wrong, at::kLong)};
    pg->allreduce(total)->wait();
    const std::int64_t all_wrong = total[0].item<std::int64_t>();
    if (rank == 0) {
      std::printf("every rank's result checked: %lld wrong\n", static_cast<long long>(all_wrong));
    }
    return all_wrong == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "torch_allreduce: %s\n", e.what());
    return 1;
  }
}
