#include "axonml/distributed/grad_sync.hpp"

#include <algorithm>

#include "axonml/distributed/bucket.hpp"
#include "axonml/distributed/error.hpp"

namespace axonml::distributed {

GradientSynchronizer::GradientSynchronizer(GradSyncStrategy strategy, std::size_t bucket_size)
    : strategy_(strategy), bucket_size_(bucket_size) {
  if (bucket_size == 0) throw InvalidArgument("GradientSynchronizer: bucket_size must be > 0");
}

GradientSynchronizer::~GradientSynchronizer() = default;

void GradientSynchronizer::prepare(std::size_t num_params) {
  gradients_.assign(num_params, std::nullopt);
}

void GradientSynchronizer::add_gradient(std::size_t index, const Tensor& gradient) {
  if (index >= gradients_.size()) {
    throw InvalidArgument("GradientSynchronizer::add_gradient: index " + std::to_string(index) +
                          " is out of range (prepare() made room for " +
                          std::to_string(gradients_.size()) + ")");
  }
  gradients_[index] = gradient;
}

const std::optional<Tensor>& GradientSynchronizer::gradient(std::size_t index) const {
  if (index >= gradients_.size()) {
    throw InvalidArgument("GradientSynchronizer::gradient: index " + std::to_string(index) +
                          " is out of range (" + std::to_string(gradients_.size()) + " prepared)");
  }
  return gradients_[index];
}

// Buckets in descending index order; a gradient larger than a bucket is
// reduced on its own.
void GradientSynchronizer::sync_all(const ProcessGroup& pg) {
  if (strategy_ == GradSyncStrategy::NoSync) return;
  std::vector<Tensor*> pending;
  std::size_t pending_size = 0;
  std::vector<float> flat;
  auto flush = [&] {
    if (pending.empty()) return;
    flat.resize(pending_size);
    std::size_t offset = 0;
    for (Tensor* t : pending) {
      std::copy(t->data().begin(), t->data().end(), flat.begin() + static_cast<long>(offset));
      offset += t->numel();
    }
    pg.backend().all_reduce(flat, ReduceOp::Average);
    offset = 0;
    for (Tensor* t : pending) {
      std::copy_n(flat.begin() + static_cast<long>(offset), t->numel(), t->data().begin());
      offset += t->numel();
    }
    pending.clear();
    pending_size = 0;
  };
  for (std::size_t i = gradients_.size(); i-- > 0;) {
    if (!gradients_[i]) continue;
    Tensor& g = *gradients_[i];
    if (pending_size + g.numel() > bucket_size_) flush();
    pending.push_back(&g);
    pending_size += g.numel();
  }
  flush();
}

void GradientSynchronizer::clear() {
  for (auto& g : gradients_) g.reset();
}

}  // namespace axonml::distributed
