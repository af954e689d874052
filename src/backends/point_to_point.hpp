// PointToPoint: tagged send/recv between world ranks through the arena's
// mailboxes, one single-producer single-consumer ring per (src, dst).
//
// A message travels as one or more cells. recv() copies cells straight into
// the caller's buffer when the next message from src is the one it wants;
// a message with another tag is moved into a private stash so that it can
// be received later, in order. Waiting in send() or recv() also drains every
// inbound mailbox into the stash, so any pattern that would complete with
// unlimited buffering (a ring where everyone sends first, say) completes here
// whatever the message sizes.
//
// Thread safety: one thread per rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "shm/arena_layout.hpp"
#include "shm/wait.hpp"

namespace axonml::distributed {

class PointToPoint {
 public:
  PointToPoint(std::byte* arena_base, int world_rank, const shm::WaitGuard& guard);

  // REQUIRES: dst and src are world ranks; tag >= 0.
  void send(int dst, int tag, const std::byte* data, std::size_t bytes);
  void recv(int src, int tag, std::byte* data, std::size_t bytes);

 private:
  struct StashedMessage {
    int tag;
    std::vector<std::byte> bytes;
    bool complete;
  };
  // A message from one src whose cells are still arriving.
  struct Incoming {
    bool active = false;
    std::byte* dest = nullptr;
    std::size_t total = 0;
    std::size_t received = 0;
    bool direct = false;
  };
  // The receive a recv() call is waiting for, if it can be done in place.
  struct DirectReceive {
    int tag;
    std::byte* data;
    std::size_t bytes;
    bool started = false;
    bool done = false;
    std::size_t mismatched_bytes = 0;  // size of a same-tag message of the wrong size
  };

  shm::MailboxControl& mailbox(int src, int dst) const;
  shm::CellHeader& cell(int src, int dst, std::uint64_t index) const;
  std::byte* payload(shm::CellHeader& cell) const;
  shm::Doorbell& doorbell(int rank) const;

  // Consumes the cells src has published; returns whether any were.
  bool pull(int src, DirectReceive* direct);
  void pull_all(int except);
  StashedMessage* first_stashed(int src, int tag);

  std::byte* base_;
  const shm::ArenaHeader& header_;
  int me_;
  int world_size_;
  const shm::WaitGuard& guard_;
  std::vector<std::deque<StashedMessage>> stash_;  // per src, in arrival order
  std::vector<Incoming> incoming_;                 // per src
};

}  // namespace axonml::distributed
