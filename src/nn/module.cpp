#include "axonml/nn/module.hpp"

#include <algorithm>

#include "axonml/distributed/error.hpp"

namespace axonml::nn {

Parameter::Parameter(Tensor value) : value_(std::move(value)), grad_(Tensor::zeros(value_.shape())) {}

void Parameter::zero_grad() {
  auto g = grad_.data();
  std::fill(g.begin(), g.end(), 0.0f);
}

void Parameter::rebind_grad(Tensor storage) {
  if (storage.shape() != shape()) {
    throw distributed::InvalidArgument("Parameter::rebind_grad: storage shape " +
                                       distributed::to_string(storage.shape()) +
                                       " differs from the parameter's " +
                                       distributed::to_string(shape()));
  }
  if (!storage.shares_storage_with(grad_)) storage.copy_from(grad_);
  grad_ = std::move(storage);
}

std::vector<Parameter*> Module::parameters() {
  std::vector<Parameter*> out;
  for (auto& named : named_parameters()) out.push_back(named.parameter);
  return out;
}

std::vector<Tensor*> Module::buffers() {
  std::vector<Tensor*> out;
  for (auto& named : named_buffers()) out.push_back(named.buffer);
  return out;
}

std::size_t Module::parameter_count() { return named_parameters().size(); }

void Module::zero_grad() {
  for (Parameter* p : parameters()) p->zero_grad();
}

void Module::set_grad_ready_hook(const std::function<void(std::size_t index)>& hook) {
  const auto params = parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (hook) {
      params[i]->set_grad_ready_hook([hook, i] { hook(i); });
    } else {
      params[i]->clear_grad_ready_hook();
    }
  }
}

}  // namespace axonml::nn
