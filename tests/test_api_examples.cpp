// The API examples of README.md ("The API in C++"), run on several ranks with their results asserted.
// (The DDP training example lives in test_ddp.cpp with the rest of DDP.)
#include <catch2/catch.hpp>

#include <sstream>

#include "axonml/distributed.hpp"
#include "axonml/nn.hpp"
#include "support/run_ranks.hpp"

using namespace axonml::distributed;
using axon_test::error_of;
using axon_test::run_ranks;

TEST_CASE("API example: communication primitives on a world of one", "[api]") {
  ProcessGroup pg = ProcessGroup::mock();

  Tensor tensor = Tensor::from_vec({1.0f, 2.0f, 3.0f}, {3});
  all_reduce_sum(tensor, pg);
  RANK_REQUIRE(tensor.to_vec() == std::vector<float>{1, 2, 3});
  all_reduce_mean(tensor, pg);
  RANK_REQUIRE(tensor.to_vec() == std::vector<float>{1, 2, 3});

  broadcast(tensor, pg);
  RANK_REQUIRE(tensor.to_vec() == std::vector<float>{1, 2, 3});

  Tensor gathered = all_gather(tensor, pg);
  RANK_REQUIRE(gathered.shape() == Shape{1, 3});
  RANK_REQUIRE(gathered.to_vec() == std::vector<float>{1, 2, 3});

  barrier(pg);

  RANK_REQUIRE(rank(pg) == 0);
  RANK_REQUIRE(world_size(pg) == 1);
  RANK_REQUIRE(is_main_process(pg));
}

TEST_CASE("API example: communication primitives on four ranks", "[api]") {
  run_ranks(4, [](std::shared_ptr<Backend> backend, int r) {
    ProcessGroup pg(backend);
    const float x = static_cast<float>(r + 1);
    Tensor tensor = Tensor::from_vec({x, 2 * x, 3 * x}, {3});
    all_reduce_sum(tensor, pg);
    RANK_REQUIRE(tensor.to_vec() == std::vector<float>{10, 20, 30});
    all_reduce_mean(tensor, pg);
    RANK_REQUIRE(tensor.to_vec() == std::vector<float>{10, 20, 30});

    Tensor mine = Tensor::full({2}, x);
    broadcast_from(mine, 2, pg);
    RANK_REQUIRE(mine.to_vec() == std::vector<float>{3, 3});

    Tensor gathered = all_gather(Tensor::full({1}, x), pg);
    RANK_REQUIRE(gathered.to_vec() == std::vector<float>{1, 2, 3, 4});

    Tensor lowest = Tensor::full({1}, x);
    all_reduce_min(lowest, pg);
    Tensor highest = Tensor::full({1}, x);
    all_reduce_max(highest, pg);
    Tensor product = Tensor::full({1}, x);
    all_reduce_product(product, pg);
    RANK_REQUIRE(lowest[0] == 1);
    RANK_REQUIRE(highest[0] == 4);
    RANK_REQUIRE(product[0] == 24);

    Tensor block = reduce_scatter_sum(Tensor::from_vec({1, 2, 3, 4, 5, 6, 7, 8}, {8}), pg);
    RANK_REQUIRE(block.to_vec() == std::vector<float>{4.0f * (2 * r + 1), 4.0f * (2 * r + 2)});
    Tensor mean_block = reduce_scatter_mean(Tensor::from_vec({1, 2, 3, 4, 5, 6, 7, 8}, {8}), pg);
    RANK_REQUIRE(mean_block.to_vec() == std::vector<float>{static_cast<float>(2 * r + 1), static_cast<float>(2 * r + 2)});

    barrier(pg);
    RANK_REQUIRE(rank(pg) == r);
    RANK_REQUIRE(world_size(pg) == 4);
    RANK_REQUIRE(is_main_process(pg) == (r == 0));
  });
}

TEST_CASE("API example: gradient synchronization averages over ranks", "[api]") {
  run_ranks(2, [](std::shared_ptr<Backend> backend, int r) {
    ProcessGroup pg(backend);
    const float scale = r == 0 ? 1.0f : 3.0f;
    std::vector<Tensor> gradients{
        Tensor::from_vec({0.1f * scale, 0.2f * scale}, {2}),
        Tensor::from_vec({0.3f * scale, 0.4f * scale, 0.5f * scale}, {3}),
    };
    sync_gradients(gradients, pg);
    RANK_REQUIRE(gradients[0].to_vec() == std::vector<float>{(0.1f + 0.1f * 3) * 0.5f, (0.2f + 0.2f * 3) * 0.5f});
    RANK_REQUIRE(gradients[1][2] == (0.5f + 0.5f * 3) * 0.5f);

    Tensor grad = Tensor::from_vec({1.0f * scale, 2.0f * scale}, {2});
    sync_gradient(grad, pg);
    RANK_REQUIRE(grad.to_vec() == std::vector<float>{2.0f, 4.0f});
  });
}

