#include "backends/point_to_point.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "axonml/distributed/error.hpp"
#include "collectives/copy.hpp"

namespace axonml::distributed {

using collectives::copy_bytes;

PointToPoint::PointToPoint(std::byte* arena_base, int world_rank, const shm::WaitGuard& guard)
    : base_(arena_base),
      header_(*reinterpret_cast<const shm::ArenaHeader*>(arena_base)),
      me_(world_rank),
      world_size_(static_cast<int>(header_.world_size)),
      guard_(guard),
      stash_(static_cast<std::size_t>(world_size_)),
      incoming_(static_cast<std::size_t>(world_size_)) {}

shm::MailboxControl& PointToPoint::mailbox(int src, int dst) const {
  const std::size_t index = static_cast<std::size_t>(src) * static_cast<std::size_t>(world_size_) +
                            static_cast<std::size_t>(dst);
  return *reinterpret_cast<shm::MailboxControl*>(base_ + header_.mailboxes_offset +
                                                 index * header_.mailbox_stride);
}

shm::CellHeader& PointToPoint::cell(int src, int dst, std::uint64_t index) const {
  auto* first = reinterpret_cast<std::byte*>(&mailbox(src, dst)) + sizeof(shm::MailboxControl);
  const std::size_t cell_stride = sizeof(shm::CellHeader) + header_.cell_bytes;
  return *reinterpret_cast<shm::CellHeader*>(first + (index % header_.mailbox_cells) * cell_stride);
}

std::byte* PointToPoint::payload(shm::CellHeader& c) const {
  return reinterpret_cast<std::byte*>(&c) + sizeof(shm::CellHeader);
}

shm::Doorbell& PointToPoint::doorbell(int rank) const {
  return reinterpret_cast<shm::RankControl*>(base_ + header_.rank_controls_offset)[rank].doorbell;
}

void PointToPoint::send(int dst, int tag, const std::byte* data, std::size_t bytes) {
  auto& box = mailbox(me_, dst);
  std::uint64_t tail = box.tail.load(std::memory_order_relaxed);
  std::size_t sent = 0;
  bool first = true;
  do {
    auto has_space = [&] {
      if (tail - box.head.load(std::memory_order_acquire) < header_.mailbox_cells) return true;
      pull_all(-1);  // keep peers that send to us moving while we wait
      return false;
    };
    shm::wait_until(has_space, doorbell(me_), guard_, [&] {
      return "send of " + std::to_string(bytes) + " bytes with tag " + std::to_string(tag) +
             " to rank " + std::to_string(dst) + ": waiting for it to receive";
    }, [&] { return std::vector<int>{dst}; });
    auto& c = cell(me_, dst, tail);
    const std::size_t chunk = std::min<std::size_t>(header_.cell_bytes, bytes - sent);
    c.message_bytes = bytes;
    c.payload_bytes = static_cast<std::uint32_t>(chunk);
    c.tag = tag;
    c.first = first ? 1 : 0;
    copy_bytes(payload(c), data + sent, chunk);
    box.tail.store(++tail, std::memory_order_release);
    shm::ring(doorbell(dst));
    sent += chunk;
    first = false;
  } while (sent < bytes);
}

PointToPoint::StashedMessage* PointToPoint::first_stashed(int src, int tag) {
  for (auto& message : stash_[static_cast<std::size_t>(src)]) {
    if (message.tag == tag) return &message;
  }
  return nullptr;
}

bool PointToPoint::pull(int src, DirectReceive* direct) {
  auto& box = mailbox(src, me_);
  std::uint64_t head = box.head.load(std::memory_order_relaxed);
  const std::uint64_t tail = box.tail.load(std::memory_order_acquire);
  auto& in = incoming_[static_cast<std::size_t>(src)];
  auto& stash = stash_[static_cast<std::size_t>(src)];
  bool progressed = false;
  while (head < tail) {
    auto& c = cell(src, me_, head);
    if (c.first) {
      const bool wanted = direct && !direct->started && c.tag == direct->tag &&
                          first_stashed(src, direct->tag) == nullptr;
      if (wanted && c.message_bytes == direct->bytes) {
        in = Incoming{true, direct->data, c.message_bytes, 0, true};
        direct->started = true;
      } else {
        if (wanted) direct->mismatched_bytes = c.message_bytes;
        stash.push_back(StashedMessage{c.tag, std::vector<std::byte>(c.message_bytes), false});
        in = Incoming{true, stash.back().bytes.data(), c.message_bytes, 0, false};
      }
    }
    copy_bytes(in.dest + in.received, payload(c), c.payload_bytes);
    in.received += c.payload_bytes;
    box.head.store(++head, std::memory_order_release);
    progressed = true;
    if (in.received == in.total) {
      in.active = false;
      if (in.direct) {
        direct->done = true;
        break;
      }
      stash.back().complete = true;
      if (direct && direct->mismatched_bytes) break;
    }
  }
  if (progressed) shm::ring(doorbell(src));
  return progressed;
}

void PointToPoint::pull_all(int except) {
  for (int src = 0; src < world_size_; ++src) {
    if (src != except) pull(src, nullptr);
  }
}

void PointToPoint::recv(int src, int tag, std::byte* data, std::size_t bytes) {
  DirectReceive direct{tag, data, bytes};
  auto take_stashed = [&]() -> bool {
    StashedMessage* message = first_stashed(src, tag);
    if (message == nullptr || !message->complete) return false;
    if (message->bytes.size() != bytes) {
      throw InvalidArgument("recv on rank " + std::to_string(me_) + " from rank " +
                            std::to_string(src) + " with tag " + std::to_string(tag) +
                            ": the message has " + std::to_string(message->bytes.size()) +
                            " bytes but the buffer has " + std::to_string(bytes));
    }
    copy_bytes(data, message->bytes.data(), bytes);
    auto& queue = stash_[static_cast<std::size_t>(src)];
    queue.erase(std::find_if(queue.begin(), queue.end(),
                             [&](const StashedMessage& m) { return &m == message; }));
    return true;
  };
  auto arrived = [&] {
    if (take_stashed()) return true;
    pull(src, first_stashed(src, tag) ? nullptr : &direct);
    if (direct.done || take_stashed()) return true;
    pull_all(src);
    return false;
  };
  shm::wait_until(arrived, doorbell(me_), guard_, [&] {
    return "recv of " + std::to_string(bytes) + " bytes with tag " + std::to_string(tag) +
           " from rank " + std::to_string(src) + ": waiting for it to send";
  }, [&] { return std::vector<int>{src}; });
}

}  // namespace axonml::distributed
