// CallExchange: the first step of every MpiBackend collective, which checks
// that all members called the same one and carries small messages whole.
//
// Every member sends every other member one message, the call's
// CallDescriptor (op, type, count, root, reduce op, call number) followed by
// up to kInlineBytes of data chosen per peer, and receives one from each.
// Receives are posted with room for kInlineBytes, so descriptors of any two
// calls can always be compared, whatever their sizes; ranks that disagree get
// a CollectiveMismatch showing both sides, the same text as the shared-memory
// backend's, and the exchange stays unusable afterwards. A member that never
// arrives is named in the Timeout. Since each member hears from every other
// member, the exchange is also a barrier.
//
// A member whose wait gives up tells every peer. A peer that comes late
// still completes the exchange (the descriptors were sent before), but
// then finds the notice and throws PeerFailure with the giver-up's reason
// ("rank 1: job aborted: rank 0: timed out after ..."), the words a
// shared-memory job aborted by a timeout uses; after either the exchange
// stays unusable, throwing PeerFailure, not CollectiveMismatch.
//
// Messages travel on a communicator used for nothing else, so they cannot
// meet a user's send / recv.
//
// Thread safety: one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "axonml/distributed/dtype.hpp"
#include "base/collective_op.hpp"
#include "mpi/mpi_runtime.hpp"
#include "mpi/waiting.hpp"

namespace axonml::distributed::mpi {

// What one member is about to run; the header of its exchange message.
struct CallDescriptor {
  std::uint64_t call = 0;    // this communicator's call number, from 0
  std::uint64_t count = 0;   // elements per rank (as the op's own count)
  std::uint64_t detail = 0;  // NewGroup: hash of the rank list
  std::int32_t root = -1;    // rooted ops; -1 otherwise
  std::uint8_t op = 0;       // CollectiveOp
  std::uint8_t dtype = 0;
  std::uint8_t reduce_op = 0xff;  // 0xff: the op has none
  std::uint8_t step = 0;  // kAfterRefusedThreadStep (root: this world rank) or 0
  std::uint32_t payload_bytes = 0;  // data after the header (not compared)
  std::uint32_t unused2 = 0;
};
static_assert(sizeof(CallDescriptor) == 40);

CallDescriptor describe_call(CollectiveOp op, DataType type, std::size_t count, int root = -1,
                             const ReduceOp* reduce_op = nullptr);
// "all_reduce(f32, 100, sum)": call_text (base/collective_op.hpp), the words
// the shared-memory backend uses too.
std::string to_string(const CallDescriptor& d);

class CallExchange {
 public:
  // Messages whose per-peer data fits this go whole through the exchange:
  // one round instead of two, and below Open MPI's eager limits.
  static constexpr std::size_t kInlineBytes = 4096;

  // `comm` is used for nothing else; `world_ranks[m]` is member m's world rank.
  CallExchange(const Comm& comm, std::vector<int> world_ranks);

  // Collective over the members. Numbers `call`, sends it with payload(peer)
  // (at most kInlineBytes; may be empty) to every peer and receives every
  // peer's message. With `check`, throws CollectiveMismatch when a peer's
  // descriptor differs from `call`. Throws Timeout / PeerFailure from the wait.
  void run(CallDescriptor call, const std::function<std::span<const std::byte>(int peer)>& payload,
           bool check, const WaitContext& wait);

  // Counts a call this member refused before run() (its arguments failed a
  // check), so that its next call's number tells its peers it is out of
  // step (Backend::count_refused_collective).
  void count_refused_call() { ++calls_; }
  // The next run() sends a descriptor no peer's can equal
  // (kAfterRefusedThreadStep; Backend::do_mark_after_refused_thread).
  void mark_after_refused_thread() { mark_next_ = true; }

  // Throws PeerFailure, and breaks the exchange, when a peer has given up
  // a call (its notice has arrived). Run by every wait of the group's
  // collectives (WaitContext::watch), so a rank whose peers gave up the call
  // it is in, or an earlier one, fails at once rather than after a timeout.
  void fail_if_a_peer_gave_up();

  // After run(): the data member m sent this member (m != this member).
  std::span<const std::byte> received(int member) const;
  // The current call's descriptor (after run(): numbered), for messages.
  const CallDescriptor& current() const { return current_; }
  // "[0, 1, 2, 3]": the members' world ranks.
  std::string group_name() const;
  int world_rank(int member) const { return world_ranks_[static_cast<std::size_t>(member)]; }

 private:
  std::string describe_wait(std::span<const MPI_Request> requests) const;
  void abandon(std::span<MPI_Request> requests);
  // This member gave up the current call (`reason`, its Timeout or
  // PeerFailure): tells every peer, so that one that comes late and still
  // completes the exchange (with the descriptors sent before) fails instead
  // of finishing a call the others abandoned.
  void tell_peers_gave_up(const std::string& reason);
  // Throws what broke the exchange, again.
  [[noreturn]] void throw_broken() const;

  MPI_Comm comm_;
  int member_;
  int size_;
  std::vector<int> world_ranks_;
  std::uint64_t calls_ = 0;
  bool mark_next_ = false;
  CallDescriptor current_;
  std::string broken_;  // set after a mismatch or a failed wait
  bool broken_by_mismatch_ = false;  // else by a wait that failed, here or on a peer
  std::vector<std::byte> send_, recv_;
  std::vector<std::size_t> send_offset_;
  std::vector<MPI_Request> requests_;  // [recv from each peer..., send to each peer...]
};

}  // namespace axonml::distributed::mpi
