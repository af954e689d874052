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
  // The buffers sync_parameters() broadcasts too, after the parameters: a
  // buffer that differed was a bare broadcast mismatch of two float counts
  // (a review). Their split from the parameters is the check's `extra`.
  const auto buffers = options_.broadcast_buffers ? module_->named_buffers() : std::vector<nn::NamedBuffer>{};
  std::vector<Shape> shapes;
  for (const nn::Parameter* p : parameters_) shapes.push_back(p->shape());
  for (const nn::NamedBuffer& b : buffers) shapes.push_back(b.buffer->shape());
  const auto params = static_cast<std::int64_t>(parameters_.size());
  const auto differ = find_shape_disagreement(shapes, params, group_, "(no such parameter or buffer)");
  if (!differ) return;
  const std::string counts = " (parameters, and buffers it broadcasts: rank 0 has " + std::to_string(differ->rank0_extra) + " and " +
                             std::to_string(static_cast<std::int64_t>(differ->rank0_count) - differ->rank0_extra) +
                             ", rank " + std::to_string(differ->rank) + " has " + std::to_string(differ->other_extra) +
                             " and " +
                             std::to_string(static_cast<std::int64_t>(differ->other_count) - differ->other_extra) +
                             "); every rank must build the same model, and pass the same broadcast_buffers";
  if (differ->index == ShapeDisagreement::kOnlyExtra) {
    throw InvalidArgument("DistributedDataParallel: parameter shapes differ between ranks of " + group_.describe() +
                          counts);
  }
  // Entry i of a rank's list: "parameter i", "buffer k", or "" past its end.
  const std::size_t i = differ->index;
  const auto entry = [i](std::int64_t params, std::size_t count) -> std::string {
    if (i >= count) return {};
    const auto p = static_cast<std::size_t>(params);
    return i < p ? "parameter " + std::to_string(i) : "buffer " + std::to_string(i - p);
  };
  const std::string first = entry(differ->rank0_extra, differ->rank0_count);
  const std::string other = entry(differ->other_extra, differ->other_count);
  const std::string what = first == other || other.empty() ? first
                           : first.empty()                 ? other
                                                           : first + " on rank 0, " + other + " on rank " +
                                                                 std::to_string(differ->rank);
  const auto named = module_->named_parameters();
  std::string name;
  if (i < parameters_.size() && i < named.size()) name = named[i].name;
  if (i >= parameters_.size() && i - parameters_.size() < buffers.size()) name = buffers[i - parameters_.size()].name;
  if (!name.empty()) name = " (\"" + name + "\" on rank " + std::to_string(group_.rank()) + ")";
  throw InvalidArgument("DistributedDataParallel: " + what + name + " has shape " + differ->rank0_shape +
                        " on rank 0 but " + differ->other_shape + " on rank " + std::to_string(differ->rank) + counts);
}

void DistributedDataParallel::on_grad_ready(std::size_t index) {
  if (!require_sync_ || options_.strategy == GradSyncStrategy::NoSync) return;
  round_open_ = true;
  if (sync_.gradient(index)) [[unlikely]] {
    // Said here, in DDP's words: the synchronizer's own message named its
    // sync_all() and clear(), which a DDP user never calls (a review).
    const auto named = module_->named_parameters();
    const std::string name = index < named.size() ? " (\"" + named[index].name + "\")" : "";
    throw InvalidArgument("DistributedDataParallel on rank " + std::to_string(group_.rank()) + ": parameter " +
                          std::to_string(index) + name +
                          " got a second gradient before sync_gradients(): call sync_gradients() after each "
                          "backward pass, or accumulate several inside `auto guard = ddp.no_sync();`");
  }
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
