// RoundChannel: the only primitive the collective algorithms need.
//
// Each member of a group owns one slot of slot_bytes() per round parity.
// A round is: write your outbox(), call exchange() (publish it and wait until
// every member has published theirs), then read any member's inbox(). The
// algorithms in this folder are written against this interface alone, so the
// same code runs over threads sharing a heap block (MockBackend) and over
// processes sharing the launcher's arena, a memfd they inherit (ShmBackend).
//
// Double buffering removes closing barriers: the outbox of round r + 1 is the
// other parity from the inbox of round r, and a member can only reach round
// r + 2 (reusing this parity) after every member published r + 1, which each
// did only after it finished reading round r.
//
// Thread safety: one thread per member.
#pragma once

#include <cstddef>
#include <cstdint>

namespace axonml::distributed::collectives {

class RoundChannel {
 public:
  virtual ~RoundChannel() = default;

  virtual int rank() const = 0;   // this member's position in the group
  virtual int size() const = 0;   // members in the group
  virtual std::size_t slot_bytes() const = 0;

  // This member's slot for the next exchange(); free to write until then.
  virtual std::byte* outbox() = 0;
  // Member m's slot as published in the last exchange(); read-only, valid
  // until the next exchange().
  virtual const std::byte* inbox(int member) const = 0;
  // A second, tiny outbox and inbox, used instead of the slot by a round
  // whose payload fits (a scalar's all-reduce): where the transport can put
  // it beside what peers poll anyway, a round then costs one cache-line
  // transfer instead of two. Same rules as outbox()/inbox(); a round uses
  // one or the other, the same on every member. 0 bytes: none.
  virtual std::size_t small_bytes() const { return 0; }
  virtual std::byte* small_outbox() { return outbox(); }
  virtual const std::byte* small_inbox(int member) const { return inbox(member); }
  // Publishes outbox() and waits until every member has published the same
  // round. Throws on abort, timeout, or a collective mismatch.
  virtual void exchange() = 0;
  // Returns once every member has called synchronize() for the same round,
  // moving no data: a barrier. Counts as one exchange() (the parities of the
  // slots move on as they would), and checks the collective's descriptor the
  // same way. Costs O(log n) cache-line transfers on each member's path, where
  // exchange() reads every member's round.
  virtual void synchronize() = 0;
  // Throws what exchange() would on abort when the job has been aborted
  // since: a member that gave up the collective (it timed out) may already
  // be rewriting its buffer. For algorithms that read and write other
  // members' memory between exchanges; one load when nothing has failed.
  virtual void throw_if_aborted() const {}

  // Memory every member can address: a buffer's position in the shared
  // region, and back (each member may map the region at another address).
  // REQUIRES: p lies in the shared region.
  virtual std::uint64_t offset_of(const std::byte* p) const = 0;
  virtual std::byte* address_of(std::uint64_t offset) const = 0;
};

}  // namespace axonml::distributed::collectives
