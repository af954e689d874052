// StoreBackend: a world whose ranks find each other through a key-value
// store, under any launcher.
//
// axon-launch hands its ranks a ready arena; other launchers (PyTorch's
// env:// and tcp:// rendezvous, torch.multiprocessing, SLURM) only give each
// process its rank, the world size and a shared store. create() builds the
// arena through that store:
//   1. every rank publishes its host (hostname and kernel boot id) and pid;
//      ranks on different machines get InvalidArgument naming the hosts;
//   2. rank 0 creates the arena as an anonymous memfd (owner-only, no name
//      in /dev/shm, so nothing can leak it even after kill -9), formats it
//      and publishes "/proc/<pid>/fd/<fd>";
//   3. the others open and map that path (same user, same machine); all
//      meet in the store ("axon/mapped/<rank>") and then in a barrier on the
//      arena, after which rank 0 closes the fd and the memory lives only in
//      the ranks' mappings.
// A rank whose set-up fails after step 1 publishes why ("axon/failed"), and
// peers polling the store fail at once with that reason.
// Each rank watches its peers' pids (shm::WaitContext), so a peer that dies
// fails every current and later wait within ~50 ms, naming the rank. While
// create() itself waits in the store it watches the peers whose pids it has
// read, calls StoreOptions::while_waiting, and keeps its own deadline, when
// the store can say whether a key is there without waiting (has()).
//
// One store namespace makes one world: callers that build several (one per
// process group) give each its own prefix.
//
// Thread safety: one thread at a time per object; see Backend.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "axonml/distributed/arena_backend.hpp"

namespace axonml::distributed {

// The store create() needs: set, a blocking get, and ideally has().
class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  // Waits until `key` is set; throws when the store gives up.
  virtual std::string get(const std::string& key) = 0;
  // Whether `key` is set now, without waiting. create() polls it so that a
  // wait for a peer can end early (the peer died or gave up) or at its
  // deadline. The default gives no answer (nullopt), and create() then
  // waits in get() alone, for as long as the store lets it.
  virtual std::optional<bool> has(const std::string& /*key*/) { return std::nullopt; }
};

struct StoreOptions {
  std::chrono::milliseconds timeout{0};  // 0: AXON_TIMEOUT or 300 s
  // How a Timeout's message names `timeout` when it is given ("" :
  // "StoreOptions::timeout"); the PyTorch backend says "the group's timeout".
  std::string timeout_name;
  // How long create()'s waits for the peers' entries may take, when that
  // differs from `timeout` (0: `timeout`), and its name in messages. Ranks
  // reach the set-up at different times (a PyTorch process imports torch for
  // seconds first), so the PyTorch backend gives its set-up the group's own
  // timeout, as PyTorch's rendezvous has, and its ops the shorter AXON_TIMEOUT.
  std::chrono::milliseconds setup_timeout{0};
  std::string setup_timeout_name;
  std::size_t arena_bytes = 0;           // 0: the default for the world size
  // Added to the arena (default or arena_bytes) as free space for
  // allocate_shared(): buffers there are all-reduced without a copy in.
  // Reserved up front like the rest of the arena.
  std::size_t shared_bytes = 0;
  // What an arena too large for the memory available tells the caller to
  // change ("" : "StoreOptions::arena_bytes sets a smaller arena").
  std::string size_remedy;
  std::size_t slot_bytes = 0;            // 0: the default
  // What the caller calls this group ("global ranks [0, 2]"), the same on
  // every rank of it. Each rank publishes it with the world size, and a
  // rank given another group under the same keys fails at set-up
  // (InvalidArgument naming both), rather than on a peer's arena.
  std::string group;
  // How messages name this world's ranks: rank r is "rank rank_names[r]".
  // Empty: by r itself. The PyTorch backend gives a subgroup (an arena of its
  // own) its members' ranks in the job, so that an error names the process
  // the user knows. Otherwise one entry per rank.
  std::vector<int> rank_names;
  // How many processes the job runs on this machine, when this world is only
  // part of them (a PyTorch subgroup, whose arena holds its members alone): whether
  // ranks outnumber cores (and so whether waits spin before they yield, and
  // how the barrier runs) is judged by it, not by the world's size. 0, or
  // less than the world: the world is the job. AXON_OVERSUBSCRIBED, where set
  // (axon-launch sets it), decides instead.
  int job_size = 0;
  // Called every few milliseconds while create() waits for a peer's entry
  // in the store; throws to give up (its exception leaves create()). The
  // PyTorch backend gives up when a process of the job has exited, as seen
  // by another group of this process.
  std::function<void()> while_waiting;
  // Whether the store lives in this process (PyTorch's TCPStore, in global
  // rank 0's under env:// and tcp://). After a rank's own failure (a bad
  // value, no memory) this rank then stays, up to 2 s, until every rank has
  // read the reason, also those that have not come yet: a PyTorch rank
  // connects to that store a second time after the rendezvous counted it,
  // and timed out connecting after 60 s where this process had ended.
  bool store_lives_here = false;
};

class StoreBackend final : public ArenaBackend {
 public:
  // Collective over the `world_size` processes that share `store`. Throws
  // InvalidArgument for a bad rank or size or ranks on different hosts, and
  // Error naming the path and errno when the arena cannot be made or opened.
  static std::shared_ptr<StoreBackend> create(KeyValueStore& store, int rank, int world_size,
                                              StoreOptions options = {});

  // For a rank that fails before it calls create() (its own checks of its
  // arguments or environment): the peers' create() through `store` then
  // fails at once with `reason`, prefixed with this rank's name (from
  // `rank_names`, as StoreOptions::rank_names; its number when they do not
  // give one per rank), rather than waiting out its
  // timeout for this rank's entry. Waits up to 2 s for them to read it,
  // where `store_lives_here` (StoreOptions) those that have not come yet
  // too; never throws.
  static void give_up(KeyValueStore& store, int rank, int world_size, const std::vector<int>& rank_names,
                      const std::string& reason, bool store_lives_here = false);

 private:
  using ArenaBackend::ArenaBackend;
};

}  // namespace axonml::distributed
