#include "axonml/distributed/ddp.hpp"

#include <algorithm>
#include <cstdint>

#include "axonml/distributed/error.hpp"
#include "base/flat.hpp"
#include "base/hash.hpp"

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

// A shape as a fixed record so that ranks can all-gather it: the number of
// dims, then up to kMaxDims sizes (more dims are folded into the last).
constexpr std::size_t kMaxDims = 6;
constexpr std::size_t kRecord = kMaxDims + 1;

void encode(const Shape& shape, std::int64_t* out) {
  std::fill_n(out, kRecord, 0);
  out[0] = static_cast<std::int64_t>(shape.size());
  for (std::size_t d = 0; d < shape.size(); ++d) {
    const std::size_t slot = std::min(d, kMaxDims - 1);
    out[1 + slot] = slot == d ? static_cast<std::int64_t>(shape[d])
                              : out[1 + slot] * static_cast<std::int64_t>(shape[d]);
  }
}

std::string decode(const std::int64_t* record) {
  if (record[0] < 0) return "(no such parameter)";
  Shape shape;
  const auto dims = static_cast<std::size_t>(record[0]);
  for (std::size_t d = 0; d < std::min(dims, kMaxDims); ++d) shape.push_back(static_cast<std::size_t>(record[1 + d]));
  return to_string(shape);
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

// Step by step:
//   1. all-gather (parameter count, hash of all shapes): equal everywhere -> done;
//   2. otherwise all-gather every rank's shape records, padded to the largest
//      count, and report the first parameter whose record differs.
void DistributedDataParallel::check_same_shapes_everywhere() {
  Backend& backend = group_.backend();
  const auto n = static_cast<std::size_t>(group_.size());
  Fnv1a shapes;  // over ranks and sizes of every parameter
  for (const nn::Parameter* p : parameters_) {
    shapes.add(p->shape().size());
    for (std::size_t d : p->shape()) shapes.add(d);
  }
  const std::vector<std::int64_t> mine{static_cast<std::int64_t>(parameters_.size()),
                                       static_cast<std::int64_t>(shapes.value())};
  std::vector<std::int64_t> all(2 * n);
  backend.all_gather<std::int64_t>(mine, all);
  bool same = true;
  std::size_t largest = 0;
  for (std::size_t r = 0; r < n; ++r) {
    same = same && all[2 * r] == mine[0] && all[2 * r + 1] == mine[1];
    largest = std::max(largest, static_cast<std::size_t>(all[2 * r]));
  }
  if (same) return;

  std::vector<std::int64_t> records(largest * kRecord, -1);
  for (std::size_t i = 0; i < parameters_.size(); ++i) encode(parameters_[i]->shape(), &records[i * kRecord]);
  std::vector<std::int64_t> gathered(n * records.size());
  backend.all_gather<std::int64_t>(records, gathered);
  const auto named = module_->named_parameters();
  for (std::size_t i = 0; i < largest; ++i) {
    for (std::size_t r = 1; r < n; ++r) {
      const std::int64_t* first = &gathered[i * kRecord];
      const std::int64_t* other = &gathered[(r * largest + i) * kRecord];
      if (std::equal(first, first + kRecord, other)) continue;
      const std::string name = i < named.size() ? " (\"" + named[i].name + "\" on rank " +
                                                      std::to_string(group_.rank()) + ")"
                                                : "";
      throw InvalidArgument("DistributedDataParallel: parameter " + std::to_string(i) + name +
                            " has shape " + decode(first) + " on rank 0 but " + decode(other) +
                            " on rank " + std::to_string(r) + " (parameter counts: rank 0 has " +
                            std::to_string(all[0]) + ", rank " + std::to_string(r) + " has " +
                            std::to_string(all[2 * r]) + "); every rank must build the same model");
    }
  }
  throw InvalidArgument("DistributedDataParallel: parameter shapes differ between ranks of " +
                        group_.describe() + "; every rank must build the same model");
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
