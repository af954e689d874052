// Linear: y = x W^T + b for a batch x of shape [batch, in_features].
//
// W has shape [out_features, in_features], b [out_features]. Weights start
// uniform in +-1/sqrt(in_features) (PyTorch's default scale), drawn from a
// generator seeded with `seed`, so equal seeds give equal layers on every
// platform. Matrix products run over oneTBB row blocks; each output element
// is summed by one task in a fixed order, so results do not depend on how
// the rows were split among threads.
//
// backward fires the bias's hook, then the weight's, before computing the
// input gradient (reverse of the parameter order weight, bias).
//
// Thread safety: none; one owner (forward keeps its input for backward).
// Inside each call the products run on oneTBB's workers (see ComputeThreads).
// The matmul functions below keep no state: calls on distinct outputs may run
// concurrently.
#pragma once

#include <cstdint>
#include <span>

#include "axonml/nn/module.hpp"

namespace axonml::nn {

class Linear final : public Module {
 public:
  Linear(std::size_t in_features, std::size_t out_features, std::uint64_t seed, bool bias = true);

  Tensor forward(const Tensor& input) override;
  Tensor backward(const Tensor& grad_output) override;
  std::vector<NamedParameter> named_parameters() override;

  std::size_t in_features() const { return in_; }
  std::size_t out_features() const { return out_; }
  Parameter& weight() { return weight_; }
  Parameter& bias() { return bias_; }

 private:
  std::size_t in_;
  std::size_t out_;
  bool has_bias_;
  Parameter weight_;
  Parameter bias_;
  Tensor input_;  // cached by forward for backward
};

// The matrix products Linear uses, exposed for tests. Row-major, no aliasing.
// out[m x n] = a[m x k] * b[n x k]^T (+ bias[n] when non-empty)
void matmul_nt(std::span<const float> a, std::span<const float> b, std::span<const float> bias,
               std::span<float> out, std::size_t m, std::size_t k, std::size_t n);
// out[m x n] += a[k x m]^T * b[k x n]
void matmul_tn_accumulate(std::span<const float> a, std::span<const float> b, std::span<float> out,
                          std::size_t m, std::size_t k, std::size_t n);
// out[m x n] = a[m x k] * b[k x n]
void matmul_nn(std::span<const float> a, std::span<const float> b, std::span<float> out,
               std::size_t m, std::size_t k, std::size_t n);

}  // namespace axonml::nn
