// Parameter: a trainable tensor and the gradient that backward accumulates
// into it.
//
// backward() adds to grad() (as PyTorch does), so gradients of several
// backward passes accumulate until zero_grad(). When a layer's backward has
// written its last contribution to grad() for this pass it calls
// mark_grad_ready(), which runs the hook (if any): DistributedDataParallel
// uses it to start reducing gradients while backward goes on.
//
// rebind_grad() points grad() at other storage of the same shape (a view into
// a DDP gradient bucket), keeping its current values; layers always write
// through grad(), so they need not know.
//
// Thread safety: none; the owner's thread.
#pragma once

#include <functional>
#include <string>
#include <utility>

#include "axonml/distributed/tensor.hpp"

namespace axonml::nn {

using axonml::distributed::Shape;
using axonml::distributed::Tensor;

class Parameter {
 public:
  Parameter() = default;
  explicit Parameter(Tensor value);

  Tensor& value() { return value_; }
  const Tensor& value() const { return value_; }
  Tensor& grad() { return grad_; }
  const Tensor& grad() const { return grad_; }
  const Shape& shape() const { return value_.shape(); }
  std::size_t numel() const { return value_.numel(); }

  void zero_grad();
  // REQUIRES: storage.shape() == shape(). Copies the current gradient into
  // `storage`, then grad() is `storage`.
  void rebind_grad(Tensor storage);

  // Called by mark_grad_ready(); one hook per parameter, replaced on each call.
  void set_grad_ready_hook(std::function<void()> hook) { hook_ = std::move(hook); }
  void clear_grad_ready_hook() { hook_ = nullptr; }
  void mark_grad_ready() {
    if (hook_) hook_();
  }

 private:
  Tensor value_;
  Tensor grad_;
  std::function<void()> hook_;
};

}  // namespace axonml::nn
