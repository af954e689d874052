#include "mpi/node_arena.hpp"

#include <unistd.h>

#include <array>
#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "axonml/distributed/error.hpp"
#include "backends/arena_backend_impl.hpp"
#include "base/check.hpp"
#include "base/rank_names.hpp"
#include "shm/arena_file.hpp"
#include "shm/arena_layout.hpp"
#include "shm/arena_view.hpp"
#include "shm/wait.hpp"

namespace axonml::distributed::mpi {
namespace bip = boost::interprocess;

namespace {

class NodeArenaBackend final : public ArenaBackend {
 public:
  // This node's arena at `base`, mapped by `owner`, as node rank `rank`;
  // `names` gives each node rank's rank in the job.
  static std::shared_ptr<NodeArenaBackend> attach(std::shared_ptr<void> owner, std::byte* base, int rank,
                                                  RankNames names) {
    return std::shared_ptr<NodeArenaBackend>(new NodeArenaBackend(
        Impl::attach_world(std::move(owner), base, rank, shm::default_timeout(), {}, std::move(names))));
  }

 private:
  explicit NodeArenaBackend(std::unique_ptr<Impl> impl) : ArenaBackend("shm-node", std::move(impl)) {}
};

// What the creator broadcasts: the name, or an empty name and why.
struct Announcement {
  std::array<char, 64> name{};
  std::array<char, 448> error{};
};

std::shared_ptr<bip::mapped_region> open(const std::string& name, std::size_t bytes) {
  bip::shared_memory_object object(bip::open_only, name.c_str(), bip::read_write);
  return std::make_shared<bip::mapped_region>(object, bip::read_write, 0, bytes);
}

}  // namespace

std::shared_ptr<ArenaBackend> attach_node_arena(const Comm& node, int world_rank,
                                                std::vector<int> world_rank_of_node_rank) {
  check::equal(world_rank_of_node_rank.size(), static_cast<std::size_t>(node.size()),
               "attach_node_arena: one world rank per node rank");
  const std::size_t bytes = shm::default_arena_bytes(node.size());
  const std::string where = "node arena (local rank " + std::to_string(node.rank()) + " of " +
                            std::to_string(node.size()) + ")";
  Announcement announcement;
  std::shared_ptr<bip::mapped_region> region;
  std::string name;
  if (node.rank() == 0) {
    name = shm::unique_arena_name("axon-mpi");
    try {
      shm::ArenaSpec spec;
      spec.world_size = node.size();
      spec.arena_bytes = bytes;
      region = shm::create_arena_file(name, spec, "set AXON_HIERARCHICAL=0");
      std::snprintf(announcement.name.data(), announcement.name.size(), "%s", name.c_str());
    } catch (const std::exception& e) {
      std::snprintf(announcement.error.data(), announcement.error.size(), "%s", e.what());
    }
  }
  check(MPI_Bcast(&announcement, sizeof announcement, MPI_BYTE, 0, node.get()), "MPI_Bcast",
        world_rank, where + ": sharing the arena's name");
  if (announcement.name[0] == '\0') {
    throw Error("rank " + std::to_string(world_rank) + ": " + where +
                ": the node's first rank could not create the arena in /dev/shm: " +
                announcement.error.data());
  }
  name = announcement.name.data();

  // Everyone maps (or fails) before the name goes; then the creator removes it.
  std::string failure;
  try {
    if (!region) region = open(name, bytes);
    shm::check_arena(region->get_address(), region->get_size(), node.size());
  } catch (const std::exception& e) {
    failure = e.what();
  }
  int ok = failure.empty() ? 1 : 0;
  const int rc = MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, node.get());
  if (node.rank() == 0) bip::shared_memory_object::remove(name.c_str());
  check(rc, "MPI_Allreduce", world_rank, where + ": agreeing that every rank mapped the arena");
  if (!ok) {
    throw Error("rank " + std::to_string(world_rank) + ": " + where + ": mapping /dev/shm/" + name +
                " failed on " + (failure.empty() ? "another rank of the node" : "this rank: " + failure));
  }

  auto* base = static_cast<std::byte*>(region->get_address());
  shm::ArenaView(base).header().attached.fetch_add(1, std::memory_order_acq_rel);
  std::shared_ptr<void> owner = region;
  // Named by their ranks in the job: a node-mate's abort or timeout relayed
  // through this arena named "rank 0" for the job's rank 2 (a review).
  return NodeArenaBackend::attach(std::move(owner), base, node.rank(),
                                  RankNames(std::move(world_rank_of_node_rank)));
}

}  // namespace axonml::distributed::mpi
