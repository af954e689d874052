// The minimal nn: matrix products against a naive reference, backward against
// finite differences, hook order, losses and SGD against hand-computed steps.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "axonml/distributed/error.hpp"
#include "axonml/nn.hpp"

using namespace axonml::nn;
using axonml::distributed::InvalidArgument;

namespace {

Tensor random_tensor(Shape shape, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<float> v(axonml::distributed::numel_of(shape));
  for (float& x : v) x = static_cast<float>(static_cast<int>(rng() % 2001) - 1000) / 1000.0f;
  return Tensor::from_vec(std::move(v), std::move(shape));
}

double sum_of_products(const Tensor& a, const Tensor& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.numel(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

}  // namespace

TEST_CASE("matrix products equal a naive triple loop", "[nn][linear]") {
  const std::size_t m = GENERATE(1, 3, 70), k = GENERATE(1, 5, 33), n = GENERATE(1, 2, 129);
  const Tensor a = random_tensor({m, k}, 1), b = random_tensor({n, k}, 2), bias = random_tensor({n}, 3);
  std::vector<float> out(m * n);
  matmul_nt(a.data(), b.data(), bias.data(), out, m, k, n);
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      double ref = bias[j];
      for (std::size_t p = 0; p < k; ++p) ref += static_cast<double>(a[i * k + p]) * b[j * k + p];
      REQUIRE(out[i * n + j] == Approx(ref).margin(1e-5));
    }

  const Tensor c = random_tensor({k, m}, 4), d = random_tensor({k, n}, 5);
  std::vector<float> acc(m * n, 1.0f);
  matmul_tn_accumulate(c.data(), d.data(), acc, m, k, n);
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      double ref = 1.0;
      for (std::size_t p = 0; p < k; ++p) ref += static_cast<double>(c[p * m + i]) * d[p * n + j];
      REQUIRE(acc[i * n + j] == Approx(ref).margin(1e-5));
    }

  const Tensor e = random_tensor({m, k}, 6), f = random_tensor({k, n}, 7);
  std::vector<float> prod(m * n, 42.0f);
  matmul_nn(e.data(), f.data(), prod, m, k, n);
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      double ref = 0.0;
      for (std::size_t p = 0; p < k; ++p) ref += static_cast<double>(e[i * k + p]) * f[p * n + j];
      REQUIRE(prod[i * n + j] == Approx(ref).margin(1e-5));
    }
}

TEST_CASE("Linear init is deterministic per seed and scaled by fan-in", "[nn][linear]") {
  Linear a(16, 8, 7), b(16, 8, 7), c(16, 8, 8);
  CHECK(a.weight().value().to_vec() == b.weight().value().to_vec());
  CHECK(a.bias().value().to_vec() == b.bias().value().to_vec());
  CHECK(a.weight().value().to_vec() != c.weight().value().to_vec());
  for (float w : a.weight().value().data()) CHECK(std::abs(w) <= 0.25f);
}

// The loss L = sum(y * r) for a fixed r has dL/dy = r, so backward(r) must
// match central differences of L in every weight, bias and input element.
TEST_CASE("MLP backward matches finite differences", "[nn][gradcheck]") {
  Sequential mlp;
  mlp.add(Linear(5, 7, 1)).add(ReLU()).add(Linear(7, 3, 2));
  const Tensor x = random_tensor({4, 5}, 11);
  const Tensor r = random_tensor({4, 3}, 12);
  mlp.zero_grad();
  mlp.forward(x);
  const Tensor dx = mlp.backward(r);
  auto loss = [&] { return sum_of_products(mlp.forward(x), r); };
  const float h = 1e-3f;
  for (auto& [name, p] : mlp.named_parameters()) {
    for (std::size_t i = 0; i < p->numel(); ++i) {
      float& w = p->value()[i];
      const float saved = w;
      w = saved + h;
      const double up = loss();
      w = saved - h;
      const double down = loss();
      w = saved;
      CAPTURE(name, i);
      CHECK(p->grad()[i] == Approx((up - down) / (2 * h)).margin(2e-3));
    }
  }
  Tensor xp = x.clone();
  for (std::size_t i = 0; i < x.numel(); ++i) {
    const float saved = xp[i];
    xp[i] = saved + h;
    const double up = sum_of_products(mlp.forward(xp), r);
    xp[i] = saved - h;
    const double down = sum_of_products(mlp.forward(xp), r);
    xp[i] = saved;
    CHECK(dx[i] == Approx((up - down) / (2 * h)).margin(2e-3));
  }
}

TEST_CASE("backward accumulates gradients until zero_grad", "[nn]") {
  Linear layer(3, 2, 5);
  const Tensor x = random_tensor({2, 3}, 1), dy = random_tensor({2, 2}, 2);
  layer.forward(x);
  layer.backward(dy);
  const auto once = layer.weight().grad().to_vec();
  layer.forward(x);
  layer.backward(dy);
  for (std::size_t i = 0; i < once.size(); ++i) CHECK(layer.weight().grad()[i] == Approx(2 * once[i]));
  layer.zero_grad();
  for (float g : layer.weight().grad().data()) CHECK(g == 0.0f);
}

