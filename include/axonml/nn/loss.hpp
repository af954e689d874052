// Losses: each forward returns the mean loss over the batch and caches what
// backward needs; backward returns d(loss)/d(input) for that mean.
//
// Because the loss is a mean over the rank's batch, averaging gradients over
// ranks with equal shards gives the gradient of the mean over the global
// batch, which is what makes DDP equal to one process.
//
// Thread safety: none; one owner per object (forward keeps what backward needs).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "axonml/distributed/tensor.hpp"

namespace axonml::nn {

using axonml::distributed::Tensor;

// Softmax over classes followed by negative log-likelihood.
class SoftmaxCrossEntropy {
 public:
  // logits [batch, classes]; labels: one class index per row.
  float forward(const Tensor& logits, std::span<const int> labels);
  Tensor backward() const;
  // Rows whose largest logit is the label, from the last forward.
  std::size_t correct() const { return correct_; }

 private:
  Tensor probabilities_;
  std::vector<int> labels_;
  std::size_t correct_ = 0;
};

// Mean of squared differences over all elements.
class MSELoss {
 public:
  float forward(const Tensor& prediction, const Tensor& target);
  Tensor backward() const;

 private:
  Tensor difference_;
};

}  // namespace axonml::nn
