// bf16 gradient compression (DdpOptions::gradient_compression = BF16) on a
// mock world: buckets really travel as bf16 (the collective descriptors say
// so and every averaged gradient is a bf16 value), the averages match the f32
// path within bf16 rounding, replicas stay bitwise identical, training still
// converges, and the bf16 twins go in shared memory on every rank or on none.
//
// Catch2 assertions are not thread-safe, so rank bodies record results and
// the test thread checks them.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <regex>
#include <sstream>

#include "axonml/nn.hpp"
#include "support/log_capture.hpp"
#include "support/run_ranks.hpp"
#include "support/training.hpp"

using namespace axonml::distributed;
using namespace axonml::nn;
using axon_test::PerRank;
using axon_test::Batch;
using axon_test::flatten_grads;
using axon_test::flatten_values;
using axon_test::run_ranks;
using axon_test::shard;

namespace {

constexpr std::size_t kIn = 8, kHidden = 32, kClasses = 4;

Sequential make_mlp(std::uint64_t seed) {
  Sequential mlp;
  mlp.add(Linear(kIn, kHidden, seed)).add(ReLU()).add(Linear(kHidden, kClasses, seed + 1));
  return mlp;
}

// A learnable task: the label is the largest of the first kClasses features.
Batch make_batch(std::size_t rows, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> x(rows * kIn);
  for (float& v : x) v = normal(rng);
  std::vector<int> y(rows);
  for (std::size_t i = 0; i < rows; ++i) {
    const float* row = &x[i * kIn];
    y[i] = static_cast<int>(std::max_element(row, row + kClasses) - row);
  }
  return {Tensor::from_vec(std::move(x), {rows, kIn}), std::move(y)};
}

// A value that came out of a bf16 buffer has nothing in the low 16 bits.
bool is_bf16_value(float v) { return (std::bit_cast<std::uint32_t>(v) & 0xffffu) == 0; }

struct Run {
  std::vector<float> params;
  std::vector<float> last_grads;  // the averaged grads of the last step
  float first_loss = 0, last_loss = 0;  // on a held-out batch, before and after training
  float accuracy = 0;                   // on that batch, after training
  std::size_t buckets = 0;
  bool shared = false;  // bucket 0's all-reduced buffer is in shared memory
};

// Trains a DDP replica for `steps` on its shard of a global batch of 32.
Run train(std::shared_ptr<Backend> backend, int r, int n, DdpOptions options, int steps) {
  DistributedDataParallel ddp(make_mlp(7 + static_cast<std::uint64_t>(r)), ProcessGroup(std::move(backend)), options);
  ddp.sync_parameters();
  SGD sgd(ddp.module_mut().parameters(), SGDOptions{0.2f, 0.9f, 0.0f});
  SoftmaxCrossEntropy loss;
  const std::size_t global = 32, local = global / static_cast<std::size_t>(n);
  const Batch held_out = make_batch(512, 999);
  Run run;
  run.first_loss = loss.forward(ddp.module_mut().forward(held_out.x), held_out.y);
  for (int step = 0; step < steps; ++step) {
    const Batch mine = shard(make_batch(global, static_cast<unsigned>(step)), static_cast<std::size_t>(r) * local, local);
    sgd.zero_grad();
    loss.forward(ddp.forward(mine.x), mine.y);
    ddp.backward(loss.backward());
    ddp.sync_gradients();
    if (step == steps - 1) run.last_grads = flatten_grads(ddp.module_mut());
    sgd.step();
  }
  run.last_loss = loss.forward(ddp.module_mut().forward(held_out.x), held_out.y);
  run.accuracy = static_cast<float>(loss.correct()) / static_cast<float>(held_out.y.size());
  run.params = flatten_values(ddp.module_mut());
  run.buckets = ddp.synchronizer().bucket_count();
  run.shared = ddp.synchronizer().bucket_in_shared_memory(0);
  return run;
}

}  // namespace

