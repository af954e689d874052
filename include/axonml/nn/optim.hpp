// SGD with momentum and weight decay, as torch.optim.SGD:
//   d = grad + weight_decay * w
//   v = momentum * v + d        (v = d on the first step)
//   w = w - lr * v              (v = d when momentum is 0)
//
// The optimizer keeps pointers to the parameters: they must outlive it.
//
// Thread safety: none; one owner. step() and zero_grad() write the parameters
// and their gradients, so nothing else may use them meanwhile.
#pragma once

#include <vector>

#include "axonml/nn/parameter.hpp"

namespace axonml::nn {

struct SGDOptions {
  float lr = 0.01f;
  float momentum = 0.0f;
  float weight_decay = 0.0f;
};

class SGD {
 public:
  SGD(std::vector<Parameter*> parameters, SGDOptions options);

  void step();
  void zero_grad();
  const SGDOptions& options() const { return options_; }
  void set_lr(float lr) { options_.lr = lr; }
  // The momentum buffers, one per parameter (empty before the first step or
  // without momentum): what a checkpoint needs besides the parameters.
  const std::vector<std::vector<float>>& velocity() const { return velocity_; }
  // Restores velocity() from a checkpoint. Throws InvalidArgument unless it
  // is empty or has one buffer of each parameter's size.
  void set_velocity(std::vector<std::vector<float>> velocity);

 private:
  std::vector<Parameter*> parameters_;
  SGDOptions options_;
  std::vector<std::vector<float>> velocity_;  // empty until the first step
};

}  // namespace axonml::nn