TEST_CASE("API example: gradient bucketing packs, reduces and extracts", "[api][bucket]") {
  GradientBucket bucket(1000);
  Tensor grad1 = Tensor::from_vec({0.1f, 0.2f}, {2});
  Tensor grad2 = Tensor::from_vec({0.3f, 0.4f, 0.5f}, {3});
  RANK_REQUIRE(bucket.add(grad1));
  RANK_REQUIRE(bucket.add(grad2));
  RANK_REQUIRE(bucket.size() == 5);

  ProcessGroup pg = ProcessGroup::mock();
  pg.backend().all_reduce(bucket.data_mut(), ReduceOp::Average);

  std::vector<Tensor> synced = bucket.extract();
  RANK_REQUIRE(synced.size() == 2);
  RANK_REQUIRE(synced[0].shape() == Shape{2});
  RANK_REQUIRE(synced[1].to_vec() == std::vector<float>{0.3f, 0.4f, 0.5f});
}

TEST_CASE("gradient bucket refuses what does not fit and reports fullness", "[bucket]") {
  GradientBucket bucket(5);
  RANK_REQUIRE(bucket.is_empty());
  RANK_REQUIRE(bucket.add(Tensor::zeros({2, 2})));
  REQUIRE_FALSE(bucket.add(Tensor::zeros({2})));
  RANK_REQUIRE(bucket.size() == 4);
  RANK_REQUIRE(bucket.add(Tensor::full({1}, 9)));
  RANK_REQUIRE(bucket.is_full());
  RANK_REQUIRE(bucket.extract()[0].shape() == Shape{2, 2});
  RANK_REQUIRE(bucket.data()[4] == 9);
  bucket.clear();
  RANK_REQUIRE(bucket.is_empty());
  RANK_REQUIRE(bucket.extract().empty());
}

TEST_CASE("API example: a custom synchronization strategy averages into the added tensors", "[api]") {
  run_ranks(3, [](std::shared_ptr<Backend> backend, int r) {
    ProcessGroup pg(backend);
    GradientSynchronizer sync(GradSyncStrategy::Synchronous, 25'000'000);
    RANK_REQUIRE(sync.strategy() == GradSyncStrategy::Synchronous);
    sync.prepare(10);
    Tensor grad = Tensor::from_vec({1.0f + static_cast<float>(r), 2.0f}, {2});
    sync.add_gradient(0, grad);
    sync.sync_all(pg);
    RANK_REQUIRE(grad.to_vec() == std::vector<float>{2.0f, 2.0f});
    RANK_REQUIRE(sync.gradient(0)->to_vec() == std::vector<float>{2.0f, 2.0f});
    sync.clear();
    RANK_REQUIRE(!sync.gradient(0).has_value());
  });
}

TEST_CASE("API example: multi-backend setup gives each process its rank", "[api]") {
  auto backends = MockBackend::create_world(4);
  std::ostringstream out;
  for (auto& backend : backends) {
    ProcessGroup pg(backend);
    out << "Rank " << pg.rank() << " of " << pg.world_size() << "\n";
  }
  RANK_REQUIRE(out.str() == "Rank 0 of 4\nRank 1 of 4\nRank 2 of 4\nRank 3 of 4\n");
}

// In a world of one rank 1 does not exist and new_group rejects it, so the
// example runs on two ranks.
TEST_CASE("API example: process subgroups", "[api][groups]") {
  run_ranks(2, [](std::shared_ptr<Backend> backend, int) {
    World world(backend);
    ProcessGroup subgroup = world.new_group({0, 1});
    RANK_REQUIRE(subgroup.contains(0));
    RANK_REQUIRE(subgroup.size() == 2);
  });
}

