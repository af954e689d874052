#include "axonml/nn/activation.hpp"

#include <algorithm>

#include "axonml/distributed/error.hpp"

namespace axonml::nn {

Tensor ReLU::forward(const Tensor& input) {
  input_ = input;
  Tensor out = Tensor::zeros(input.shape());
  const auto x = input.data();
  auto y = out.data();
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = std::max(x[i], 0.0f);
  return out;
}

Tensor ReLU::backward(const Tensor& grad_output) {
  if (grad_output.shape() != input_.shape()) {
    throw distributed::InvalidArgument("ReLU::backward: grad_output shape " +
                                       distributed::to_string(grad_output.shape()) +
                                       " differs from the forward input's " +
                                       distributed::to_string(input_.shape()));
  }
  Tensor dx = Tensor::zeros(input_.shape());
  const auto x = input_.data();
  const auto dy = grad_output.data();
  auto out = dx.data();
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = x[i] > 0.0f ? dy[i] : 0.0f;
  return dx;
}

}  // namespace axonml::nn
