// DistributedDataParallel: one replica of a model per rank, kept identical by
// averaging gradients over the group after every backward.
//
//   DistributedDataParallel ddp(std::move(model), world.default_group());
//   ddp.sync_parameters();                  // every rank starts from rank 0's weights
//   loss.forward(ddp.forward(x), labels);
//   ddp.backward(loss.backward());          // buckets start reducing (Overlapped)
//   ddp.sync_gradients();                   // grads now hold the group's mean
//   sgd.step();
//
// Each rank passes the mean loss over its own shard; with equal shards the
// averaged gradient is the gradient of the mean over the global batch.
//
// Gradients are reduced in buckets (GradientSynchronizer): filled in reverse
// parameter order, the first holding first_bucket_cap_mb, the others
// bucket_cap_mb. With GradSyncStrategy::Overlapped each bucket's all-reduce
// starts on a communication thread as soon as backward has produced its last
// gradient; until sync_gradients() returns, that thread alone uses the
// group's backend, so the caller must not run other collectives on the group
// in between. With gradient_as_bucket_view the parameters' grads ARE views
// into the bucket storage, so nothing is copied in or out.
//
// Construction is collective over the group and checks that every rank has
// the same parameter shapes (InvalidArgument naming the first that differs).
//
// Thread safety: one thread per rank; not movable (the module's hooks point
// at this object).
#pragma once

#include <concepts>
#include <cstddef>
#include <memory>
#include <vector>

#include "axonml/distributed/grad_sync.hpp"
#include "axonml/distributed/process_group.hpp"
#include "axonml/nn/module.hpp"

namespace axonml::distributed {

struct DdpOptions {
  GradSyncStrategy strategy = GradSyncStrategy::Synchronous;
  double bucket_cap_mb = 25.0;       // MiB per bucket, as PyTorch
  double first_bucket_cap_mb = 1.0;  // small, so the first all-reduce starts early
  bool broadcast_buffers = true;     // sync_parameters() also sends buffers
  bool gradient_as_bucket_view = false;
  // BF16: buckets travel as bf16 (half the bytes), like PyTorch's
  // bf16_compress_hook; the averaged grads keep bf16 precision.
  GradientCompression gradient_compression = GradientCompression::None;
};

class DistributedDataParallel {
 public:
  template <std::derived_from<nn::Module> M>
  DistributedDataParallel(M module, ProcessGroup group, DdpOptions options = {})
      : DistributedDataParallel(std::make_unique<M>(std::move(module)), std::move(group), options) {}
  DistributedDataParallel(std::unique_ptr<nn::Module> module, ProcessGroup group,
                          DdpOptions options = {});
  // As ~GradientSynchronizer: destroyed between backward and the step's
  // sync, with Overlapped buckets, it may leave the group's ranks out of
  // step (the next collective is a CollectiveMismatch, for good).
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  const nn::Module& module() const { return *module_; }
  nn::Module& module_mut() { return *module_; }
  const ProcessGroup& process_group() const { return group_; }
  const DdpOptions& options() const { return options_; }
  DistributedDataParallel& broadcast_buffers(bool enabled);

  void train() { module_->train(true); }
  void eval() { module_->train(false); }
  Tensor forward(const Tensor& input) { return module_->forward(input); }
  // The module's backward; under Overlapped, full buckets start reducing.
  Tensor backward(const Tensor& grad_output) { return module_->backward(grad_output); }

  // Collective: every parameter (and buffer, with broadcast_buffers) takes
  // group rank 0's values.
  void sync_parameters();
  // Collective: every parameter's grad becomes the mean over the group.
  // Gradients backward did not produce this round are reduced as they stand.
  // Rethrows a failure of the communication thread. Does nothing under no_sync().
  void sync_gradients();

  // While the guard lives, backward only accumulates grads locally and
  // sync_gradients() communicates nothing (gradient accumulation).
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& ddp) : ddp_(ddp), previous_(ddp.require_sync_) {
      ddp_.require_sync_ = false;
    }
    ~NoSyncGuard() { ddp_.require_sync_ = previous_; }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  // The bucket machinery, for inspection (bucket count, layout, progress).
  const GradientSynchronizer& synchronizer() const { return sync_; }

 private:
  void check_same_shapes_everywhere();
  void on_grad_ready(std::size_t index);

  std::unique_ptr<nn::Module> module_;
  ProcessGroup group_;
  DdpOptions options_;
  std::vector<nn::Parameter*> parameters_;
  GradientSynchronizer sync_;
  bool require_sync_ = true;
  bool round_open_ = false;  // some gradient was handed to sync_ since the last sync_gradients()
};

}  // namespace axonml::distributed
