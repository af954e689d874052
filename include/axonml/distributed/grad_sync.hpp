// GradientSynchronizer: averages a model's gradients over a group in buckets.
//
// prepare(n) makes room for n gradients; add_gradient(i, t) registers the
// gradient of parameter i (the tensor is shared, not copied: the averaged
// values land back in it); sync_all(pg) packs the registered gradients into
// buckets of at most bucket_size floats, in descending parameter index (the
// order backward produces them), averages each bucket over `pg` and unpacks.
// Every rank must register the same indices with the same sizes.
//
// Strategies:
//   Synchronous  every bucket is reduced inside sync_all().
//   Overlapped   a bucket's all-reduce starts on a communication thread as
//                soon as it is full, while the caller keeps adding; sync_all()
//                reduces the rest and waits for all.
//   NoSync       nothing is communicated; gradients stay local.
//
// Thread safety: one owner; the communication thread is internal.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <vector>

#include "axonml/distributed/process_group.hpp"
#include "axonml/distributed/tensor.hpp"

namespace axonml::distributed {

enum class GradSyncStrategy { Synchronous, Overlapped, NoSync };

class GradientSynchronizer {
 public:
  GradientSynchronizer(GradSyncStrategy strategy, std::size_t bucket_size);
  ~GradientSynchronizer();
  GradientSynchronizer(const GradientSynchronizer&) = delete;
  GradientSynchronizer& operator=(const GradientSynchronizer&) = delete;

  GradSyncStrategy strategy() const { return strategy_; }
  std::size_t bucket_size() const { return bucket_size_; }

  void prepare(std::size_t num_params);
  // REQUIRES: index < the count given to prepare().
  void add_gradient(std::size_t index, const Tensor& gradient);
  void sync_all(const ProcessGroup& pg);
  // The gradient registered at `index` (averaged after sync_all()).
  const std::optional<Tensor>& gradient(std::size_t index) const;
  void clear();

 private:
  GradSyncStrategy strategy_;
  std::size_t bucket_size_;
  std::vector<std::optional<Tensor>> gradients_;
};

}  // namespace axonml::distributed
