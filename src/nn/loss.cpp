#include "axonml/nn/loss.hpp"

#include <algorithm>
#include <cmath>

#include "axonml/distributed/error.hpp"

namespace axonml::nn {

using distributed::InvalidArgument;
using distributed::to_string;

// Per row: subtract the max logit (so exp cannot overflow), normalise, and
// take -log p[label]. The loss is the mean over rows.
float SoftmaxCrossEntropy::forward(const Tensor& logits, std::span<const int> labels) {
  if (logits.dim() != 2 || logits.shape()[0] != labels.size()) {
    throw InvalidArgument("SoftmaxCrossEntropy::forward: logits shape " + to_string(logits.shape()) +
                          " is not [" + std::to_string(labels.size()) + " labels, classes]");
  }
  const std::size_t rows = logits.shape()[0];
  const std::size_t classes = logits.shape()[1];
  probabilities_ = Tensor::zeros(logits.shape());
  labels_.assign(labels.begin(), labels.end());
  correct_ = 0;
  const auto z = logits.data();
  auto p = probabilities_.data();
  double total = 0.0;
  for (std::size_t i = 0; i < rows; ++i) {
    const int label = labels[i];
    if (label < 0 || static_cast<std::size_t>(label) >= classes) {
      throw InvalidArgument("SoftmaxCrossEntropy::forward: label " + std::to_string(label) +
                            " of row " + std::to_string(i) + " is outside 0.." +
                            std::to_string(classes - 1));
    }
    const float* zi = z.data() + i * classes;
    const auto argmax = static_cast<std::size_t>(std::max_element(zi, zi + classes) - zi);
    if (argmax == static_cast<std::size_t>(label)) ++correct_;
    const float top = zi[argmax];
    float sum = 0.0f;
    for (std::size_t j = 0; j < classes; ++j) sum += (p[i * classes + j] = std::exp(zi[j] - top));
    for (std::size_t j = 0; j < classes; ++j) p[i * classes + j] /= sum;
    total += static_cast<double>(std::log(sum) - (zi[label] - top));
  }
  return rows ? static_cast<float>(total / static_cast<double>(rows)) : 0.0f;
}

// d(mean loss)/dz = (softmax - onehot) / rows.
Tensor SoftmaxCrossEntropy::backward() const {
  Tensor grad = probabilities_.clone();
  const std::size_t rows = labels_.size();
  if (rows == 0) return grad;
  const std::size_t classes = grad.shape()[1];
  auto g = grad.data();
  const float scale = 1.0f / static_cast<float>(rows);
  for (std::size_t i = 0; i < rows; ++i) {
    g[i * classes + static_cast<std::size_t>(labels_[i])] -= 1.0f;
    for (std::size_t j = 0; j < classes; ++j) g[i * classes + j] *= scale;
  }
  return grad;
}

float MSELoss::forward(const Tensor& prediction, const Tensor& target) {
  if (prediction.shape() != target.shape()) {
    throw InvalidArgument("MSELoss::forward: prediction shape " + to_string(prediction.shape()) +
                          " differs from target shape " + to_string(target.shape()));
  }
  difference_ = prediction.clone();
  auto d = difference_.data();
  const auto t = target.data();
  double total = 0.0;
  for (std::size_t i = 0; i < d.size(); ++i) {
    d[i] -= t[i];
    total += static_cast<double>(d[i]) * d[i];
  }
  return d.empty() ? 0.0f : static_cast<float>(total / static_cast<double>(d.size()));
}

// d(mean (p - t)^2)/dp = 2 (p - t) / count.
Tensor MSELoss::backward() const {
  Tensor grad = difference_.clone();
  auto g = grad.data();
  const float scale = g.empty() ? 0.0f : 2.0f / static_cast<float>(g.size());
  for (float& x : g) x *= scale;
  return grad;
}

}  // namespace axonml::nn