TEST_CASE("scatter_tensor and gather_tensor split and rejoin along any dim", "[api][model-parallel]") {
  const std::size_t dim = GENERATE(std::size_t{0}, 1, 2);
  run_ranks(2, [&](std::shared_ptr<Backend> backend, int r) {
    ProcessGroup pg(backend);
    std::vector<float> values(4 * 4 * 2);
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = r == 0 ? static_cast<float>(i) : -1.0f;
    Tensor full = Tensor::from_vec(values, {4, 4, 2});
    Tensor part = scatter_tensor(full, dim, pg);
    Shape expected_shape{4, 4, 2};
    expected_shape[dim] /= 2;
    RANK_REQUIRE(part.shape() == expected_shape);
    Tensor reference = Tensor::from_vec(std::vector<float>(values.size()), {4, 4, 2});
    for (std::size_t i = 0; i < values.size(); ++i) reference[i] = static_cast<float>(i);
    RANK_REQUIRE(part.to_vec() == reference.narrow(dim, static_cast<std::size_t>(r) * expected_shape[dim], expected_shape[dim]).to_vec());
    Tensor rejoined = gather_tensor(part, dim, pg);
    RANK_REQUIRE(rejoined.to_vec() == reference.to_vec());
  });
}

TEST_CASE("scatter_tensor, gather_tensor and sync_gradients on a non-member name the op", "[errors][model-parallel]") {
  run_ranks(3, [&](std::shared_ptr<Backend> backend, int r) {
    ProcessGroup pair = ProcessGroup::with_ranks(backend, {2, 0});
    if (r != 1) return;
    std::vector<Tensor> grads{Tensor::zeros({2})};
    RANK_REQUIRE(error_of([&] { scatter_tensor(Tensor::zeros({2}), 0, pair); }) ==
                 "scatter_tensor: rank 1 is not a member of group [2, 0]");
    RANK_REQUIRE(error_of([&] { gather_tensor(Tensor::zeros({2}), 0, pair); }) ==
                 "gather_tensor: rank 1 is not a member of group [2, 0]");
    RANK_REQUIRE(error_of([&] { sync_gradients(grads, pair); }) == "sync_gradients: rank 1 is not a member of group [2, 0]");
  });
}

TEST_CASE("scatter_tensor of an uneven split names the sizes", "[errors][model-parallel]") {
  run_ranks(3, [&](std::shared_ptr<Backend> backend, int) {
    ProcessGroup pg(backend);
    const std::string error = error_of([&] { scatter_tensor(Tensor::zeros({4, 5}), 1, pg); });
    RANK_REQUIRE_THAT(error, Catch::Matchers::Contains("dim 1 of shape [4, 5] (size 5) does not split evenly into 3 ranks"));
  });
}

