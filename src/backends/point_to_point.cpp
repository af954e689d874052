#include "backends/point_to_point.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>  // std::pair

#include "axonml/distributed/error.hpp"
#include "base/recv_mismatch.hpp"
#include "collectives/copy.hpp"

namespace axonml::distributed {

using collectives::copy_bytes;

PointToPoint::PointToPoint(std::byte* arena_base, int world_rank, const shm::WaitContext& waits)
    : arena_(arena_base),
      header_(arena_.header()),
      me_(world_rank),
      world_size_(static_cast<int>(header_.world_size)),
      waits_(waits),
      stash_(static_cast<std::size_t>(world_size_)),
      incoming_(static_cast<std::size_t>(world_size_)),
      sending_(static_cast<std::size_t>(world_size_), 0) {}

shm::MailboxControl& PointToPoint::mailbox(int src, int dst) const { return arena_.mailbox(src, dst); }

shm::CellHeader& PointToPoint::cell(int src, int dst, std::uint64_t index) const {
  return arena_.cell(src, dst, index);
}

std::byte* PointToPoint::payload(shm::CellHeader& c) const { return shm::ArenaView::payload(c); }

shm::Doorbell& PointToPoint::doorbell(int rank) const { return arena_.rank_control(rank).doorbell; }

// A rank that left for good (WaitContext::mark_left) sends and receives
// nothing more: its peers already count it as ended. Nor does a forked child.
void PointToPoint::refuse(const std::string& what) const {
  throw InvalidArgument(what + " on " + waits_.names().rank(me_) + ": " + waits_.why_refused() + "; nothing was done");
}

// Step by step:
//   1. Claim the producer end of mailbox (me, dst) for the whole message
//      (another thread of this rank may be sending to dst on another group).
//   2. Per cell: wait for a free cell, fill it, publish tail (release), ring dst.
//   3. Give the mailbox back and wake local threads waiting to claim it.
// Every wait drains this rank's inbound mailboxes, so two ranks that send to
// each other at once both make progress.
void PointToPoint::send(std::uint64_t comm, int dst, int tag, const std::byte* data,
                        std::size_t bytes, DataType type) {
  if (waits_.refuses_ops()) refuse("send of " + std::to_string(bytes) + " bytes to " + waits_.names().rank(dst));
  if (waits_.aborted()) waits_.check_alive();  // an aborted job moves no more data
  const auto d = static_cast<std::size_t>(dst);
  auto describe = [&] {
    return "send of " + std::to_string(bytes) + " bytes with tag " + std::to_string(tag) +
           " to " + waits_.names().rank(dst) + ": waiting for it to receive";
  };
  auto claim = [&] {
    std::lock_guard lock(mutex_);
    if (sending_[d] == 2) {
      throw Error("send on " + waits_.names().rank(me_) + " to " + waits_.names().rank(dst) +
                  ": an earlier send to that rank failed midway, so the link is unusable");
    }
    if (sending_[d] == 0) {
      sending_[d] = 1;
      return true;
    }
    pull_all();
    return false;
  };
  shm::wait_until(claim, doorbell(me_), waits_, describe);

  auto& box = mailbox(me_, dst);
  std::uint64_t tail = box.tail.load(std::memory_order_relaxed);
  std::size_t sent = 0;
  bool first = true;
  try {
    do {
      auto has_space = [&] {
        if (tail - box.head.load(std::memory_order_acquire) < header_.mailbox_cells) return true;
        std::lock_guard lock(mutex_);
        pull_all();  // keep peers that send to us moving while we wait
        return false;
      };
      shm::wait_until(has_space, doorbell(me_), waits_, describe, [&] { return std::vector<int>{dst}; });
      auto& c = cell(me_, dst, tail);
      const std::size_t chunk = std::min<std::size_t>(header_.cell_bytes, bytes - sent);
      c.message_bytes = bytes;
      c.payload_bytes = static_cast<std::uint32_t>(chunk);
      c.tag = tag;
      c.first = first ? 1 : 0;
      c.type = static_cast<std::uint32_t>(type);
      c.comm = comm;
      copy_bytes(payload(c), data + sent, chunk);
      box.tail.store(++tail, std::memory_order_release);
      doorbell(dst).cells_sent.fetch_add(1, std::memory_order_release);  // after tail: see progress()
      shm::ring(doorbell(dst));
      sent += chunk;
      first = false;
    } while (sent < bytes);
  } catch (...) {
    std::lock_guard lock(mutex_);
    sending_[d] = first ? 0 : 2;  // cells already out cannot be taken back
    throw;
  }
  {
    std::lock_guard lock(mutex_);
    sending_[d] = 0;
  }
  shm::ring(doorbell(me_));
}

PointToPoint::StashedMessage* PointToPoint::first_stashed(const PostedReceive& want) {
  for (auto& message : stash_[static_cast<std::size_t>(want.src)]) {
    if (message.comm == want.comm && message.tag == want.tag) return &message;
  }
  return nullptr;
}

bool PointToPoint::take_stashed(const PostedReceive& want) {
  StashedMessage* message = first_stashed(want);
  if (message == nullptr || !message->complete) return false;
  if (message->bytes.size() != want.bytes || message->type != want.type) {
    // The receive took the message, as an MPI receive that truncates does:
    // the next receive gets the next message, under either launcher.
    const std::size_t had = message->bytes.size();
    const DataType had_type = message->type;
    stash_[static_cast<std::size_t>(want.src)].remove_if([&](const StashedMessage& m) { return &m == message; });
    throw RecvMismatch({waits_.names().rank(me_), waits_.names().rank(want.src), want.tag, had, had_type, want.bytes,
                        want.type});
  }
  copy_bytes(want.data, message->bytes.data(), want.bytes);
  stash_[static_cast<std::size_t>(want.src)].remove_if(
      [&](const StashedMessage& m) { return &m == message; });
  return true;
}

void PointToPoint::pull(int src) {
  auto& box = mailbox(src, me_);
  std::uint64_t head = box.head.load(std::memory_order_relaxed);
  const std::uint64_t tail = box.tail.load(std::memory_order_acquire);
  if (head == tail) return;
  auto& in = incoming_[static_cast<std::size_t>(src)];
  auto& stash = stash_[static_cast<std::size_t>(src)];
  bool completed = false;
  for (; head < tail; ++head) {
    auto& c = cell(src, me_, head);
    if (c.first) {
      // The oldest posted receive for this (communicator, src, tag) gets the
      // message in place; a size or type mismatch goes to the stash, where
      // that receive finds it and reports both.
      auto match = std::find_if(posted_.begin(), posted_.end(), [&](const PostedReceive* p) {
        return p->comm == c.comm && p->src == src && p->tag == c.tag;
      });
      PostedReceive* want = match == posted_.end() ? nullptr : *match;
      if (want) {
        posted_.erase(match);
        want->posted = false;
      }
      const auto type = static_cast<DataType>(c.type);
      if (want && want->bytes == c.message_bytes && want->type == type) {
        want->started = true;
        in = Incoming{want->data, c.message_bytes, 0, want, nullptr};
      } else {
        stash.push_back(StashedMessage{c.comm, c.tag, type, UninitializedBytes(c.message_bytes), false});
        in = Incoming{stash.back().bytes.data(), c.message_bytes, 0, nullptr, &stash.back()};
      }
    }
    copy_bytes(in.dest + in.received, payload(c), c.payload_bytes);
    in.received += c.payload_bytes;
    if (in.received == in.total) {
      if (in.posted) in.posted->done = true;
      if (in.stashed) in.stashed->complete = true;
      completed = true;
    }
  }
  box.head.store(head, std::memory_order_release);
  shm::ring(doorbell(src));             // src may be waiting for space
  if (completed) shm::ring(doorbell(me_));  // another thread of ours may be waiting for it
}

void PointToPoint::pull_all() {
  for (int src = 0; src < world_size_; ++src) pull(src);
}

// A sender counts each cell in cells_sent after publishing its tail, so a
// count read with acquire covers every tail published before it: when it has
// not moved since the count a drain read before it began, no cell has come
// since, and the O(ranks) look at every mailbox is skipped. A drain's count
// may land after a newer one another thread stored: that costs one drain
// more, never one less.
bool PointToPoint::progress() {
  const std::uint64_t sent = doorbell(me_).cells_sent.load(std::memory_order_acquire);
  if (sent == drained_cells_sent_.load(std::memory_order_relaxed)) return false;
  std::lock_guard lock(mutex_);
  pull_all();
  drained_cells_sent_.store(sent, std::memory_order_relaxed);
  return true;
}

// A receive that ends before its message did (timeout, abort) hands the part
// already copied to the stash, so the rest of the message still has a home.
void PointToPoint::unpost(PostedReceive& want) {
  if (want.posted) {
    posted_.erase(std::find(posted_.begin(), posted_.end(), &want));
    want.posted = false;
  }
  if (want.started && !want.done) {
    auto& in = incoming_[static_cast<std::size_t>(want.src)];
    auto& stash = stash_[static_cast<std::size_t>(want.src)];
    stash.push_back(StashedMessage{want.comm, want.tag, want.type, UninitializedBytes(want.bytes), false});
    copy_bytes(stash.back().bytes.data(), want.data, in.received);
    in.dest = stash.back().bytes.data();
    in.posted = nullptr;
    in.stashed = &stash.back();
  }
}

void PointToPoint::recv(std::uint64_t comm, int src, int tag, std::byte* data, std::size_t bytes,
                        DataType type) {
  if (waits_.refuses_ops()) refuse("recv of " + std::to_string(bytes) + " bytes from " + waits_.names().rank(src));
  if (waits_.aborted()) waits_.check_alive();
  PostedReceive want{comm, src, tag, data, bytes, type};
  {
    std::lock_guard lock(mutex_);
    if (take_stashed(want)) return;
    // An older matching message still arriving into the stash comes first.
    if (first_stashed(want) == nullptr) {
      posted_.push_back(&want);
      want.posted = true;
    }
  }
  // The timeout bounds a wait in which nothing comes from src, not the
  // whole message: a message of gigabytes takes longer than AXON_TIMEOUT to
  // copy on a loaded machine, and failed while src was still sending it
  // (found by a review; a collective's waits are per round already). So the
  // wait ends, and starts again, whenever a message from src that is still
  // arriving (this one, or one before it on its way to the stash) has moved
  // on. Not on messages that arrive whole in between: a peer sending small
  // messages of other tags for ever would keep the wait alive, and the
  // stash growing, with no end (the review of the change).
  using Arriving = std::pair<const std::byte*, std::size_t>;  // (destination, bytes in); none: {}
  Arriving arriving{};
  bool complete = false;
  auto arrived = [&] {
    std::lock_guard lock(mutex_);
    if (want.done || take_stashed(want)) return complete = true;
    pull_all();
    if (want.done || take_stashed(want)) return complete = true;
    const Incoming& in = incoming_[static_cast<std::size_t>(src)];
    const Arriving now = in.received < in.total ? Arriving{in.dest, in.received} : Arriving{};
    const bool moved_on = now.first != nullptr && now != arriving;
    arriving = now;
    return moved_on;
  };
  try {
    do {
      shm::wait_until(arrived, doorbell(me_), waits_, [&] {
        std::lock_guard lock(mutex_);
        return "recv of " + std::to_string(bytes) + " bytes with tag " + std::to_string(tag) + " from " +
               waits_.names().rank(src) + (want.started ? ": waiting for the rest of it" : ": waiting for it to send");
      }, [&] { return std::vector<int>{src}; });
    } while (!complete);
  } catch (...) {
    std::lock_guard lock(mutex_);
    unpost(want);
    throw;
  }
}

}  // namespace axonml::distributed