TEST_CASE("grad-ready hooks fire in reverse parameter order", "[nn][hooks]") {
  Sequential mlp;
  mlp.add(Linear(4, 6, 1)).add(ReLU()).add(Linear(6, 2, 2));
  std::vector<std::size_t> order;
  mlp.set_grad_ready_hook([&](std::size_t i) { order.push_back(i); });
  mlp.forward(random_tensor({3, 4}, 3));
  mlp.backward(random_tensor({3, 2}, 4));
  CHECK(order == std::vector<std::size_t>{3, 2, 1, 0});
  CHECK(mlp.named_parameters()[2].name == "2.weight");
}

TEST_CASE("train and eval propagate to children", "[nn]") {
  Sequential mlp;
  mlp.add(Linear(2, 2, 1)).add(ReLU());
  mlp.eval();
  CHECK_FALSE(mlp.is_training());
  CHECK_FALSE(mlp[1].is_training());
  mlp.train();
  CHECK(mlp[0].is_training());
}

TEST_CASE("rebind_grad keeps values and makes grad a view", "[nn]") {
  Linear layer(2, 2, 1);
  layer.forward(random_tensor({1, 2}, 1));
  layer.backward(random_tensor({1, 2}, 2));
  const auto before = layer.weight().grad().to_vec();
  Tensor storage = Tensor::zeros({2, 2});
  layer.weight().rebind_grad(storage);
  CHECK(storage.to_vec() == before);
  layer.forward(random_tensor({1, 2}, 1));
  layer.backward(random_tensor({1, 2}, 2));
  CHECK(storage[0] == Approx(2 * before[0]));
  CHECK_THROWS_AS(layer.bias().rebind_grad(Tensor::zeros({3})), InvalidArgument);
}

TEST_CASE("softmax cross-entropy gives log(classes) on zero logits and (p - onehot)/n", "[nn][loss]") {
  SoftmaxCrossEntropy loss;
  const std::vector<int> labels{0, 2};
  CHECK(loss.forward(Tensor::zeros({2, 4}), labels) == Approx(std::log(4.0f)));
  const Tensor g = loss.backward();
  CHECK(g[0] == Approx((0.25f - 1.0f) / 2));
  CHECK(g[1] == Approx(0.25f / 2));
  CHECK(g[6] == Approx((0.25f - 1.0f) / 2));
  const std::vector<int> bad{0, 4};
  CHECK_THROWS_WITH(loss.forward(Tensor::zeros({2, 4}), bad), Catch::Contains("label 4"));
}

TEST_CASE("MSE loss is the mean squared difference with gradient 2(p-t)/n", "[nn][loss]") {
  MSELoss loss;
  const Tensor p = Tensor::from_vec({1, 2, 3, 4}, {2, 2}), t = Tensor::from_vec({1, 0, 3, 2}, {2, 2});
  CHECK(loss.forward(p, t) == Approx(2.0f));
  CHECK(loss.backward().to_vec() == std::vector<float>{0, 1, 0, 1});
}

TEST_CASE("SGD with momentum and weight decay follows torch.optim.SGD", "[nn][optim]") {
  Parameter w(Tensor::from_vec({1.0f}, {1}));
  SGD sgd({&w}, {0.1f, 0.9f, 0.5f});
  w.grad()[0] = 2.0f;
  sgd.step();  // d = 2 + 0.5 = 2.5, v = 2.5, w = 1 - 0.25 = 0.75
  CHECK(w.value()[0] == Approx(0.75f));
  sgd.step();  // d = 2 + 0.375 = 2.375, v = 2.25 + 2.375 = 4.625, w = 0.75 - 0.4625
  CHECK(w.value()[0] == Approx(0.2875f));
  sgd.zero_grad();
  CHECK(w.grad()[0] == 0.0f);
}

TEST_CASE("an MLP learns a linearly separable toy problem", "[nn][train]") {
  Sequential mlp;
  mlp.add(Linear(2, 16, 1)).add(ReLU()).add(Linear(16, 2, 2));
  SGD sgd(mlp.parameters(), {0.5f, 0.9f, 0.0f});
  SoftmaxCrossEntropy loss;
  const Tensor x = random_tensor({64, 2}, 9);
  std::vector<int> y(64);
  for (std::size_t i = 0; i < 64; ++i) y[i] = x[i * 2] + x[i * 2 + 1] > 0 ? 1 : 0;
  for (int step = 0; step < 200; ++step) {
    sgd.zero_grad();
    loss.forward(mlp.forward(x), y);
    mlp.backward(loss.backward());
    sgd.step();
  }
  loss.forward(mlp.forward(x), y);
  CHECK(loss.correct() >= 62);
}