TEST_CASE("ranks that pass scatter_tensor, gather_tensor or sync_gradients other shapes of the same size get a mismatch",
          "[errors][model-parallel]") {
  // The data collective compares element counts only: these used to give
  // the ranks results of different shapes, or rank 0's data cut the wrong way.
  using Catch::Matchers::Contains;
  run_ranks(2, [&](std::shared_ptr<Backend> backend, int r) {
    ProcessGroup pg(backend);
    const std::string head = "on rank " + std::to_string(r) + ": the ranks' arguments differ: ";
    std::string error = error_of([&] { gather_tensor(r == 0 ? Tensor::zeros({4}) : Tensor::zeros({2, 2}), 0, pg); });
    RANK_REQUIRE_THAT(error, Contains("gather_tensor " + head +
                                      "rank 0 passes shape [4] along dim 0, rank 1 passes shape [2, 2] along dim 0"));
    error = error_of([&] { scatter_tensor(r == 0 ? Tensor::zeros({4, 2}) : Tensor::zeros({2, 4}), 0, pg); });
    RANK_REQUIRE_THAT(error, Contains("scatter_tensor " + head + "rank 0 passes shape [4, 2] along dim 0, rank 1 "
                                      "passes shape [2, 4] along dim 0"));
    error = error_of([&] { scatter_tensor(Tensor::zeros({4, 4}), static_cast<std::size_t>(r), pg); });
    RANK_REQUIRE_THAT(error, Contains("rank 0 passes shape [4, 4] along dim 0, rank 1 passes shape [4, 4] along dim 1"));
    // One rank's dim splits evenly, the other's does not: the comparison comes
    // first, so both get the mismatch (rank 1 used to throw alone, and the
    // ranks' calls fell out of step for good; found by a review). Likewise a
    // dim out of range on one rank only.
    error = error_of([&] { scatter_tensor(r == 0 ? Tensor::zeros({4, 2}) : Tensor::zeros({3, 2}), 0, pg); });
    RANK_REQUIRE_THAT(error, Contains("scatter_tensor " + head + "rank 0 passes shape [4, 2] along dim 0, rank 1 "
                                      "passes shape [3, 2] along dim 0"));
    error = error_of([&] { gather_tensor(Tensor::zeros({4, 2}), r == 0 ? 1 : 2, pg); });
    RANK_REQUIRE_THAT(error, Contains("gather_tensor " + head + "rank 0 passes shape [4, 2] along dim 1, rank 1 "
                                      "passes shape [4, 2] along dim 2"));
    // Agreed but uneven: the same InvalidArgument on every rank.
    error = error_of([&] { scatter_tensor(Tensor::zeros({3, 2}), 0, pg); });
    RANK_REQUIRE_THAT(error, Contains("scatter_tensor on rank " + std::to_string(r) +
                                      ": dim 0 of shape [3, 2] (size 3) does not split evenly into 2 ranks"));
    std::vector<Tensor> grads = r == 0 ? std::vector<Tensor>{Tensor::full({2}, 1.0f), Tensor::full({3}, 2.0f)}
                                       : std::vector<Tensor>{Tensor::full({3}, 10.0f), Tensor::full({2}, 20.0f)};
    error = error_of([&] { sync_gradients(grads, pg); });
    RANK_REQUIRE_THAT(error, Contains("sync_gradients " + head + "tensor 0 has shape [2] on rank 0 but [3] on rank 1 "
                                      "(tensor counts: rank 0 has 2, rank 1 has 2); every rank must pass the same "
                                      "shapes, in the same order") &&
                                 Contains(r == 0 ? "(this rank's: [2], [3])" : "(this rank's: [3], [2])"));
    RANK_REQUIRE(grads[0].data()[0] == (r == 0 ? 1.0f : 10.0f));  // untouched
    // Agreeing ranks still work, and the group is not broken by the above.
    Tensor whole = Tensor::full({4, 2}, static_cast<float>(r));
    const Tensor rejoined = gather_tensor(scatter_tensor(whole, 0, pg), 0, pg);  // not inside RANK_REQUIRE
    RANK_REQUIRE(rejoined.shape() == Shape({4, 2}));
  });
}

TEST_CASE("API example: basic DDP training keeps replicas identical and learns", "[api][ddp]") {
  std::vector<std::vector<float>> weights(2);
  std::vector<float> first_loss(2), last_loss(2);
  run_ranks(2, [&](std::shared_ptr<Backend> backend, int r) {
    World world(backend);
    // Different initial weights per rank: sync_parameters must make rank 0's the start.
    DistributedDataParallel ddp(nn::Linear(10, 5, /*seed=*/static_cast<std::uint64_t>(7 + r)),
                                world.default_group());
    ddp.sync_parameters();
    nn::SGD sgd(ddp.module_mut().parameters(), {.lr = 0.05f, .momentum = 0.0f, .weight_decay = 0.0f});
    nn::MSELoss loss;
    ddp.train();
    for (int step = 0; step < 30; ++step) {
      // Each rank sees its own data: target = sum of the inputs in every output.
      std::vector<float> x(4 * 10), y(4 * 5);
      for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7 + static_cast<std::size_t>(step * 3 + r)) % 11) / 11.0f;
      for (std::size_t b = 0; b < 4; ++b) {
        float sum = 0;
        for (std::size_t j = 0; j < 10; ++j) sum += x[b * 10 + j];
        for (std::size_t o = 0; o < 5; ++o) y[b * 5 + o] = sum / 10.0f;
      }
      sgd.zero_grad();
      const float value = loss.forward(ddp.forward(Tensor::from_vec(x, {4, 10})), Tensor::from_vec(y, {4, 5}));
      if (step == 0) first_loss[static_cast<std::size_t>(r)] = value;
      last_loss[static_cast<std::size_t>(r)] = value;
      ddp.backward(loss.backward());
      ddp.sync_gradients();
      sgd.step();
    }
    for (auto* p : ddp.module_mut().parameters()) {
      auto v = p->value().data();
      weights[static_cast<std::size_t>(r)].insert(weights[static_cast<std::size_t>(r)].end(), v.begin(), v.end());
    }
  });
  REQUIRE(weights[0] == weights[1]);  // replicas never drift
  REQUIRE(last_loss[0] < first_loss[0]);
  REQUIRE(last_loss[1] < first_loss[1]);
}
