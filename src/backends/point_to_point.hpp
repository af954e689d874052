// PointToPoint: tagged send/recv between world ranks through the arena's
// mailboxes, one single-producer single-consumer ring per (src, dst).
//
// One object per rank, shared by every Backend object of that rank (the world
// and each subgroup). A message travels as one or more cells, each carrying
// its communicator's id (the offset of the group's area in the arena), so a
// receive matches (communicator, src, tag): a message sent on a subgroup is
// never received on the world, even with equal ranks and tags. Messages from
// one src on one communicator with one tag arrive in the order sent.
//
// Receiving. recv() posts what it wants; whichever thread of the rank drains
// the mailboxes copies a matching message straight into the posted buffer,
// and any other message into a private stash, from which a later recv takes
// it. Every wait of the rank drains every inbound mailbox: send() and recv()
// here, and the collectives' waits through progress(). So a peer blocked in
// send() always gets its cells consumed while this rank waits in the library,
// and any pattern that completes with unlimited buffering (a ring where
// everyone sends first, a send followed by a collective) completes here,
// whatever the message sizes.
//
// Thread safety: any number of threads, each on its own Backend object (as
// Backend promises). The receive side (stash, partial messages, posted
// receives, the consumer end of every inbound ring) is guarded by one mutex,
// held while cells are copied and never while sleeping. The producer end of
// mailbox (me, dst) belongs to one sending thread at a time for a whole
// message (`sending_`), so the cells of two messages never interleave.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "axonml/distributed/dtype.hpp"
#include "shm/arena_layout.hpp"
#include "shm/arena_view.hpp"
#include "shm/wait.hpp"

namespace axonml::distributed {

class PointToPoint {
 public:
  PointToPoint(std::byte* arena_base, int world_rank, const shm::WaitContext& waits);
  PointToPoint(const PointToPoint&) = delete;
  PointToPoint& operator=(const PointToPoint&) = delete;

  // REQUIRES: dst and src are world ranks; tag >= 0; `comm` identifies the
  // communicator the same way on every rank. `type` is the elements' type:
  // a message travels with it, and a recv whose buffer has another type (or
  // another size) throws InvalidArgument naming both, rather than handing
  // over bits to be read as something else.
  void send(std::uint64_t comm, int dst, int tag, const std::byte* data, std::size_t bytes, DataType type);
  void recv(std::uint64_t comm, int src, int tag, std::byte* data, std::size_t bytes, DataType type);

  // Consumes whatever peers have published to this rank (into posted
  // receives or the stash). For waits outside point-to-point, so that a
  // peer's send never waits on a rank that is busy in a collective. One
  // load when no cell has come since the last drain. Returns whether it
  // looked at the mailboxes.
  bool progress();

  // The bell rung when point-to-point traffic for this rank moves; waits
  // that call progress() also sleep on it.
  shm::Doorbell& traffic_bell() const { return doorbell(me_); }

 private:
  // send/recv where WaitContext::refuses_ops() (see there).
  [[noreturn, gnu::cold]] void refuse(const std::string& what) const;
  // Bytes that the cells' copies fill, left uninitialised when made: a stash
  // of gigabytes was otherwise zeroed in one go under the mutex, for seconds
  // in which the sender's wait for room ran out (found by a review). Not a
  // vector with a no-op construct(): unoptimised, that still loops per byte
  // (28 s for 1 GiB at -O0; the review of the change).
  class UninitializedBytes {
   public:
    explicit UninitializedBytes(std::size_t size)
        : data_(std::make_unique_for_overwrite<std::byte[]>(size)), size_(size) {}
    std::byte* data() { return data_.get(); }
    const std::byte* data() const { return data_.get(); }
    std::size_t size() const { return size_; }

   private:
    std::unique_ptr<std::byte[]> data_;
    std::size_t size_;
  };
  // A message received (or being received) into the stash.
  struct StashedMessage {
    std::uint64_t comm;
    int tag;
    DataType type;
    UninitializedBytes bytes;
    bool complete;
  };
  // A recv() waiting for its message; lives on the receiving thread's stack.
  struct PostedReceive {
    std::uint64_t comm;
    int src;
    int tag;
    std::byte* data;
    std::size_t bytes;
    DataType type;
    bool posted = false;   // in posted_: the next matching message goes straight here
    bool started = false;  // its first cell has been copied
    bool done = false;     // its last cell has been copied
  };
  // The message from one src whose cells are still arriving.
  struct Incoming {
    std::byte* dest = nullptr;
    std::size_t total = 0;
    std::size_t received = 0;
    PostedReceive* posted = nullptr;    // when it goes straight to a recv()
    StashedMessage* stashed = nullptr;  // otherwise
  };

  shm::MailboxControl& mailbox(int src, int dst) const;
  shm::CellHeader& cell(int src, int dst, std::uint64_t index) const;
  std::byte* payload(shm::CellHeader& cell) const;
  shm::Doorbell& doorbell(int rank) const;

  // REQUIRES: mutex_ held. Consume the cells src (or every peer) published.
  void pull(int src);
  void pull_all();
  // REQUIRES: mutex_ held. The oldest stashed message matching the receive.
  StashedMessage* first_stashed(const PostedReceive& want);
  // REQUIRES: mutex_ held. Copies out and removes the oldest matching
  // stashed message once complete; throws when its size or type differs.
  bool take_stashed(const PostedReceive& want);
  void unpost(PostedReceive& want);

  shm::ArenaView arena_;
  const shm::ArenaHeader& header_;
  int me_;
  int world_size_;
  const shm::WaitContext& waits_;

  std::mutex mutex_;
  // Our doorbell's cells_sent as read before the last progress() drain.
  std::atomic<std::uint64_t> drained_cells_sent_{0};
  std::vector<std::list<StashedMessage>> stash_;  // per src, in arrival order
  std::vector<Incoming> incoming_;                // per src
  std::vector<PostedReceive*> posted_;            // in posting order
  // Per dst: 0 free, 1 a thread is sending a message, 2 a send failed midway
  // (its cells are incomplete, so the link can carry nothing more).
  std::vector<std::uint8_t> sending_;
};

}  // namespace axonml::distributed
