#include "shm/launcher_report.hpp"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <mutex>

#include "base/env.hpp"
#include "shm/arena_layout.hpp"
#include "shm/arena_view.hpp"

namespace axonml::distributed::shm {
namespace {

// The launcher's arena header, mapped on first use; null when this process
// has none (or a descriptor that is not one: then nothing is written).
ArenaHeader* launcher_header() noexcept {
  static std::once_flag once;
  static ArenaHeader* header = nullptr;
  std::call_once(once, [] {
    try {
      const auto fd = env::integer("AXON_ARENA_FD", 0, INT_MAX);
      const auto bytes = env::integer("AXON_ARENA_BYTES", static_cast<long long>(sizeof(ArenaHeader)), static_cast<long long>(kMaxArenaBytes));
      const auto world_size = env::integer("WORLD_SIZE", 1, kMaxWorldSize);
      if (!fd || !bytes || !world_size) return;
      struct stat info {};
      if (::fstat(static_cast<int>(*fd), &info) != 0 || !S_ISREG(info.st_mode) || info.st_size != *bytes) return;
      void* base = ::mmap(nullptr, static_cast<std::size_t>(*bytes), PROT_READ | PROT_WRITE, MAP_SHARED,
                          static_cast<int>(*fd), 0);
      if (base == MAP_FAILED) return;
      // Kept for the process's life: reports may come from its last moments.
      header = const_cast<ArenaHeader*>(
          &check_arena(base, static_cast<std::size_t>(*bytes), static_cast<int>(*world_size)));
    } catch (...) {
      header = nullptr;  // a malformed variable or another arena: report nothing
    }
  });
  return header;
}

}  // namespace

bool started_by_launcher_as(int self) noexcept {
  const ArenaHeader* header = launcher_header();
  if (header == nullptr || ::getppid() != header->launcher_pid) return false;
  try {
    return env::integer("RANK", 0, kMaxWorldSize) == self;
  } catch (...) {
    return false;
  }
}

std::optional<int> launcher_saw_end_of(int rank) noexcept {
  ArenaHeader* header = launcher_header();
  if (header == nullptr || rank < 0 || rank >= static_cast<int>(header->world_size)) return std::nullopt;
  const RankControl& control = ArenaView(*header).rank_control(rank);
  if (control.ended.load(std::memory_order_acquire) == 0) return std::nullopt;
  return control.end_status;
}

std::chrono::steady_clock::time_point launcher_resumed_at() noexcept {
  const ArenaHeader* header = launcher_header();
  if (header == nullptr) return {};
  return std::chrono::steady_clock::time_point(
      std::chrono::nanoseconds(header->resumed_at_ns.load(std::memory_order_acquire)));
}

std::chrono::steady_clock::duration waited_since(std::chrono::steady_clock::time_point started) noexcept {
  // The clock first: the launcher may stop this process between the two
  // reads, and a resume read after it could not then be missed.
  const auto now = std::chrono::steady_clock::now();
  return now - std::max(started, launcher_resumed_at());
}

void report_group_failure_to_launcher(int job_rank, const std::string& reason) noexcept {
  ArenaHeader* header = launcher_header();
  if (header == nullptr) return;
  publish_once(header->group_failure_state, [&] {
    // A rank's own child (a world of its own, under spawn) numbers ranks
    // as its world does, not as the job's: it blames none.
    header->group_failure_rank = ::getppid() == header->launcher_pid ? job_rank : -1;
    copy_reason(header->group_failure_reason, reason);
  });
}

}  // namespace axonml::distributed::shm
