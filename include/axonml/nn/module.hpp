// Module: a layer or a stack of layers with an explicit backward pass.
//
// There is no general autograd: forward(x) caches what backward needs,
// backward(dy) returns dx and adds the parameters' gradients into their
// grad() (so several passes accumulate until zero_grad()). Each parameter's
// grad-ready hook fires as soon as its gradient for the pass is final, which
// is in reverse order of forward, the order DDP buckets them in.
//
// parameters() lists parameters in forward order with stable addresses for
// the module's lifetime; a Module is movable, never copyable (a copy would
// share its tensors' storage).
//
// Thread safety: none; one owner. Layers may use oneTBB internally.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "axonml/nn/parameter.hpp"

namespace axonml::nn {

struct NamedParameter {
  std::string name;
  Parameter* parameter;
};

struct NamedBuffer {
  std::string name;
  Tensor* buffer;
};

class Module {
 public:
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  virtual Tensor forward(const Tensor& input) = 0;
  // REQUIRES: forward() ran since the last backward(); grad_output has the
  // shape of forward's output. Returns the gradient for forward's input.
  virtual Tensor backward(const Tensor& grad_output) = 0;

  // Forward order, names such as "0.weight" for Sequential children.
  virtual std::vector<NamedParameter> named_parameters() { return {}; }
  // State that is not trained but belongs to the model (running statistics).
  virtual std::vector<NamedBuffer> named_buffers() { return {}; }
  std::vector<Parameter*> parameters();
  std::vector<Tensor*> buffers();

  // Sets training mode here and in every child.
  virtual void train(bool mode = true) { training_ = mode; }
  void eval() { train(false); }
  bool is_training() const { return training_; }

  void zero_grad();
  // Installs `hook(i)` as the grad-ready hook of parameters()[i], for all i;
  // an empty function removes them.
  void set_grad_ready_hook(const std::function<void(std::size_t index)>& hook);
  std::size_t parameter_count();

 protected:
  Module() = default;
  Module(Module&&) = default;
  Module& operator=(Module&&) = default;

 private:
  bool training_ = true;
};

}  // namespace axonml::nn
