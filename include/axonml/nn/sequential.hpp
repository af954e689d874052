// Sequential: modules applied one after another; backward runs them in
// reverse. Parameters are named "<child index>.<name>", as in PyTorch.
//
// Thread safety: none; one owner, with its children.
#pragma once

#include <concepts>
#include <memory>
#include <vector>

#include "axonml/nn/module.hpp"

namespace axonml::nn {

class Sequential final : public Module {
 public:
  Sequential() = default;

  Sequential& add(std::unique_ptr<Module> module);
  template <std::derived_from<Module> M>
  Sequential& add(M module) {
    return add(std::make_unique<M>(std::move(module)));
  }

  Tensor forward(const Tensor& input) override;
  Tensor backward(const Tensor& grad_output) override;
  std::vector<NamedParameter> named_parameters() override;
  std::vector<NamedBuffer> named_buffers() override;
  void train(bool mode = true) override;

  std::size_t size() const { return children_.size(); }
  Module& operator[](std::size_t i) { return *children_.at(i); }

 private:
  std::vector<std::unique_ptr<Module>> children_;
};

}  // namespace axonml::nn
