#include "axonml/nn/optim.hpp"

#include <algorithm>

#include "axonml/distributed/error.hpp"

namespace axonml::nn {

SGD::SGD(std::vector<Parameter*> parameters, SGDOptions options)
    : parameters_(std::move(parameters)), options_(options) {
  if (!(options.lr >= 0.0f) || !(options.momentum >= 0.0f) || !(options.weight_decay >= 0.0f)) {
    throw distributed::InvalidArgument("SGD: lr (" + std::to_string(options.lr) + "), momentum (" +
                                       std::to_string(options.momentum) + ") and weight_decay (" +
                                       std::to_string(options.weight_decay) +
                                       ") must be non-negative");
  }
}

void SGD::step() {
  const bool first = velocity_.empty();
  if (first && options_.momentum != 0.0f) velocity_.resize(parameters_.size());
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    auto w = parameters_[i]->value().data();
    const auto g = parameters_[i]->grad().data();
    if (options_.momentum == 0.0f) {
      for (std::size_t j = 0; j < w.size(); ++j) w[j] -= options_.lr * (g[j] + options_.weight_decay * w[j]);
      continue;
    }
    auto& v = velocity_[i];
    if (first) v.assign(w.size(), 0.0f);
    for (std::size_t j = 0; j < w.size(); ++j) {
      const float d = g[j] + options_.weight_decay * w[j];
      v[j] = first ? d : options_.momentum * v[j] + d;
      w[j] -= options_.lr * v[j];
    }
  }
}

void SGD::set_velocity(std::vector<std::vector<float>> velocity) {
  if (!velocity.empty()) {
    bool fits = velocity.size() == parameters_.size();
    for (std::size_t i = 0; fits && i < velocity.size(); ++i) {
      fits = velocity[i].size() == parameters_[i]->value().numel();
    }
    if (!fits) {
      throw distributed::InvalidArgument("SGD::set_velocity: " + std::to_string(velocity.size()) +
                                         " buffers do not match the " +
                                         std::to_string(parameters_.size()) + " parameters' sizes");
    }
  }
  velocity_ = std::move(velocity);
}

void SGD::zero_grad() {
  for (Parameter* p : parameters_) p->zero_grad();
}

}  // namespace axonml::nn
