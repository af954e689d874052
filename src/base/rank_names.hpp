// How messages name the ranks of an arena's world.
//
// An arena's world is usually the whole job, and rank r is called "rank r".
// A PyTorch subgroup, though, gets an arena of its own whose world is just
// its members: there, member 1 of new_group([1, 2]) is the job's rank 2, and
// a message saying "rank 1 exited" would name the wrong process (often the
// survivor itself). RankNames carries the job's rank of each member so that
// every message names the rank the user knows.
//
// Thread safety: immutable after construction.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace axonml::distributed {

class RankNames {
 public:
  // Every rank named by itself.
  RankNames() = default;
  // REQUIRES: job_ranks empty, or one entry per rank of the world.
  explicit RankNames(std::vector<int> job_ranks) : job_ranks_(std::move(job_ranks)) {}

  // The job's rank of world rank `rank` (a rank outside the world, which
  // only a message about bad input holds, is left as it is).
  int job_rank(int rank) const {
    if (rank < 0 || static_cast<std::size_t>(rank) >= job_ranks_.size()) return rank;
    return job_ranks_[static_cast<std::size_t>(rank)];
  }
  // "rank 2"
  std::string rank(int rank) const { return "rank " + std::to_string(job_rank(rank)); }
  // World rank `rank` as the world numbers it, for what is keyed by that
  // number (a store entry): "rank 1" of a job, "this group's rank 1" of a
  // subgroup, whose global rank may be another number.
  std::string position(int rank) const {
    return (part_of_a_job() ? "this group's rank " : "rank ") + std::to_string(rank);
  }
  template <class Range> std::vector<int> job_ranks(const Range& ranks) const {
    std::vector<int> named;
    for (const auto r : ranks) named.push_back(job_rank(static_cast<int>(r)));
    return named;
  }
  // Whether the world is part of a larger job that numbers its members
  // (a PyTorch subgroup): then even members 0..k-1 are a group of their own,
  // and a message names it.
  bool part_of_a_job() const { return !job_ranks_.empty(); }

 private:
  std::vector<int> job_ranks_;
};

}  // namespace axonml::distributed
