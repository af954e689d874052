#include "shm/numa_place.hpp"

#include <linux/mempolicy.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "axonml/distributed/error.hpp"
#include "base/env.hpp"
#include "base/text.hpp"

namespace axonml::distributed::shm {
namespace {

constexpr unsigned long kMaxNodes = 1024;
constexpr std::size_t kMaskWordBits = 8 * sizeof(unsigned long);

}  // namespace

// Without NUMA support in the kernel every page is on node 0.
std::vector<int> allowed_numa_nodes() {
  unsigned long mask[kMaxNodes / kMaskWordBits] = {};
  if (::syscall(SYS_get_mempolicy, nullptr, mask, kMaxNodes, nullptr, MPOL_F_MEMS_ALLOWED) != 0) return {0};
  std::vector<int> nodes;
  for (std::size_t node = 0; node < kMaxNodes; ++node) {
    if ((mask[node / kMaskWordBits] >> (node % kMaskWordBits)) & 1UL) nodes.push_back(static_cast<int>(node));
  }
  return nodes;
}

bool numa_node_allowed(int node) {
  const auto allowed = allowed_numa_nodes();
  return std::find(allowed.begin(), allowed.end(), node) != allowed.end();
}

std::optional<int> bound_numa_node() {
  // A node the process cannot use would make every move fail silently (a
  // review set AXON_NUMA_NODE=99 on a one-node machine, and nothing said so).
  // A throwing initializer is run again by the next call: each call throws.
  static const std::optional<int> node = []() -> std::optional<int> {
    const auto value = env::integer("AXON_NUMA_NODE", 0, static_cast<long long>(kMaxNodes) - 1);
    if (!value) return std::nullopt;
    if (!numa_node_allowed(static_cast<int>(*value))) {
      const std::string list = joined(allowed_numa_nodes());
      throw InvalidArgument("AXON_NUMA_NODE=" + std::to_string(*value) +
                            " names a NUMA node this process cannot place memory on (its nodes: " + list +
                            "); axon-launch sets it when it binds a rank within one node: unset it or name one of those");
    }
    return static_cast<int>(*value);
  }();
  return node;
}

std::size_t move_to_numa_node(void* begin, std::size_t bytes, int node) {
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto first = (reinterpret_cast<std::uintptr_t>(begin) + page - 1) / page * page;
  const auto last = (reinterpret_cast<std::uintptr_t>(begin) + bytes) / page * page;
  if (node < 0 || node >= static_cast<int>(kMaxNodes) || last <= first) return 0;
  // Fault the pages in, so that this process maps them: MPOL_MF_MOVE moves
  // only pages in the caller's page tables. A read keeps the contents.
  for (auto p = first; p < last; p += page) {
    (void)reinterpret_cast<volatile std::atomic<std::uint8_t>*>(p)->load(std::memory_order_relaxed);
  }
  unsigned long mask[kMaxNodes / kMaskWordBits] = {};
  mask[static_cast<std::size_t>(node) / kMaskWordBits] |= 1UL << (static_cast<std::size_t>(node) % kMaskWordBits);
  if (::syscall(SYS_mbind, first, last - first, MPOL_PREFERRED, mask, kMaxNodes, MPOL_MF_MOVE) != 0) return 0;
  // Count the pages that are where we asked (get_mempolicy per page).
  std::size_t placed = 0;
  for (auto p = first; p < last; p += page) {
    int where = -1;
    if (::syscall(SYS_get_mempolicy, &where, nullptr, 0UL, p, MPOL_F_NODE | MPOL_F_ADDR) == 0 && where == node) {
      ++placed;
    }
  }
  return placed;
}

void place_on_bound_node(void* begin, std::size_t bytes) {
  if (const auto node = bound_numa_node()) move_to_numa_node(begin, bytes, *node);
}

}  // namespace axonml::distributed::shm
