#include "axonml/distributed/ddp.hpp"

#include <algorithm>
#include <cstdint>

#include "axonml/distributed/error.hpp"
#include "base/flat.hpp"
#include "group/shape_agreement.hpp"

namespace axonml::distributed {
namespace {

std::size_t floats_in_mib(double mib, const char* what) {
  if (!(mib > 0.0)) {
    throw InvalidArgument(std::string("DistributedDataParallel: ") + what + " must be > 0 MiB, got " +
                          std::to_string(mib));
  }
  // Beyond 2^40 MiB (an exbibyte) the float count no longer fits a size_t.
  if (!(mib <= 1099511627776.0)) {
    throw InvalidArgument(std::string("DistributedDataParallel: ") + what + " of " +
                          std::to_string(mib) + " MiB is more memory than can exist");
  }
  return std::max<std::size_t>(1, static_cast<std::size_t>(mib * 1024.0 * 1024.0 / sizeof(float)));
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(std::unique_ptr<nn::Module> module, ProcessGroup group,
                                                 DdpOptions options)
    : module_(std::move(module)),
      group_(std::move(group)),
      options_(options),
      sync_(options.strategy, floats_in_mib(options.bucket_cap_mb, "bucket_cap_mb"),
            floats_in_mib(options.first_bucket_cap_mb, "first_bucket_cap_mb"),
            options.gradient_compression) {
  if (!module_) throw InvalidArgument("DistributedDataParallel: null module");
  if (!group_.is_member()) {
    throw InvalidArgument("DistributedDataParallel: this rank is not a member of " + group_.describe());
  }
  parameters_ = module_->parameters();
  check_same_shapes_everywhere();
  std::vector<Shape> shapes;
  for (const nn::Parameter* p : parameters_) shapes.push_back(p->shape());
  sync_.set_group(group_);  // first: the buckets go in the group's shared memory if it has room
  sync_.prepare(shapes);
  if (options_.gradient_as_bucket_view) {
    for (std::size_t i = 0; i < parameters_.size(); ++i) parameters_[i]->rebind_grad(sync_.slot(i));
  }
  module_->set_grad_ready_hook([this](std::size_t index) { on_grad_ready(index); });
}

DistributedDataParallel::~DistributedDataParallel() { module_->set_grad_ready_hook(nullptr); }

DistributedDataParallel& DistributedDataParallel::broadcast_buffers(bool enabled) {
  options_.broadcast_buffers = enabled;
  return *this;
}

// One all-gather of (parameter count, digest of every shape) when the ranks
// agree; a second of every shape to name the first that differs.
void DistributedDataParallel::check_same_shapes_everywhere() {
  std::vector<Shape> shapes;
  for (const nn::Parameter* p : parameters_) shapes.push_back(p->shape());
  const auto differ = find_shape_disagreement(shapes, 0, group_, "(no such parameter)");
  if (!differ) return;
  if (differ->index == ShapeDisagreement::kOnlyExtra) {
    throw InvalidArgument("DistributedDataParallel: parameter shapes differ between ranks of " +
                          group_.describe() + "; every rank must build the same model");
  }
  const auto named = module_->named_parameters();
  const std::size_t i = differ->index;
  const std::string name =
      i < named.size() ? " (\"" + named[i].name + "\" on rank " + std::to_string(group_.rank()) + ")" : "";
  throw InvalidArgument("DistributedDataParallel: parameter " + std::to_string(i) + name + " has shape " +
                        differ->rank0_shape + " on rank 0 but " + differ->other_shape + " on rank " +
                        std::to_string(differ->rank) + " (parameter counts: rank 0 has " +
                        std::to_string(differ->rank0_count) + ", rank " + std::to_string(differ->rank) + " has " +
                        std::to_string(differ->other_count) + "); every rank must build the same model");
}

void DistributedDataParallel::on_grad_ready(std::size_t index) {
  if (!require_sync_ || options_.strategy == GradSyncStrategy::NoSync) return;
  round_open_ = true;
  sync_.add_gradient(index, parameters_[index]->grad());
}

// One broadcast for everything: pack, send from rank 0, unpack.
void DistributedDataParallel::sync_parameters() {
  if (round_open_) {
    throw InvalidArgument("DistributedDataParallel::sync_parameters on rank " + std::to_string(group_.rank()) +
                          ": gradients of a backward pass are still being reduced; call "
                          "sync_gradients() first");
  }
  std::vector<Tensor*> tensors;
  for (nn::Parameter* p : parameters_) tensors.push_back(&p->value());
  if (options_.broadcast_buffers) {
    for (Tensor* b : module_->buffers()) tensors.push_back(b);
  }
  std::vector<float> flat = flatten(tensors);
  group_.backend().broadcast(flat, 0);
  unflatten(flat, tensors);
}

void DistributedDataParallel::sync_gradients() {
  if (!require_sync_ || options_.strategy == GradSyncStrategy::NoSync) return;
  for (std::size_t i = parameters_.size(); i-- > 0;) {
    if (!sync_.gradient(i)) sync_.add_gradient(i, parameters_[i]->grad());
  }
  round_open_ = false;
  try {
    sync_.sync_all(group_);
  } catch (...) {
    sync_.clear();
    throw;
  }
  sync_.clear();
}

}  // namespace axonml::distributed
