// DistributedDataParallel and GradientSynchronizer on a mock world (threads):
// DDP training equals one process on the global batch, parameters and buffers
// really broadcast, no_sync accumulates, mismatched models fail clearly, and
// Overlapped reduces buckets while backward is still running.
//
// Catch2 assertions are not thread-safe, so rank bodies record results and
// the test thread checks them.
#include <limits>
#include <catch2/catch.hpp>

#include <chrono>
#include <random>
#include <thread>

#include "axonml/nn.hpp"
#include "support/run_ranks.hpp"
#include "support/training.hpp"

using namespace axonml::distributed;
using namespace axonml::nn;
using axon_test::PerRank;
using axon_test::Batch;
using axon_test::error_of;
using axon_test::flatten_grads;
using axon_test::flatten_values;
using axon_test::run_ranks;
using axon_test::shard;

namespace {

constexpr std::size_t kIn = 8, kHidden = 24, kClasses = 4;

Sequential make_mlp(std::uint64_t seed) {
  Sequential mlp;
  mlp.add(Linear(kIn, kHidden, seed)).add(ReLU()).add(Linear(kHidden, kHidden, seed + 1)).add(ReLU());
  mlp.add(Linear(kHidden, kClasses, seed + 2));
  return mlp;
}

Batch make_batch(std::size_t rows, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<float> x(rows * kIn);
  for (float& v : x) v = static_cast<float>(static_cast<int>(rng() % 2001) - 1000) / 500.0f;
  std::vector<int> y(rows);
  for (int& label : y) label = static_cast<int>(rng() % kClasses);
  return {Tensor::from_vec(std::move(x), {rows, kIn}), std::move(y)};
}

constexpr int kSteps = 6;
constexpr std::size_t kGlobalBatch = 24;
const SGDOptions kSgd{0.1f, 0.9f, 1e-3f};

std::vector<float> train_single() {
  Sequential mlp = make_mlp(100);
  SGD sgd(mlp.parameters(), kSgd);
  SoftmaxCrossEntropy loss;
  for (int step = 0; step < kSteps; ++step) {
    const Batch b = make_batch(kGlobalBatch, static_cast<unsigned>(step));
    sgd.zero_grad();
    loss.forward(mlp.forward(b.x), b.y);
    mlp.backward(loss.backward());
    sgd.step();
  }
  return flatten_values(mlp);
}

void require_close(const std::vector<float>& actual, const std::vector<float>& expected) {
  REQUIRE(actual.size() == expected.size());
  for (std::size_t i = 0; i < actual.size(); ++i) {
    CAPTURE(i);
    REQUIRE(actual[i] == Approx(expected[i]).epsilon(1e-4).margin(1e-5));
  }
}

// A Linear(3, 2) seeded by `fill` with a buffer beside it, like batch-norm's
// running statistics: `size` floats of `fill`.
class WithBuffer final : public Module {
 public:
  WithBuffer(float fill, std::size_t size)
      : layer_(3, 2, static_cast<std::uint64_t>(fill)), stats_(Tensor::full({size}, fill)) {}
  Tensor forward(const Tensor& x) override { return layer_.forward(x); }
  Tensor backward(const Tensor& g) override { return layer_.backward(g); }
  std::vector<NamedParameter> named_parameters() override { return layer_.named_parameters(); }
  std::vector<NamedBuffer> named_buffers() override { return {{"stats", &stats_}}; }

