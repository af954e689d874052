#include "axonml/distributed/backend.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

#include "axonml/distributed/error.hpp"

namespace axonml::distributed {

void Backend::check_root(std::string_view op, int root, std::string_view role) const {
  if (root < 0 || root >= world_size()) {
    throw InvalidArgument(std::string(op) + " on rank " + std::to_string(rank()) + ": invalid " +
                          std::string(role) + " " + std::to_string(root) + " (" +
                          std::string(role) + " should be in the 0.." +
                          std::to_string(world_size() - 1) + " range)");
  }
}

void Backend::check_peer(std::string_view op, int peer, std::string_view role) const {
  check_root(op, peer, role);
}

void Backend::check_tag(std::string_view op, int tag) const {
  if (tag < 0) {
    throw InvalidArgument(std::string(op) + " on rank " + std::to_string(rank()) +
                          ": invalid tag " + std::to_string(tag) + " (tags are >= 0)");
  }
}

void Backend::check_size(std::string_view op, std::string_view what, std::size_t actual,
                         std::size_t expected, std::string_view why) const {
  if (actual != expected) {
    throw InvalidArgument(std::string(op) + " on rank " + std::to_string(rank()) + " of " +
                          std::to_string(world_size()) + ": " + std::string(what) + " has " +
                          std::to_string(actual) + " elements but must have " +
                          std::to_string(expected) + " (" + std::string(why) + ")");
  }
}

void Backend::count_overflows(std::string_view op, std::string_view what, std::size_t count,
                              std::size_t element_bytes) const {
  throw InvalidArgument(std::string(op) + " on rank " + std::to_string(rank()) + ": " +
                        std::string(what) + " has " + std::to_string(count) + " elements of " +
                        std::to_string(element_bytes) +
                        " bytes, more than can exist (the byte count overflows)");
}

std::size_t Backend::times_world_size(std::string_view op, std::string_view what,
                                      std::size_t count, std::size_t element_bytes) const {
  std::size_t total = 0;
  if (__builtin_mul_overflow(count, static_cast<std::size_t>(world_size()), &total) ||
      total > static_cast<std::size_t>(PTRDIFF_MAX) / element_bytes) {
    throw InvalidArgument(std::string(op) + " on rank " + std::to_string(rank()) + " of " +
                          std::to_string(world_size()) + ": " + std::string(what) + " has " +
                          std::to_string(count) + " elements, and " + std::to_string(world_size()) +
                          " times that is more than can exist (the size overflows)");
  }
  return total;
}

void Backend::check_blocks(std::string_view op, std::string_view what, std::size_t actual) const {
  if (actual % static_cast<std::size_t>(world_size()) != 0) {
    throw InvalidArgument(std::string(op) + " on rank " + std::to_string(rank()) + " of " +
                          std::to_string(world_size()) + ": " + std::string(what) + " has " +
                          std::to_string(actual) + " elements, which do not split into " +
                          std::to_string(world_size()) + " equal blocks (one per rank)");
  }
}

void Backend::barrier() { do_barrier(); }

std::shared_ptr<Backend> Backend::new_group(std::span<const int> ranks) {
  const std::string where = "new_group on rank " + std::to_string(rank()) + " of " +
                            std::to_string(world_size());
  if (ranks.empty()) throw InvalidArgument(where + ": the list of ranks is empty");
  std::vector<int> seen(ranks.begin(), ranks.end());
  for (int r : ranks) {
    if (r < 0 || r >= world_size()) {
      throw InvalidArgument(where + ": rank " + std::to_string(r) + " is out of range (ranks are 0.." +
                            std::to_string(world_size() - 1) + ")");
    }
  }
  std::sort(seen.begin(), seen.end());
  if (auto dup = std::adjacent_find(seen.begin(), seen.end()); dup != seen.end()) {
    throw InvalidArgument(where + ": rank " + std::to_string(*dup) + " is listed twice");
  }
  return do_new_group(std::vector<int>(ranks.begin(), ranks.end()));
}

}  // namespace axonml::distributed
