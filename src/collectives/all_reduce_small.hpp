// The all-reduce of a payload that fits beside the round counters
// (RoundChannel::small_bytes(), a scalar), as a template over the channel.
//
// collectives::all_reduce runs it through the RoundChannel interface; a
// transport whose channel is a final class may call it with that class, so
// that small_outbox() and small_inbox() inline and no virtual call remains
// on the path: a 4-byte all-reduce at n = 2 is some 600 instructions, of
// which each layer's calls and frames were a large part.
//
// REQUIRES: channel.size() > 1 and count * size_of(type) <= channel.small_bytes().
#pragma once

#include <array>
#include <cstddef>
#include <cstring>
#include <span>
#include <vector>

#include "axonml/distributed/dtype.hpp"
#include "base/check.hpp"
#include "kernels/reduce.hpp"

namespace axonml::distributed::collectives {

// The sources of a small reduce, on the stack up to 64 members: on the
// small-message path a heap allocation per call (or zeroing 512 bytes of
// pointers) is a measurable part of the time.
class SmallSources {
 public:
  explicit SmallSources(int members) : sources_(local_.data(), static_cast<std::size_t>(members)) {
    if (sources_.size() > local_.size()) {
      heap_.resize(sources_.size());
      sources_ = heap_;
    }
  }
  std::span<const std::byte*> get() { return sources_; }

 private:
  std::array<const std::byte*, 64> local_;
  std::vector<const std::byte*> heap_;
  std::span<const std::byte*> sources_;
};

// Up to 8 bytes (a scalar of any type: 2, 4, 6 or 8) without a call to memcpy.
inline void copy_small(std::byte* dest, const std::byte* src, std::size_t bytes) {
  if (bytes == 4) {
    std::memcpy(dest, src, 4);
  } else if (bytes == 8) {
    std::memcpy(dest, src, 8);
  } else {
    for (std::size_t i = 0; i < bytes; ++i) dest[i] = src[i];
  }
}

// Every member puts its scalar beside its round counter and reduces all of
// them, in rank order, into its own output: peers fetch one cache line per
// member, not two (4 bytes at n=2: 0.35 us against 0.54 through the slot,
// 7 interleaved rounds).
template <typename Channel>
void all_reduce_small(Channel& channel, std::byte* data, std::size_t count, DataType type, ReduceOp op) {
  const int n = channel.size();
  check::less(1, n, "all_reduce_small: more than one member");
  check::less_equal(count * size_of(type), channel.small_bytes(), "all_reduce_small: payload fits small_bytes()");
  copy_small(channel.small_outbox(), data, count * size_of(type));
  channel.exchange();
  SmallSources holder(n);
  const std::span<const std::byte*> sources = holder.get();
  for (int m = 0; m < n; ++m) sources[static_cast<std::size_t>(m)] = channel.small_inbox(m);
  kernels::reduce_few(type, op, sources, data, count);  // 8 bytes: at most 4 elements
}

}  // namespace axonml::distributed::collectives
