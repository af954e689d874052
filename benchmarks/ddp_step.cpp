// ddp_step: the time of one DDP training step (forward, backward,
// sync_gradients, SGD step) of an MLP large enough that communication
// matters, on synthetic data.
//
//   build/release/benchmarks/ddp_step --batch 32 --threads 1             one process, no DDP
//   axon-launch -n 2 --arena-mb 128 build/release/benchmarks/ddp_step
//       --batch 32 --threads 1 --strategy overlapped --compress bf16   (one line)
//
// Scaling efficiency at n ranks = t(one process, same per-rank batch) / t(n).
// Run alone (world of one) the model trains without DDP: the baseline is pure
// compute. Rank 0 prints the median and minimum step time over --steps timed
// steps after --warmup untimed ones, the median time spent in
// sync_gradients() and in the rest of the step (forward, backward with the
// Overlapped launches, SGD), and samples/s over all ranks.
//
// Each rank limits oneTBB to --threads (default: ComputeThreads::fair_share(),
// i.e. AXON_THREADS_PER_RANK when set, else this process's cores / LOCAL_WORLD_SIZE);
// to compare like with like, give the baseline the same --threads as a rank.
// With buckets in shared memory (zero copy) the arena must hold every rank's
// buckets: pass axon-launch --arena-mb of at least ranks x the model's f32
// bytes (half with bf16) plus the default size (2 MiB per rank plus up to
// 8 MiB of mailboxes), or DDP falls back to private buckets.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "axonml/distributed.hpp"
#include "axonml/nn.hpp"

namespace dist = axonml::distributed;
namespace nn = axonml::nn;

namespace {

struct Config {
  std::string strategy = "sync";
  std::string compress = "none";
  double bucket_mb = 25.0;
  std::size_t batch = 32;  // per rank
  int steps = 20;
  int warmup = 3;
  std::vector<std::size_t> widths{1024, 2048, 2048, 10};
  std::size_t threads = 0;
};

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

nn::Sequential make_mlp(const std::vector<std::size_t>& widths) {
  nn::Sequential mlp;
  for (std::size_t i = 0; i + 1 < widths.size(); ++i) {
    mlp.add(nn::Linear(widths[i], widths[i + 1], 1 + i));
    if (i + 2 < widths.size()) mlp.add(nn::ReLU());
  }
  return mlp;
}

int run(const Config& cfg) {
  const dist::World world = dist::World::init();
  const int n = world.world_size();
  const bool use_ddp = n > 1;
  nn::Sequential plain = make_mlp(cfg.widths);
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  nn::Module* model = &plain;
  if (use_ddp) {
    dist::DdpOptions options;
    options.strategy = cfg.strategy == "overlapped" ? dist::GradSyncStrategy::Overlapped : dist::GradSyncStrategy::Synchronous;
    options.gradient_compression = cfg.compress == "bf16" ? dist::GradientCompression::BF16 : dist::GradientCompression::None;
    options.bucket_cap_mb = cfg.bucket_mb;
    options.first_bucket_cap_mb = std::min(cfg.bucket_mb, options.first_bucket_cap_mb);
    ddp = std::make_unique<dist::DistributedDataParallel>(std::move(plain), world.default_group(), options);
    ddp->sync_parameters();
    model = &ddp->module_mut();
  }
  std::size_t parameters = 0;
  for (const nn::Parameter* p : model->parameters()) parameters += p->numel();
  std::size_t shared_buckets = 0, buckets = 0;
  if (ddp) {
    buckets = ddp->synchronizer().bucket_count();
    for (std::size_t b = 0; b < buckets; ++b) shared_buckets += ddp->synchronizer().bucket_in_shared_memory(b) ? 1 : 0;
  }

  // Synthetic data, different on every rank, made once.
  std::mt19937 rng(static_cast<unsigned>(world.rank() + 1));
  std::normal_distribution<float> normal;
  std::vector<float> x(cfg.batch * cfg.widths.front());
  for (float& v : x) v = normal(rng);
  std::vector<int> y(cfg.batch);
  for (int& label : y) label = static_cast<int>(rng() % cfg.widths.back());
  const dist::Tensor input = dist::Tensor::from_vec(std::move(x), {cfg.batch, cfg.widths.front()});

  nn::SGD sgd(model->parameters(), {0.01f, 0.9f, 0.0f});
  nn::SoftmaxCrossEntropy loss;
  std::vector<double> step_ms, sync_ms, compute_ms;
  for (int step = 0; step < cfg.warmup + cfg.steps; ++step) {
    const auto start = Clock::now();
    sgd.zero_grad();
    loss.forward(ddp ? ddp->forward(input) : model->forward(input), y);
    if (ddp) ddp->backward(loss.backward()); else model->backward(loss.backward());
    const auto sync_start = Clock::now();
    if (ddp) ddp->sync_gradients();
    const double sync = ms_since(sync_start);
    sgd.step();
    const double total = ms_since(start);
    if (step >= cfg.warmup) {
      step_ms.push_back(total);
      sync_ms.push_back(sync);
      compute_ms.push_back(total - sync);
    }
  }

  if (world.rank() == 0) {
    std::ostringstream shape;
    for (std::size_t i = 0; i < cfg.widths.size(); ++i) shape << (i ? "-" : "") << cfg.widths[i];
    const double med = median(step_ms);
    std::printf("ddp_step: ranks %d  %s  mlp %s (%zu params)  batch %zu/rank  threads %zu  buckets %zu (%zu shared)\n",
                n, use_ddp ? (cfg.strategy + " " + cfg.compress).c_str() : "no DDP", shape.str().c_str(),
                parameters, cfg.batch, cfg.threads, buckets, shared_buckets);
    std::printf("step median %.2f ms  min %.2f ms  sync_gradients median %.2f ms  rest median %.2f ms  %.1f samples/s\n",
                med, *std::min_element(step_ms.begin(), step_ms.end()), median(sync_ms), median(compute_ms),
                static_cast<double>(cfg.batch) * n * 1000.0 / med);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  CLI::App app{"ddp_step: time DDP training steps of an MLP on synthetic data (run under axon-launch)"};
  app.add_option("--strategy", cfg.strategy, "Gradient sync strategy")->capture_default_str()->check(CLI::IsMember({"sync", "overlapped"}));
  app.add_option("--compress", cfg.compress, "Gradients travel as f32 (none) or bf16")->capture_default_str()->check(CLI::IsMember({"none", "bf16"}));
  app.add_option("--bucket-mb", cfg.bucket_mb, "DDP bucket capacity in MiB")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--batch", cfg.batch, "Samples per rank per step")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--steps", cfg.steps, "Timed steps")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--warmup", cfg.warmup, "Untimed steps first")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--widths", cfg.widths, "Layer widths, input first, classes last")->delimiter(',')->capture_default_str()
      ->expected(2, 64)->check(CLI::PositiveNumber);
  app.add_option("--threads", cfg.threads, "Compute threads per rank (0: AXON_THREADS_PER_RANK when set, else cores / LOCAL_WORLD_SIZE)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    if (cfg.threads == 0) cfg.threads = nn::ComputeThreads::fair_share();
    const nn::ComputeThreads threads(cfg.threads);
    return run(cfg);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp_step: %s\n", e.what());
    return 1;
  }
}