TEST_CASE("bf16 compression averages within bf16 rounding of the f32 mean, identically on every rank",
          "[grad_sync][bf16]") {
  const int n = GENERATE(2, 3, 4);
  const auto strategy = GENERATE(GradSyncStrategy::Synchronous, GradSyncStrategy::Overlapped);
  const bool fixed = GENERATE(false, true);
  CAPTURE(n, static_cast<int>(strategy), fixed);
  const std::vector<Shape> shapes{{300}, {7}, {40, 50}, {1}, {999}};
  // Each rank's gradients: random values over several orders of magnitude.
  auto values_of = [&](int r) {
    std::mt19937 rng(static_cast<unsigned>(100 + r));
    std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
    std::uniform_int_distribution<int> exponent(-8, 8);
    std::vector<std::vector<float>> grads;
    for (const Shape& s : shapes) {
      std::vector<float> g(numel_of(s));
      for (float& v : g) v = std::ldexp(mantissa(rng), exponent(rng));
      grads.push_back(std::move(g));
    }
    return grads;
  };
  PerRank<std::vector<std::vector<float>>> results(n);
  run_ranks(n, [&](std::shared_ptr<Backend> backend, int r) {
    ProcessGroup pg(backend);
    GradientSynchronizer sync(strategy, 1000, 400, GradientCompression::BF16);
    sync.set_group(pg);
    if (fixed) sync.prepare(shapes); else sync.prepare(shapes.size());
    std::vector<Tensor> grads;
    for (std::size_t i = 0; i < shapes.size(); ++i) grads.push_back(Tensor::from_vec(values_of(r)[i], shapes[i]));
    for (std::size_t i = grads.size(); i-- > 0;) sync.add_gradient(i, grads[i]);
    sync.sync_all(pg);
    for (auto& g : grads) results[r].push_back(g.to_vec());
    sync.clear();
  });
  std::vector<std::vector<std::vector<float>>> inputs;
  for (int r = 0; r < n; ++r) inputs.push_back(values_of(r));
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    for (std::size_t k = 0; k < inputs[0][i].size(); ++k) {
      // Rounding each input and then the mean, each off by at most half a
      // bf16 ulp (2^-8 relative): the error is bounded by 2^-8 of the largest
      // input plus 2^-8 of the result.
      double mean = 0, largest = 0;
      for (int r = 0; r < n; ++r) {
        mean += inputs[static_cast<std::size_t>(r)][i][k];
        largest = std::max(largest, std::abs(static_cast<double>(inputs[static_cast<std::size_t>(r)][i][k])));
      }
      mean /= n;
      const float got = results[0][i][k];
      const double bound = std::ldexp(largest + std::abs(mean), -8) * 1.01;
      if (std::abs(got - mean) > bound || !is_bf16_value(got)) {
        CAPTURE(i, k, got, mean, bound);
        FAIL("averaged gradient is not the bf16-rounded mean");
      }
    }
  }
  for (int r = 1; r < n; ++r) CHECK(results[r] == results[0]);
}

TEST_CASE("bf16 DDP moves bf16 buckets: every gradient all-reduce is bf16 average", "[ddp][bf16][log]") {
  const auto compression = GENERATE(GradientCompression::None, GradientCompression::BF16);
  const bool bf16 = compression == GradientCompression::BF16;
  const int n = 2, steps = 3;
  DdpOptions options;
  options.gradient_compression = compression;
  options.bucket_cap_mb = options.first_bucket_cap_mb = 0.001;  // 262 floats: several buckets
  PerRank<Run> runs(n);
  std::string text;
  {
    axon_test::LogEnvironment env(nullptr, "1");
    axon_test::StderrCapture capture;
    run_ranks(n, [&](std::shared_ptr<Backend> backend, int r) { runs[r] = train(backend, r, n, options, steps); });
    text = capture.text();
  }
  const std::size_t buckets = runs[0].buckets;
  REQUIRE(buckets >= 2);
  // Per rank: one all-reduce per bucket and step; with compression all bf16, and no f32 all-reduce at all.
  const std::regex bf16_average(R"(all_reduce\(bf16, \d+, average(, shared buffer)?\))");
  const std::regex f32_all_reduce(R"(all_reduce\(f32,)");
  std::size_t bf16_lines = 0, f32_lines = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    bf16_lines += std::regex_search(line, bf16_average) ? 1 : 0;
    f32_lines += std::regex_search(line, f32_all_reduce) ? 1 : 0;
  }
  INFO("captured:\n" << text.substr(0, 4000));
  if (bf16) {
    CHECK(bf16_lines == n * steps * buckets);
    CHECK(f32_lines == 0);
  } else {
    CHECK(bf16_lines == 0);
    CHECK(f32_lines == n * steps * buckets);
  }
  // The averaged grads are bf16 values exactly when compressed.
  const auto& grads = runs[0].last_grads;
  const auto bf16_count = static_cast<std::size_t>(std::count_if(grads.begin(), grads.end(), is_bf16_value));
  if (bf16) {
    CHECK(bf16_count == grads.size());
  } else {
    CHECK(bf16_count < grads.size() / 2);
  }
}

TEST_CASE("bf16 DDP trains like f32 DDP, with bitwise identical replicas", "[ddp][bf16]") {
  const int n = GENERATE(2, 4);
  const auto strategy = GENERATE(GradSyncStrategy::Synchronous, GradSyncStrategy::Overlapped);
  const bool as_view = GENERATE(false, true);
  const double cap_mb = GENERATE(25.0, 0.001);
  CAPTURE(n, static_cast<int>(strategy), as_view, cap_mb);
  const int steps = 40;
  DdpOptions options;
  options.strategy = strategy;
  options.gradient_as_bucket_view = as_view;
  options.bucket_cap_mb = cap_mb;
  options.first_bucket_cap_mb = std::min(cap_mb, 1.0);
  PerRank<Run> f32(n), bf16(n);
  run_ranks(n, [&](std::shared_ptr<Backend> backend, int r) {
    f32[r] = train(backend, r, n, options, steps);
    DdpOptions compressed = options;
    compressed.gradient_compression = GradientCompression::BF16;
    bf16[r] = train(backend, r, n, compressed, steps);
  });
  for (int r = 0; r < n; ++r) {
    CAPTURE(r);
    CHECK(bf16[r].params == bf16[0].params);  // replicas stay bitwise identical
    CHECK(bf16[r].last_loss < 0.5f * bf16[r].first_loss);  // it converges
  }
  // After 40 steps the two runs are close: bf16 rounding perturbs, not derails.
  float largest = 0, worst = 0;
  for (std::size_t i = 0; i < f32[0].params.size(); ++i) {
    largest = std::max(largest, std::abs(f32[0].params[i]));
    worst = std::max(worst, std::abs(bf16[0].params[i] - f32[0].params[i]));
  }
  CAPTURE(worst, largest, f32[0].last_loss, bf16[0].last_loss, f32[0].accuracy, bf16[0].accuracy);
  CHECK(bf16[0].accuracy >= f32[0].accuracy - 0.05f);
  CHECK(worst <= 0.05f * largest);
  CHECK(std::abs(bf16[0].last_loss - f32[0].last_loss) <= 0.1f * f32[0].first_loss);
}