 private:
  Linear layer_;
  Tensor stats_;
};

// Waits (sleeping, with a deadline) until `done()`; false on timeout.
template <typename F>
bool eventually(F done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace

TEST_CASE("DDP training equals one process on the global batch", "[ddp]") {
  const int n = GENERATE(1, 2, 3, 4);
  const auto strategy = GENERATE(GradSyncStrategy::Synchronous, GradSyncStrategy::Overlapped);
  const bool as_view = GENERATE(false, true);
  const double cap_mb = GENERATE(25.0, 0.001);  // 0.001 MiB = 262 floats: many buckets
  CAPTURE(n, static_cast<int>(strategy), as_view, cap_mb);
  const auto expected = train_single();
  PerRank<std::vector<float>> result(n);
  PerRank<std::size_t> buckets(n);
  run_ranks(n, [&](std::shared_ptr<Backend> backend, int r) {
    // Different seeds per rank: sync_parameters must make rank 0's the start.
    DdpOptions options;
    options.strategy = strategy;
    options.bucket_cap_mb = cap_mb;
    options.first_bucket_cap_mb = std::min(cap_mb, 1.0);
    options.gradient_as_bucket_view = as_view;
    DistributedDataParallel ddp(make_mlp(100 + static_cast<std::uint64_t>(r)), ProcessGroup(backend), options);
    ddp.sync_parameters();
    SGD sgd(ddp.module_mut().parameters(), kSgd);
    SoftmaxCrossEntropy loss;
    const std::size_t local = kGlobalBatch / static_cast<std::size_t>(n);
    for (int step = 0; step < kSteps; ++step) {
      const Batch mine = shard(make_batch(kGlobalBatch, static_cast<unsigned>(step)),
                               static_cast<std::size_t>(r) * local, local);
      sgd.zero_grad();
      loss.forward(ddp.forward(mine.x), mine.y);
      ddp.backward(loss.backward());
      ddp.sync_gradients();
      sgd.step();
    }
    result[r] = flatten_values(ddp.module_mut());
    buckets[r] = ddp.synchronizer().bucket_count();
  });
  for (int r = 0; r < n; ++r) {
    CAPTURE(r);
    require_close(result[r], expected);
    CHECK(result[r] == result[0]);  // replicas are bitwise identical
    // Reverse order: 4 + 96 + 24 | 576 | 24 + 192 floats under 262; all in one 1 MiB first bucket.
    CHECK(buckets[r] == (cap_mb < 1.0 ? 3u : 1u));
  }
}

TEST_CASE("sync_parameters makes every rank's parameters and buffers rank 0's", "[ddp]") {
  const bool with_buffers = GENERATE(true, false);
  const int n = 3;
  PerRank<std::vector<float>> params(n), stats(n);
  run_ranks(n, [&](std::shared_ptr<Backend> backend, int r) {
    DistributedDataParallel ddp(WithBuffer(static_cast<float>(r + 1), 2), ProcessGroup(backend));
    ddp.broadcast_buffers(with_buffers);
    ddp.sync_parameters();
    params[r] = flatten_values(ddp.module_mut());
    stats[r] = ddp.module_mut().buffers()[0]->to_vec();
  });
  const auto rank0_params = flatten_values(*std::make_unique<Linear>(3, 2, 1));
  for (int r = 0; r < n; ++r) {
    CHECK(params[r] == rank0_params);
    CHECK(stats[r] == std::vector<float>(2, with_buffers ? 1.0f : static_cast<float>(r + 1)));
  }
}

TEST_CASE("under no_sync gradients accumulate locally, then sync averages the sum", "[ddp]") {
  const auto strategy = GENERATE(GradSyncStrategy::Synchronous, GradSyncStrategy::Overlapped);
  const bool as_view = GENERATE(false, true);
  const int n = 2;
  PerRank<std::vector<float>> local_twice(n), after_sync(n);
  PerRank<std::size_t> reduced_under_guard(n);
  std::vector<float> expected;
  {
    // The reference: each rank's grads after two local passes, then one more, averaged.
    std::vector<std::vector<float>> per_rank;
    for (int r = 0; r < n; ++r) {
      Linear layer(kIn, kClasses, 5);
      const Batch b = make_batch(4, static_cast<unsigned>(10 + r));
      SoftmaxCrossEntropy loss;
      for (int pass = 0; pass < 3; ++pass) {
        loss.forward(layer.forward(b.x), b.y);
        layer.backward(loss.backward());
      }
      per_rank.push_back(layer.weight().grad().to_vec());
    }
    for (std::size_t i = 0; i < per_rank[0].size(); ++i) expected.push_back((per_rank[0][i] + per_rank[1][i]) * 0.5f);
  }
  run_ranks(n, [&](std::shared_ptr<Backend> backend, int r) {
    DdpOptions options;
    options.strategy = strategy;
    options.gradient_as_bucket_view = as_view;
    DistributedDataParallel ddp(Linear(kIn, kClasses, 5), ProcessGroup(backend), options);
    const Batch b = make_batch(4, static_cast<unsigned>(10 + r));
    SoftmaxCrossEntropy loss;
    auto& layer = dynamic_cast<Linear&>(ddp.module_mut());
    {
      auto guard = ddp.no_sync();
      for (int pass = 0; pass < 2; ++pass) {
        loss.forward(ddp.forward(b.x), b.y);
        ddp.backward(loss.backward());
      }
      ddp.sync_gradients();  // communicates nothing here
      reduced_under_guard[r] = ddp.synchronizer().buckets_reduced();
      local_twice[r] = layer.weight().grad().to_vec();
    }
    loss.forward(ddp.forward(b.x), b.y);
    ddp.backward(loss.backward());
    ddp.sync_gradients();
    after_sync[r] = layer.weight().grad().to_vec();
  });
  CHECK(local_twice[0] != local_twice[1]);  // nothing was averaged under the guard
  for (int r = 0; r < n; ++r) {
    CHECK(reduced_under_guard[r] == 0);
    require_close(after_sync[r], expected);
  }
}

TEST_CASE("DDP construction names the first parameter whose shape differs", "[ddp][errors]") {
  const bool extra_layer = GENERATE(false, true);
  const int n = 3;
  PerRank<std::string> message(n);
  run_ranks(n, [&](std::shared_ptr<Backend> backend, int r) {
    Sequential mlp;
    mlp.add(Linear(kIn, 4, 1));
    if (r == 2) {
      if (extra_layer) {
        mlp.add(Linear(4, 4, 2));
      } else {
        mlp = Sequential();
        mlp.add(Linear(kIn, 5, 1));
      }
    }
    try {
      DistributedDataParallel ddp(std::move(mlp), ProcessGroup(backend));
    } catch (const InvalidArgument& e) {
      message[r] = e.what();
    }
  });
  for (int r = 0; r < n; ++r) {
    CAPTURE(message[r]);
    if (extra_layer) {
      CHECK_THAT(message[r], Catch::Contains("parameter 2") &&
                                 Catch::Contains("(no such parameter or buffer) on rank 0 but [4, 4] on rank 2") &&
                                 Catch::Contains("(parameters, and buffers it broadcasts: rank 0 has 2 and 0, rank 2 has 4 and 0)"));
    } else {
      CHECK_THAT(message[r], Catch::Contains("parameter 0") && Catch::Contains("\"0.weight\"") &&
                                 Catch::Contains("[4, 8] on rank 0 but [5, 8] on rank 2"));
    }
  }
}

// sync_parameters() broadcasts the buffers after the parameters: a buffer
// whose size differed was a bare broadcast mismatch of two float counts (a
// review).
TEST_CASE("DDP construction names a buffer whose shape differs, when it broadcasts buffers", "[ddp][errors]") {
  const bool broadcast_buffers = GENERATE(true, false);
  const int n = 2;
  PerRank<std::string> message(n);
  run_ranks(n, [&](std::shared_ptr<Backend> backend, int r) {
    DdpOptions options;
    options.broadcast_buffers = broadcast_buffers;
    message[r] = error_of([&] { DistributedDataParallel ddp(WithBuffer(1.0f, r == 0 ? 3 : 4), ProcessGroup(backend), options); });
  });
  for (int r = 0; r < n; ++r) {
    CAPTURE(message[r]);
    if (broadcast_buffers) {
      CHECK_THAT(message[r], Catch::Contains("DistributedDataParallel: buffer 0 (\"stats\" on rank " + std::to_string(r) +
                                             ") has shape [3] on rank 0 but [4] on rank 1 (parameters, and buffers it "
                                             "broadcasts: rank 0 has 2 and 1, rank 1 has 2 and 1); every rank must build "
                                             "the same model, and pass the same broadcast_buffers"));
    } else {
      CHECK(message[r].empty());  // not broadcast: each rank keeps its own
    }
  }
}

// A layer that, during backward, records how many buckets the communication
// thread had finished by then. It sits after the first Linear, so the buckets
// of the later layers have been handed over and the first layer's has not.
class Probe final : public Module {
 public:
  explicit Probe(const DistributedDataParallel** ddp, std::size_t* seen) : ddp_(ddp), seen_(seen) {}
  Tensor forward(const Tensor& x) override { return x; }
  Tensor backward(const Tensor& g) override {
    const GradientSynchronizer& sync = (*ddp_)->synchronizer();
    if ((*ddp_)->options().strategy == GradSyncStrategy::Overlapped) {
      eventually([&] { return sync.buckets_reduced() >= 1; });
    }
    *seen_ = sync.buckets_reduced();
    return g;
  }

 private:
  const DistributedDataParallel** ddp_;
  std::size_t* seen_;
};

TEST_CASE("Overlapped reduces buckets while backward is still running", "[ddp][overlap]") {
  const auto strategy = GENERATE(GradSyncStrategy::Synchronous, GradSyncStrategy::Overlapped);
  const int n = 2;
  PerRank<std::size_t> seen_in_backward(n), after_sync(n), buckets(n);
  run_ranks(n, [&](std::shared_ptr<Backend> backend, int r) {
    const DistributedDataParallel* self = nullptr;
    std::size_t seen = 0;
    Sequential mlp;
    mlp.add(Linear(kIn, kHidden, 1)).add(Probe(&self, &seen)).add(ReLU()).add(Linear(kHidden, kClasses, 2));
    DdpOptions options;
    options.strategy = strategy;
    options.bucket_cap_mb = options.first_bucket_cap_mb = 0.0001;  // 26 floats: a bucket per tensor or so
    DistributedDataParallel ddp(std::move(mlp), ProcessGroup(backend), options);
    self = &ddp;
    const Batch b = make_batch(4, static_cast<unsigned>(r));
    SoftmaxCrossEntropy loss;
    loss.forward(ddp.forward(b.x), b.y);
    ddp.backward(loss.backward());
    seen_in_backward[r] = seen;
    buckets[r] = ddp.synchronizer().bucket_count();
    ddp.sync_gradients();
    after_sync[r] = ddp.synchronizer().buckets_reduced();  // cleared for the next round
  });
  for (int r = 0; r < n; ++r) {
    CHECK(buckets[r] >= 3);
    if (strategy == GradSyncStrategy::Overlapped) {
      CHECK(seen_in_backward[r] >= 1);
    } else {
      CHECK(seen_in_backward[r] == 0);
    }
    CHECK(after_sync[r] == 0);
  }
}

TEST_CASE("a second backward pass before sync_gradients is refused in DDP's words, naming the parameter and "
          "no_sync",
          "[ddp][errors]") {
  const auto strategy = GENERATE(GradSyncStrategy::Synchronous, GradSyncStrategy::Overlapped);
  run_ranks(1, [&](std::shared_ptr<Backend> backend, int) {
    DdpOptions options;
    options.strategy = strategy;
    DistributedDataParallel ddp(make_mlp(3), ProcessGroup(backend), options);
    const Batch b = make_batch(4, 1);
    SoftmaxCrossEntropy loss;
    loss.forward(ddp.forward(b.x), b.y);
    ddp.backward(loss.backward());
    loss.forward(ddp.forward(b.x), b.y);
    const std::string error = error_of([&] { ddp.backward(loss.backward()); });
    RANK_REQUIRE_THAT(error, Catch::Contains("DistributedDataParallel on rank 0: parameter 5 (\"4.bias\") got a "
                                             "second gradient before sync_gradients()") &&
                                 Catch::Contains("ddp.no_sync()") && !Catch::Contains("sync_all"));
  });
}

TEST_CASE("a collective on the group while Overlapped buckets reduce throws on every rank, and the step "
          "completes",
          "[ddp][overlap][errors]") {
  const int n = 2;
  PerRank<std::string> during(n);
  PerRank<std::vector<float>> after(n), grads(n), expected_grads(n);
  run_ranks(n, [&](std::shared_ptr<Backend> backend, int r) {
    ProcessGroup world(backend);
    for (const auto strategy : {GradSyncStrategy::Overlapped, GradSyncStrategy::Synchronous}) {
      DdpOptions options;
      options.strategy = strategy;
      options.bucket_cap_mb = options.first_bucket_cap_mb = 0.0001;  // many buckets
      DistributedDataParallel ddp(make_mlp(7), world, options);
      const Batch b = make_batch(4, static_cast<unsigned>(r));
      SoftmaxCrossEntropy loss;
      loss.forward(ddp.forward(b.x), b.y);
      ddp.backward(loss.backward());
      // A loss all-reduce of a bucket's size: before this check it could
      // slip in between two buckets and swap data with one (wrong results).
      std::vector<float> logged(26, static_cast<float>(r + 1));
      if (strategy == GradSyncStrategy::Overlapped) {
        during[r] = error_of([&] { backend->all_reduce(logged, ReduceOp::Sum); });
      }
      ddp.sync_gradients();
      backend->all_reduce(logged, ReduceOp::Sum);  // after the sync: allowed, and right
      if (strategy == GradSyncStrategy::Overlapped) {
        after[r] = logged;
        grads[r] = flatten_grads(ddp.module_mut());
      } else {
        expected_grads[r] = flatten_grads(ddp.module_mut());
      }
    }
  });
  for (int r = 0; r < n; ++r) {
    CHECK_THAT(during[r], Catch::Contains("all_reduce on rank " + std::to_string(r) + " of 2") &&
                              Catch::Contains("holds this group's collectives") &&
                              Catch::Contains("sync_gradients()"));
    CHECK(after[r] == std::vector<float>(26, 3.0f));
    CHECK(grads[r] == expected_grads[r]);
  }
}

// Every rank destroyed its Overlapped DDP between backward() and
// sync_gradients(), e.g. leaving main after a NaN loss: each dropped the
// buckets its thread had not started yet, a number that differed between
// ranks, so one rank's last bucket all-reduce met a peer's next collective
// or a peer that had exited (a review: 4 of 10 jobs at n=3 failed so).
TEST_CASE("Overlapped DDP destroyed mid-step on every rank alike finishes the step's buckets, and the group's "
          "next collective is in step",
          "[ddp][overlap]") {
  const int n = 3;
  PerRank<std::vector<float>> sums(n);
  run_ranks(n, [&](std::shared_ptr<Backend> backend, int r) {
    ProcessGroup world(backend);
    for (int round = 0; round < 30; ++round) {
      {
        DdpOptions options;
        options.strategy = GradSyncStrategy::Overlapped;
        options.bucket_cap_mb = options.first_bucket_cap_mb = 0.0001;  // a bucket per tensor or so
        DistributedDataParallel ddp(make_mlp(7), world, options);
        const Batch b = make_batch(4, static_cast<unsigned>(r));
        SoftmaxCrossEntropy loss;
        loss.forward(ddp.forward(b.x), b.y);
        ddp.backward(loss.backward());
        if ((round + r) % 3 == 0) std::this_thread::yield();  // vary which rank's thread is ahead
      }  // destroyed mid-step
      std::vector<float> value(5, static_cast<float>(r + 1));
      backend->all_reduce(value, ReduceOp::Sum);  // throws (and fails the test) if out of step
      sums[r] = value;
    }
  });
  for (int r = 0; r < n; ++r) CHECK(sums[r] == std::vector<float>(5, 6.0f));
}

TEST_CASE("a failure on the communication thread is rethrown by sync_gradients", "[ddp][errors]") {
  const int n = 2;
  std::string what;
  run_ranks(n, [&](std::shared_ptr<Backend> backend, int r) {
    DdpOptions options;
    options.strategy = GradSyncStrategy::Overlapped;
    DistributedDataParallel ddp(Linear(kIn, kClasses, 1), ProcessGroup(backend), options);
    if (r == 1) {
      backend->abort("rank 1 gave up");
      return;
    }
    const Batch b = make_batch(4, 0);
    SoftmaxCrossEntropy loss;
    loss.forward(ddp.forward(b.x), b.y);
    ddp.backward(loss.backward());
    try {
      ddp.sync_gradients();
    } catch (const PeerFailure& e) {
      what = e.what();
    }
  });
  CHECK_THAT(what, Catch::Contains("rank 1 gave up"));
}

TEST_CASE("GradientSynchronizer packs buckets in reverse index order with a small first bucket", "[grad_sync]") {
  GradientSynchronizer sync(GradSyncStrategy::Synchronous, 10, 4);
  sync.prepare(std::vector<Shape>{{3}, {5}, {2}, {2}, {12}});
  REQUIRE(sync.bucket_count() == 3);
  CHECK(sync.bucket_indices(0) == std::vector<std::size_t>{4});        // larger than the first cap: alone
  CHECK(sync.bucket_indices(1) == std::vector<std::size_t>{3, 2, 1});  // 2+2+5 = 9 <= 10
  CHECK(sync.bucket_indices(2) == std::vector<std::size_t>{0});
  Tensor view = sync.slot(1);
  view[0] = 7.0f;
  CHECK(sync.slot(1)[0] == 7.0f);
}

TEST_CASE("GradientSynchronizer averages over the group for every strategy and layout", "[grad_sync]") {
  const auto strategy = GENERATE(GradSyncStrategy::Synchronous, GradSyncStrategy::Overlapped, GradSyncStrategy::NoSync);
  const bool fixed = GENERATE(false, true);
  const int n = 3;
  const std::vector<Shape> shapes{{3}, {5}, {2, 2}, {1}, {7}};
  PerRank<std::vector<std::vector<float>>> results(n);
  run_ranks(n, [&](std::shared_ptr<Backend> backend, int r) {
    ProcessGroup pg(backend);
    GradientSynchronizer sync(strategy, 6, 4);
    if (fixed) sync.prepare(shapes); else sync.prepare(shapes.size());
    sync.set_group(pg);
    for (int round = 0; round < 2; ++round) {
      std::vector<Tensor> grads;
      for (const Shape& s : shapes) grads.push_back(Tensor::full(s, static_cast<float>(r + round)));
      for (std::size_t i = grads.size(); i-- > 0;) sync.add_gradient(i, grads[i]);
      sync.sync_all(pg);
      if (round == 1) for (auto& g : grads) results[r].push_back(g.to_vec());
      sync.clear();
    }
  });
  for (int r = 0; r < n; ++r) {
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      // Round 1: ranks hold 1, 2, 3; the mean is 2.
      const float expected = strategy == GradSyncStrategy::NoSync ? static_cast<float>(r + 1) : 2.0f;
      CHECK(results[r][i] == std::vector<float>(numel_of(shapes[i]), expected));
    }
  }
}

TEST_CASE("GradientSynchronizer Overlapped refuses another group of the same members, saying so", "[grad_sync][errors]") {
  run_ranks(2, [&](std::shared_ptr<Backend> backend, int r) {
    ProcessGroup world(backend);
    ProcessGroup same = world.new_group({0, 1});
    GradientSynchronizer sync(GradSyncStrategy::Overlapped, 16);
    sync.prepare(1);
    sync.set_group(world);
    const std::string error = axon_test::error_of([&] { sync.sync_all(same); });
    RANK_REQUIRE_THAT(error, Catch::Contains("sync_all on rank " + std::to_string(r)) &&
                                 Catch::Contains("another group of the same members"));
  });
}

TEST_CASE("GradientSynchronizer Overlapped needs the group before gradients arrive", "[grad_sync][errors]") {
  GradientSynchronizer sync(GradSyncStrategy::Overlapped, 16);
  sync.prepare(2);
  CHECK_THROWS_WITH(sync.add_gradient(1, Tensor::zeros({2})), Catch::Contains("set_group"));
  GradientSynchronizer plain(GradSyncStrategy::Synchronous, 16);
  plain.prepare(1);
  plain.add_gradient(0, Tensor::zeros({2}));
  CHECK_THROWS_WITH(plain.add_gradient(0, Tensor::zeros({2})), Catch::Contains("already added"));
}

TEST_CASE("GradientSynchronizer prepare of more parameters than can exist is an InvalidArgument naming the count",
          "[grad_sync][errors]") {
  GradientSynchronizer sync(GradSyncStrategy::Synchronous, 16);
  const std::size_t too_many = std::numeric_limits<std::size_t>::max();
  CHECK_THROWS_AS(sync.prepare(too_many), InvalidArgument);
  CHECK_THROWS_WITH(sync.prepare(too_many), Catch::Contains(std::to_string(too_many) + " parameters"));
  sync.prepare(1);  // still usable
  sync.add_gradient(0, Tensor::zeros({2}));
}

// Rank 1 added gradients of sizes 3 and 2, the others 2 and 3: the buckets
// were of equal length, and every rank averaged one gradient's values into
// another's with no error (found by a review).
TEST_CASE("GradientSynchronizer gradients whose sizes differ between ranks are a mismatch on every rank, not a "
          "silent average of other gradients",
          "[grad_sync][errors]") {
  const auto strategy = GENERATE(GradSyncStrategy::Synchronous, GradSyncStrategy::Overlapped);
  const bool fixed = GENERATE(false, true);
  run_ranks(3, [&](std::shared_ptr<Backend> backend, int r) {
    ProcessGroup pg(backend);
    const std::vector<Shape> shapes = r == 1 ? std::vector<Shape>{{3}, {2}} : std::vector<Shape>{{2}, {3}};
    GradientSynchronizer sync(strategy, 16);
    sync.set_group(pg);
    if (fixed) sync.prepare(shapes); else sync.prepare(shapes.size());
    std::vector<Tensor> grads{Tensor::full(shapes[0], 1.0f), Tensor::full(shapes[1], 100.0f)};
    const std::string error = error_of([&] {
      for (std::size_t i = grads.size(); i-- > 0;) sync.add_gradient(i, grads[i]);
      sync.sync_all(pg);
    });
    RANK_REQUIRE_THAT(error, Catch::Contains("GradientSynchronizer on rank " + std::to_string(r)) &&
                                 Catch::Contains("laid out a bucket differently") &&
                                 Catch::Contains(r == 1 ? "gradient 1 of 2, gradient 0 of 3" : "gradient 1 of 3, gradient 0 of 2"));
    RANK_REQUIRE(grads[0].to_vec() == std::vector<float>(numel_of(shapes[0]), 1.0f));  // untouched
  });
}

// The layout agreed in round 0 and changed on rank 1 in round 1 (gradient 2
// in place of 3, the same float count): rank 1 compares again while rank 0
// reduces data, and the runtime's mismatch named only an all_reduce of i64
// nobody called (a review).
TEST_CASE("GradientSynchronizer a layout that changes on one rank after the ranks agreed is a mismatch naming the "
          "layout on every rank",
          "[grad_sync][errors]") {
  run_ranks(2, [&](std::shared_ptr<Backend> backend, int r) {
    ProcessGroup pg(backend);
    GradientSynchronizer sync(GradSyncStrategy::Synchronous, 16);
    sync.set_group(pg);
    sync.prepare(4);
    std::string error;
    for (int round = 0; round < 2 && error.empty(); ++round) {
      error = error_of([&] {
        sync.add_gradient(0, Tensor::full({2}, 1.0f));
        sync.add_gradient(1, Tensor::full({5}, 2.0f));
        sync.add_gradient(round == 1 && r == 1 ? 2 : 3, Tensor::full({1}, 3.0f));
        sync.sync_all(pg);
      });
      sync.clear();
      if (round == 0) RANK_REQUIRE(error.empty());
    }
    RANK_REQUIRE_THAT(error, Catch::Contains("GradientSynchronizer on rank " + std::to_string(r)) &&
                                 Catch::Contains("laid out a bucket differently in this round") &&
                                 Catch::Contains("all_reduce(i64, 2, min) is the layout check"));
  });
}

// The layout message is for the check meeting this bucket's data only: a
// peer in another call altogether was also called a changed layout (a
// review of the change).
TEST_CASE("GradientSynchronizer a peer in another collective is a mismatch, not called a layout change",
          "[grad_sync][errors]") {
  run_ranks(2, [&](std::shared_ptr<Backend> backend, int r) {
    ProcessGroup pg(backend);
    GradientSynchronizer sync(GradSyncStrategy::Synchronous, 16);
    sync.set_group(pg);
    sync.prepare(1);
    const std::string error = error_of([&] {
      if (r == 0) {
        sync.add_gradient(0, Tensor::full({4}, 1.0f));
        sync.sync_all(pg);
      } else {
        std::vector<float> other(7, 1.0f);
        pg.backend().broadcast(std::span<float>(other), 0);
      }
    });
    RANK_REQUIRE_THAT(error, Catch::Contains("collective mismatch") && Catch::Contains("broadcast(f32, 7") &&
                                 !Catch::Contains("laid out a bucket differently"));
  });
}

// An extra bucket on one rank (an unused gradient there) paired its layout
// check with the other rank's next round, and the ranks, a round apart,
// then averaged across rounds with no error (a review). Each position's
// check has a size of its own, so the runtime fails the group instead.
TEST_CASE("GradientSynchronizer with one more bucket on one rank never averages across rounds", "[grad_sync][errors]") {
  run_ranks(2, [&](std::shared_ptr<Backend> backend, int r) {
    ProcessGroup pg(backend);
    GradientSynchronizer sync(GradSyncStrategy::Synchronous, 8);
    sync.set_group(pg);
    sync.prepare(3);
    for (int round = 0; round < 3; ++round) {
      const float mine = static_cast<float>(10 * round + r);  // the mean of a round is 10 * round + 0.5
      try {
        sync.add_gradient(2, Tensor::full({4}, mine));
        sync.add_gradient(1, Tensor::full({4}, mine));
        if (r == 1) sync.add_gradient(0, Tensor::full({4}, 7.0f));
        sync.sync_all(pg);
        RANK_REQUIRE(sync.gradient(2)->to_vec() == std::vector<float>(4, static_cast<float>(10 * round) + 0.5f));
      } catch (const CollectiveMismatch&) {
        // Fine: failing is what the other rank's extra bucket must cause.
      }
      sync.clear();
    }
  });
}

// A learned layout is relearned every round; the ranks compare it only the
// first time (the check ran on every round, doubling the collectives; a
// review). The call number a deliberate mismatch reports counts them.
TEST_CASE("GradientSynchronizer compares a learned layout once, not every round", "[grad_sync]") {
  run_ranks(2, [&](std::shared_ptr<Backend> backend, int r) {
    ProcessGroup pg(backend);
    GradientSynchronizer sync(GradSyncStrategy::Synchronous, 4);
    sync.set_group(pg);
    sync.prepare(2);
    for (int round = 0; round < 3; ++round) {
      sync.add_gradient(1, Tensor::full({4}, 1.0f));
      sync.add_gradient(0, Tensor::full({4}, 1.0f));
      sync.sync_all(pg);
      sync.clear();
    }
    std::vector<float> probe(r == 0 ? 100 : 200);
    // 2 layout checks + 3 rounds x 2 buckets = 8 calls before this one.
    const std::string error = error_of([&] { pg.backend().all_reduce(probe, ReduceOp::Sum); });  // not under RANK_REQUIRE's lock
    RANK_REQUIRE_THAT(error, Catch::Contains("at call #8"));
  });
}
