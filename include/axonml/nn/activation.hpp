// ReLU: max(x, 0) elementwise; no parameters.
//
// Thread safety: none; one owner (forward keeps its input for backward).
#pragma once

#include "axonml/nn/module.hpp"

namespace axonml::nn {

class ReLU final : public Module {
 public:
  ReLU() = default;
  Tensor forward(const Tensor& input) override;
  // The gradient passes where the input was positive.
  Tensor backward(const Tensor& grad_output) override;

 private:
  Tensor input_;
};

}  // namespace axonml::nn
