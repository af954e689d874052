#include "axonml/nn/sequential.hpp"

#include "axonml/distributed/error.hpp"

namespace axonml::nn {

Sequential& Sequential::add(std::unique_ptr<Module> module) {
  if (!module) throw distributed::InvalidArgument("Sequential::add: null module");
  module->train(is_training());
  children_.push_back(std::move(module));
  return *this;
}

Tensor Sequential::forward(const Tensor& input) {
  Tensor x = input;
  for (auto& child : children_) x = child->forward(x);
  return x;
}

Tensor Sequential::backward(const Tensor& grad_output) {
  Tensor g = grad_output;
  for (auto it = children_.rbegin(); it != children_.rend(); ++it) g = (*it)->backward(g);
  return g;
}

std::vector<NamedParameter> Sequential::named_parameters() {
  std::vector<NamedParameter> out;
  for (std::size_t i = 0; i < children_.size(); ++i) {
    for (auto& named : children_[i]->named_parameters()) {
      out.push_back({std::to_string(i) + "." + named.name, named.parameter});
    }
  }
  return out;
}

std::vector<NamedBuffer> Sequential::named_buffers() {
  std::vector<NamedBuffer> out;
  for (std::size_t i = 0; i < children_.size(); ++i) {
    for (auto& named : children_[i]->named_buffers()) {
      out.push_back({std::to_string(i) + "." + named.name, named.buffer});
    }
  }
  return out;
}

void Sequential::train(bool mode) {
  Module::train(mode);
  for (auto& child : children_) child->train(mode);
}

}  // namespace axonml::nn
