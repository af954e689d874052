#include "shm/numa_place.hpp"

#include <linux/mempolicy.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <vector>

#include "base/env.hpp"

namespace axonml::distributed::shm {

std::optional<int> bound_numa_node() {
  static const std::optional<int> node = [] {
    const auto value = env::integer("AXON_NUMA_NODE", 0, 1023);
    return value ? std::optional<int>(static_cast<int>(*value)) : std::nullopt;
  }();
  return node;
}

std::size_t move_to_numa_node(void* begin, std::size_t bytes, int node) {
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto first = (reinterpret_cast<std::uintptr_t>(begin) + page - 1) / page * page;
  const auto last = (reinterpret_cast<std::uintptr_t>(begin) + bytes) / page * page;
  if (node < 0 || node >= 1024 || last <= first) return 0;
  // Fault the pages in, so that this process maps them: MPOL_MF_MOVE moves
  // only pages in the caller's page tables. A read keeps the contents.
  for (auto p = first; p < last; p += page) {
    (void)reinterpret_cast<volatile std::atomic<std::uint8_t>*>(p)->load(std::memory_order_relaxed);
  }
  unsigned long mask[1024 / (8 * sizeof(unsigned long))] = {};
  mask[static_cast<std::size_t>(node) / (8 * sizeof(unsigned long))] |=
      1UL << (static_cast<std::size_t>(node) % (8 * sizeof(unsigned long)));
  if (::syscall(SYS_mbind, first, last - first, MPOL_PREFERRED, mask, 1024UL, MPOL_MF_MOVE) != 0) return 0;
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
