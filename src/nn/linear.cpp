#include "axonml/nn/linear.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <cmath>
#include <random>

#include "axonml/distributed/error.hpp"

namespace axonml::nn {
namespace {

// Rows per task: enough work per task that scheduling costs stay small.
std::size_t grain_for(std::size_t work_per_row) {
  constexpr std::size_t kTarget = 16 * 1024;
  return std::max<std::size_t>(1, kTarget / std::max<std::size_t>(work_per_row, 1));
}

// Uniform in [-bound, bound) from the top 24 bits of mt19937_64, which (unlike
// std::uniform_real_distribution) gives the same values on every library.
std::vector<float> uniform(std::size_t count, float bound, std::mt19937_64& rng) {
  std::vector<float> v(count);
  for (float& x : v) {
    const float unit = static_cast<float>(rng() >> 40) * (1.0f / 16777216.0f);
    x = (2.0f * unit - 1.0f) * bound;
  }
  return v;
}

}  // namespace

void matmul_nt(std::span<const float> a, std::span<const float> b, std::span<const float> bias,
               std::span<float> out, std::size_t m, std::size_t k, std::size_t n) {
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, m, grain_for(k * n)),
                    [&](const tbb::blocked_range<std::size_t>& rows) {
                      for (std::size_t i = rows.begin(); i != rows.end(); ++i) {
                        const float* ai = a.data() + i * k;
                        for (std::size_t j = 0; j < n; ++j) {
                          const float* bj = b.data() + j * k;
                          float acc = 0.0f;
                          for (std::size_t p = 0; p < k; ++p) acc += ai[p] * bj[p];
                          out[i * n + j] = bias.empty() ? acc : acc + bias[j];
                        }
                      }
                    });
}

void matmul_tn_accumulate(std::span<const float> a, std::span<const float> b, std::span<float> out,
                          std::size_t m, std::size_t k, std::size_t n) {
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, m, grain_for(k * n)),
                    [&](const tbb::blocked_range<std::size_t>& rows) {
                      std::vector<float> row(n);
                      for (std::size_t i = rows.begin(); i != rows.end(); ++i) {
                        std::fill(row.begin(), row.end(), 0.0f);
                        for (std::size_t p = 0; p < k; ++p) {
                          const float api = a[p * m + i];
                          const float* bp = b.data() + p * n;
                          for (std::size_t j = 0; j < n; ++j) row[j] += api * bp[j];
                        }
                        float* oi = out.data() + i * n;
                        for (std::size_t j = 0; j < n; ++j) oi[j] += row[j];
                      }
                    });
}

void matmul_nn(std::span<const float> a, std::span<const float> b, std::span<float> out,
               std::size_t m, std::size_t k, std::size_t n) {
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, m, grain_for(k * n)),
                    [&](const tbb::blocked_range<std::size_t>& rows) {
                      for (std::size_t i = rows.begin(); i != rows.end(); ++i) {
                        float* oi = out.data() + i * n;
                        std::fill(oi, oi + n, 0.0f);
                        for (std::size_t p = 0; p < k; ++p) {
                          const float aip = a[i * k + p];
                          const float* bp = b.data() + p * n;
                          for (std::size_t j = 0; j < n; ++j) oi[j] += aip * bp[j];
                        }
                      }
                    });
}

Linear::Linear(std::size_t in_features, std::size_t out_features, std::uint64_t seed, bool bias)
    : in_(in_features), out_(out_features), has_bias_(bias) {
  if (in_features == 0 || out_features == 0) {
    throw distributed::InvalidArgument("Linear: in_features (" + std::to_string(in_features) +
                                       ") and out_features (" + std::to_string(out_features) +
                                       ") must be positive");
  }
  std::mt19937_64 rng(seed);
  const float bound = 1.0f / std::sqrt(static_cast<float>(in_features));
  weight_ = Parameter(Tensor::from_vec(uniform(out_ * in_, bound, rng), {out_, in_}));
  if (has_bias_) bias_ = Parameter(Tensor::from_vec(uniform(out_, bound, rng), {out_}));
}

Tensor Linear::forward(const Tensor& input) {
  if (input.dim() != 2 || input.shape()[1] != in_) {
    throw distributed::InvalidArgument("Linear::forward: input shape " +
                                       distributed::to_string(input.shape()) + " is not [batch, " +
                                       std::to_string(in_) + "]");
  }
  const std::size_t batch = input.shape()[0];
  Tensor out = Tensor::zeros({batch, out_});
  const std::span<const float> bias = has_bias_ ? std::span<const float>(bias_.value().data())
                                                : std::span<const float>();
  matmul_nt(input.data(), weight_.value().data(), bias, out.data(), batch, in_, out_);
  input_ = input;
  return out;
}

// Step by step, for dy [batch, out]:
//   db += sum over rows of dy           then the bias's hook fires;
//   dW += dy^T x                        then the weight's hook fires;
//   dx  = dy W                          returned.
Tensor Linear::backward(const Tensor& grad_output) {
  const std::size_t batch = input_.dim() == 2 ? input_.shape()[0] : 0;
  if (grad_output.shape() != Shape{batch, out_}) {
    throw distributed::InvalidArgument("Linear::backward: grad_output shape " +
                                       distributed::to_string(grad_output.shape()) +
                                       " is not the forward output's [" + std::to_string(batch) +
                                       ", " + std::to_string(out_) + "]");
  }
  const auto dy = grad_output.data();
  if (has_bias_) {
    auto db = bias_.grad().data();
    for (std::size_t j = 0; j < out_; ++j) {
      float acc = 0.0f;
      for (std::size_t i = 0; i < batch; ++i) acc += dy[i * out_ + j];
      db[j] += acc;
    }
    bias_.mark_grad_ready();
  }
  matmul_tn_accumulate(dy, input_.data(), weight_.grad().data(), out_, batch, in_);
  weight_.mark_grad_ready();
  Tensor dx = Tensor::zeros({batch, in_});
  matmul_nn(dy, weight_.value().data(), dx.data(), batch, out_, in_);
  return dx;
}

std::vector<NamedParameter> Linear::named_parameters() {
  std::vector<NamedParameter> out{{"weight", &weight_}};
  if (has_bias_) out.push_back({"bias", &bias_});
  return out;
}

}  // namespace axonml::nn