TEST_CASE("DDP buckets go in shared memory on every rank or on none", "[ddp][bf16][zero-copy]") {
  const auto compression = GENERATE(GradientCompression::None, GradientCompression::BF16);
  const bool room_for_both = GENERATE(true, false);
  CAPTURE(static_cast<int>(compression), room_for_both);
  const int n = 2;
  // One bucket of 2048 gradients: one page as bf16, two as f32.
  constexpr std::size_t kPage = 4096;
  const std::size_t pages_per_rank = compression == GradientCompression::BF16 ? 1 : 2;
  auto model = [] { return Linear(63, 32, 3); };  // 32 * 63 + 32 = 2048 parameters
  const MockOptions arena{std::size_t{8} << 20, 0};
  // The arena hands out whole pages from one pool, laid out the same in every
  // fresh world: count the free pages once, then, in a second world, leave
  // exactly the room wanted before DDP allocates.
  std::size_t free_pages = 0;
  run_ranks(n, [&](std::shared_ptr<Backend> backend, int r) {
    backend->barrier();
    if (r != 0) return;
    std::vector<std::shared_ptr<std::byte>> held;
    while (auto page = backend->allocate_shared(kPage)) held.push_back(std::move(page));
    free_pages = held.size();
  }, arena);
  const std::size_t leave = (room_for_both ? 2 : 1) * pages_per_rank;
  REQUIRE(free_pages > leave);
  PerRank<int> shared(n);  // not bool: vector<bool> has no references
  PerRank<std::vector<float>> grads(n);
  run_ranks(n, [&](std::shared_ptr<Backend> backend, int r) {
    backend->barrier();
    std::vector<std::shared_ptr<std::byte>> held;
    if (r == 0) {
      for (std::size_t i = 0; i < free_pages - leave; ++i) held.push_back(backend->allocate_shared(kPage));
    }
    backend->barrier();
    DdpOptions options;
    options.gradient_compression = compression;
    DistributedDataParallel ddp(model(), ProcessGroup(backend), options);
    shared[r] = ddp.synchronizer().bucket_in_shared_memory(0);
    std::mt19937 rng(static_cast<unsigned>(r));
    std::vector<float> x(4 * 63);
    for (float& v : x) v = static_cast<float>(rng() % 1000) / 500.0f - 1.0f;
    SoftmaxCrossEntropy loss;
    loss.forward(ddp.forward(Tensor::from_vec(std::move(x), {4, 63})), std::vector<int>{1, 5, 9, 31});
    ddp.backward(loss.backward());
    ddp.sync_gradients();  // mixed shared and private buffers would be a mismatch error
    grads[r] = flatten_grads(ddp.module_mut());
  }, arena);
  CHECK(shared[0] == static_cast<int>(room_for_both));
  CHECK(shared[1] == static_cast<int>(room_for_both));
  CHECK(grads[0] == grads[1]);
}

// Ranks that differed only in gradient_compression were told "the ranks laid
// out a bucket differently" with the same list of gradients on both, and no
// word of the wire type (a review).
TEST_CASE("ranks that differ only in bf16 compression are a mismatch that names each rank's wire type",
          "[grad_sync][bf16][errors]") {
  run_ranks(2, [&](std::shared_ptr<Backend> backend, int r) {
    ProcessGroup pg(backend);
    GradientSynchronizer sync(GradSyncStrategy::Synchronous, 16, 0,
                              r == 0 ? GradientCompression::BF16 : GradientCompression::None);
    sync.set_group(pg);
    sync.prepare(2);
    std::vector<Tensor> grads{Tensor::full({2}, 1.0f), Tensor::full({3}, 100.0f)};
    const std::string error = axon_test::error_of([&] {
      for (std::size_t i = grads.size(); i-- > 0;) sync.add_gradient(i, grads[i]);
      sync.sync_all(pg);
    });
    RANK_REQUIRE_THAT(error, Catch::Contains("laid out a bucket differently") &&
                                 Catch::Contains(r == 0 ? "floats, sent as bf16 (GradientCompression::BF16)"
                                                        : "floats, sent as f32 (no compression)") &&
                                 Catch::Contains("compress alike"));
  });
}
