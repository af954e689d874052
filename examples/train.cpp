// train: a data-parallel MLP classifier on a deterministic synthetic set.
//
//   ./train --epochs 3                      one process
//   axon-launch -n 4 ./train --epochs 3     four ranks, same result
//
// The data: `classes` Gaussian clusters in `features` dimensions, generated
// from --seed, so every rank builds the same set without any I/O. Each epoch
// walks the samples in a seeded permutation, one global batch at a time; rank
// r takes the r-th of world-size equal slices of every global batch (as
// PyTorch's DistributedSampler), computes the mean loss over its slice, and
// DDP averages gradients, which gives the gradient of the global batch mean.
// Hence the final parameters equal a one-process run's up to float rounding
// (with --compress bf16 the gradients travel as bf16, so only closely).
//
// With --checkpoint PATH rank 0 saves the parameters, the momentum buffers and
// the number of finished epochs after every epoch (to a new file PATH.XXXXXX, then renamed
// over PATH, so a kill never leaves half a checkpoint), and every rank resumes
// from PATH when it exists: under `axon-launch --max-restarts K` a job whose
// rank died ends with the parameters of an undisturbed run. --die-in-epoch E
// makes rank --die-rank kill itself halfway through epoch E on the first
// attempt, to try that (a kill from outside lands wherever the scheduler lets
// it: a test's watcher, starved on a loaded machine, missed epoch 2).
//
// The matrix products use oneTBB; each rank limits it to its share of the
// cores (--threads, default: AXON_THREADS_PER_RANK from axon-launch, else
// cores / LOCAL_WORLD_SIZE), since n ranks each running a pool the size of
// the machine oversubscribe it n times over.
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>

#include "axonml/distributed.hpp"
#include "axonml/nn.hpp"

namespace dist = axonml::distributed;
namespace nn = axonml::nn;

namespace {

struct Config {
  int epochs = 3;
  std::size_t samples = 65536;
  std::size_t global_batch = 256;
  float lr = 0.05f;
  float momentum = 0.9f;
  std::size_t hidden = 128;
  std::uint64_t seed = 1;
  std::string sync = "sync";
  double bucket_mb = 25.0;
  std::string compress = "none";
  std::size_t threads = 0;  // 0: this rank's fair share of the cores
  std::string checksum_file;
  std::string checkpoint;
  int die_in_epoch = 0;  // 0: never
  int die_rank = 1;
};

constexpr std::size_t kFeatures = 64;
constexpr std::size_t kClasses = 10;
constexpr float kNoise = 2.0f;

// Uniform in (0, 1] and standard normal (Box-Muller), from mt19937_64's bits,
// so that the data are the same with every standard library.
float unit(std::mt19937_64& rng) { return (static_cast<float>(rng() >> 40) + 1.0f) * (1.0f / 16777216.0f); }
float normal(std::mt19937_64& rng) {
  const float u = unit(rng), v = unit(rng);
  return std::sqrt(-2.0f * std::log(u)) * std::cos(6.28318530718f * v);
}

struct Dataset {
  std::vector<float> x;  // samples x kFeatures
  std::vector<int> y;
};

Dataset make_dataset(std::size_t samples, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> centers(kClasses * kFeatures);
  for (float& c : centers) c = normal(rng);
  Dataset d{std::vector<float>(samples * kFeatures), std::vector<int>(samples)};
  for (std::size_t i = 0; i < samples; ++i) {
    const auto label = static_cast<std::size_t>(rng() % kClasses);
    d.y[i] = static_cast<int>(label);
    for (std::size_t f = 0; f < kFeatures; ++f) d.x[i * kFeatures + f] = centers[label * kFeatures + f] + kNoise * normal(rng);
  }
  return d;
}

// Whether this is axon-launch's first attempt (AXON_RESTART_COUNT unset or 0).
bool first_attempt() {
  const char* count = std::getenv("AXON_RESTART_COUNT");
  return count == nullptr || std::string(count) == "0";
}

std::vector<std::size_t> permutation(std::size_t n, std::uint64_t seed) {
  std::vector<std::size_t> p(n);
  for (std::size_t i = 0; i < n; ++i) p[i] = i;
  std::mt19937_64 rng(seed);
  for (std::size_t i = n; i > 1; --i) std::swap(p[i - 1], p[rng() % i]);
  return p;
}

// The checkpoint: "axon-train-checkpoint 1", the options that shape the run,
// the finished epochs, then each parameter and each momentum buffer as a
// count and raw floats (this machine's byte order; read back on the same one).
constexpr char kCheckpointMagic[] = "axon-train-checkpoint 1\n";

std::string run_signature(const Config& cfg) {
  return "samples " + std::to_string(cfg.samples) + " global-batch " + std::to_string(cfg.global_batch) +
         " hidden " + std::to_string(cfg.hidden) + " seed " + std::to_string(cfg.seed) + " lr " +
         std::to_string(cfg.lr) + " momentum " + std::to_string(cfg.momentum) + "\n";
}

void write_floats(std::ostream& out, const std::vector<float>& values) {
  const std::uint64_t n = values.size();
  out.write(reinterpret_cast<const char*>(&n), sizeof(n));
  out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(n * sizeof(float)));
}

// A count, then that many floats. They are read a million at a time, so
// that memory grows only with what the file really holds: a corrupt count
// made every rank allocate gigabytes before the read found the file short
// (a review). A pipe (a FIFO, for a world of one) reads the same way.
std::vector<float> read_floats(std::istream& in, const std::string& path) {
  std::uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), sizeof(n));
  if (!in) throw dist::InvalidArgument("--checkpoint " + path + " is truncated or corrupt");
  constexpr std::uint64_t kChunk = std::uint64_t{1} << 20;
  std::vector<float> values;
  while (values.size() < n) {
    const std::size_t have = values.size();
    const auto take = static_cast<std::size_t>(std::min(kChunk, n - have));
    values.resize(have + take);
    in.read(reinterpret_cast<char*>(values.data() + have), static_cast<std::streamsize>(take * sizeof(float)));
    if (!in) throw dist::InvalidArgument("--checkpoint " + path + " is truncated or corrupt");
  }
  return values;
}

// The mode for a checkpoint at `path`: that of the file there, else 0666
// less the umask. The umask is read from /proc (umask() would set it, for
// every thread, in between).
mode_t checkpoint_mode(const std::string& path) {
  struct stat existing {};
  if (::stat(path.c_str(), &existing) == 0) return existing.st_mode & 07777;
  mode_t mask = 022;
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("Umask:", 0) == 0) mask = static_cast<mode_t>(std::stoul(line.substr(6), nullptr, 8));
  }
  return 0666 & ~mask;
}

// A new file `tmp` beside the checkpoint, open for writing.
int create_beside_checkpoint(const Config& cfg, std::string& tmp) {
  tmp = cfg.checkpoint + ".XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) {
    throw dist::InvalidArgument("cannot create a temporary file beside --checkpoint " + cfg.checkpoint + ": " +
                                std::strerror(errno));
  }
  return fd;
}

// At the start: a checkpoint that cannot be saved fails the run now, not
// after its first epoch (found by a review).
void check_checkpoint_can_be_saved(const Config& cfg) {
  std::string tmp;
  ::close(create_beside_checkpoint(cfg, tmp));
  ::unlink(tmp.c_str());
}

// Rank 0 after each epoch: everything written to a new file beside PATH,
// synced, then renamed over PATH in one step. The new file gets a name no
// one can have made before (mkstemp: created here, never a file or link
// another user put there; found by a review: a fixed PATH.tmp could be a
// link to someone's file, which the write then replaced).
void save_checkpoint(const Config& cfg, int epochs_done, const std::vector<nn::Parameter*>& params,
                     const nn::SGD& sgd) {
  std::ostringstream out;
  out << kCheckpointMagic << run_signature(cfg) << "epochs " << epochs_done << "\n";
  const std::uint64_t count = params.size();
  out.write(reinterpret_cast<const char*>(&count), sizeof(count));
  for (const auto* p : params) {
    const auto data = p->value().data();
    write_floats(out, std::vector<float>(data.begin(), data.end()));
  }
  const std::uint64_t buffers = sgd.velocity().size();
  out.write(reinterpret_cast<const char*>(&buffers), sizeof(buffers));
  for (const auto& v : sgd.velocity()) write_floats(out, v);
  const std::string bytes = std::move(out).str();

  std::string tmp;
  int fd = create_beside_checkpoint(cfg, tmp);
  // Whatever fails, the temporary file goes, and the error gives the reason.
  const auto fail = [&](const std::string& what) {
    const std::string reason = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw dist::InvalidArgument(what + ": " + reason);
  };
  for (std::size_t done = 0; done < bytes.size();) {
    const ssize_t wrote = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote < 0) fail("cannot write the checkpoint " + tmp);
    done += static_cast<std::size_t>(wrote);
  }
  // mkstemp makes the file 0600; a checkpoint keeps the mode of the one it
  // replaces, and a first one gets what any new file of the user's gets
  // (0666 less the umask), as they did before.
  if (::fchmod(fd, checkpoint_mode(cfg.checkpoint)) != 0) fail("cannot set the mode of the checkpoint " + tmp);
  if (::fsync(fd) != 0) fail("cannot sync the checkpoint " + tmp);
  const int closing = fd;
  fd = -1;
  if (::close(closing) != 0) fail("cannot write the checkpoint " + tmp);
  if (std::rename(tmp.c_str(), cfg.checkpoint.c_str()) != 0) {
    fail("cannot rename " + tmp + " to --checkpoint " + cfg.checkpoint);
  }
}

// Every rank at the start: the finished epochs (0 without a checkpoint);
// parameters and momentum buffers are restored in place.
int load_checkpoint(const Config& cfg, const std::vector<nn::Parameter*>& params, nn::SGD& sgd) {
  if (std::filesystem::is_directory(cfg.checkpoint)) {
    throw dist::InvalidArgument("--checkpoint " + cfg.checkpoint + " is a directory: give the path of a file");
  }
  std::ifstream in(cfg.checkpoint, std::ios::binary);
  if (!in) return 0;
  std::string magic(sizeof(kCheckpointMagic) - 1, '\0');
  in.read(magic.data(), static_cast<std::streamsize>(magic.size()));
  if (magic != kCheckpointMagic) {
    throw dist::InvalidArgument("--checkpoint " + cfg.checkpoint +
                                " is not a checkpoint of this program (it does not begin with \"" +
                                std::string(kCheckpointMagic, sizeof(kCheckpointMagic) - 2) +
                                "\"): remove it or give another path");
  }
  std::string signature;
  std::getline(in, signature);
  if (signature + "\n" != run_signature(cfg)) {
    throw dist::InvalidArgument("--checkpoint " + cfg.checkpoint +
                                " is not a checkpoint of this run (it has \"" + signature.substr(0, 200) +
                                "\", this run is \"" + run_signature(cfg).substr(0, run_signature(cfg).size() - 1) +
                                "\"): remove it or pass the same options");
  }
  std::string word;
  int epochs_done = -1;
  in >> word >> epochs_done;
  in.ignore(1);
  std::uint64_t count = 0;
  in.read(reinterpret_cast<char*>(&count), sizeof(count));
  if (!in || word != "epochs" || epochs_done < 0 || count != params.size()) {
    throw dist::InvalidArgument("--checkpoint " + cfg.checkpoint + " is truncated or corrupt");
  }
  for (auto* p : params) {
    const auto values = read_floats(in, cfg.checkpoint);
    auto data = p->value().data();
    if (values.size() != data.size()) {
      throw dist::InvalidArgument("--checkpoint " + cfg.checkpoint + " has a parameter of " +
                                  std::to_string(values.size()) + " values where the model has " +
                                  std::to_string(data.size()));
    }
    std::copy(values.begin(), values.end(), data.begin());
  }
  std::uint64_t buffers = 0;
  in.read(reinterpret_cast<char*>(&buffers), sizeof(buffers));
  if (!in || buffers > params.size()) {
    throw dist::InvalidArgument("--checkpoint " + cfg.checkpoint + " is truncated or corrupt");
  }
  std::vector<std::vector<float>> velocity;
  for (std::uint64_t i = 0; i < buffers; ++i) velocity.push_back(read_floats(in, cfg.checkpoint));
  sgd.set_velocity(std::move(velocity));
  return epochs_done;
}

nn::Sequential make_model(std::size_t hidden, std::uint64_t seed) {
  nn::Sequential mlp;
  mlp.add(nn::Linear(kFeatures, hidden, seed)).add(nn::ReLU());
  mlp.add(nn::Linear(hidden, hidden, seed + 1)).add(nn::ReLU());
  mlp.add(nn::Linear(hidden, kClasses, seed + 2));
  return mlp;
}

// Redrawn in place with \r on a terminal; elsewhere nothing until the epoch line.
class ProgressBar {
 public:
  explicit ProgressBar(bool enabled) : enabled_(enabled) {}
  void show(int epoch, std::size_t done, std::size_t total) {
    if (!enabled_) return;
    const std::size_t width = 40, filled = total ? done * width / total : width;
    if (filled == last_ && done != total) return;
    last_ = filled;
    std::printf("\repoch %d [%s%s] %3zu%%", epoch, std::string(filled, '#').c_str(),
                std::string(width - filled, ' ').c_str(), total ? done * 100 / total : 100);
    std::fflush(stdout);
  }
  void clear() {
    if (enabled_) std::printf("\r%60s\r", "");
    last_ = SIZE_MAX;
  }

 private:
  bool enabled_;
  std::size_t last_ = SIZE_MAX;
};

int run(const Config& cfg, const dist::World& world) {
  const auto n = static_cast<std::size_t>(world.world_size());
  const auto rank = static_cast<std::size_t>(world.rank());
  // Messages leave out the "train: " prefix; main() adds it.
  if (cfg.die_in_epoch > 0 && static_cast<std::size_t>(cfg.die_rank) >= n) {
    throw dist::InvalidArgument("--die-rank " + std::to_string(cfg.die_rank) + " is not a rank of this world of " +
                                std::to_string(n) + " (0.." + std::to_string(n - 1) + ")");
  }
  if (cfg.global_batch > cfg.samples) {
    // The batch suggested must also split evenly over the ranks (the check
    // below), or following the advice only leads to the next error.
    const std::size_t largest = cfg.samples / n * n;
    throw dist::InvalidArgument("--global-batch " + std::to_string(cfg.global_batch) +
                                " is larger than the data set (--samples " + std::to_string(cfg.samples) + "): pass " +
                                (largest > 0 ? "--global-batch " + std::to_string(largest) + " or less" +
                                                   (n > 1 ? " (a multiple of " + std::to_string(n) + ")" : "") + ", or "
                                             : std::string()) +
                                "--samples " + std::to_string(cfg.global_batch) + " or more");
  }
  if (cfg.global_batch % n != 0) {
    // Equal shards are what make the averaged gradient the global batch's.
    const std::size_t below = cfg.global_batch / n * n, above = below + n;
    std::string suggestion = below > 0 ? std::to_string(below) : std::string();
    if (above <= cfg.samples) suggestion += (suggestion.empty() ? "" : " or ") + std::to_string(above);
    throw dist::InvalidArgument("--global-batch " + std::to_string(cfg.global_batch) +
                                " does not split evenly over " + std::to_string(n) +
                                " ranks: pass a multiple of " + std::to_string(n) +
                                (suggestion.empty() ? std::string() : ", e.g. --global-batch " + suggestion));
  }
  dist::DdpOptions options;
  options.strategy = cfg.sync == "overlapped" ? dist::GradSyncStrategy::Overlapped : dist::GradSyncStrategy::Synchronous;
  options.bucket_cap_mb = cfg.bucket_mb;
  options.gradient_compression = cfg.compress == "bf16" ? dist::GradientCompression::BF16 : dist::GradientCompression::None;
  dist::DistributedDataParallel ddp(make_model(cfg.hidden, cfg.seed), world.default_group(), options);
  nn::SGD sgd(ddp.module_mut().parameters(), {cfg.lr, cfg.momentum, 0.0f});
  // Every rank reads the same file; the broadcast below makes sure anyway.
  if (!cfg.checkpoint.empty() && rank == 0) check_checkpoint_can_be_saved(cfg);
  const int resumed = cfg.checkpoint.empty() ? 0 : load_checkpoint(cfg, ddp.module_mut().parameters(), sgd);
  ddp.sync_parameters();
  nn::SoftmaxCrossEntropy loss;

  const Dataset data = make_dataset(cfg.samples, cfg.seed);
  const std::size_t local = cfg.global_batch / n;
  const std::size_t steps = cfg.samples / cfg.global_batch;  // the last partial batch is dropped
  const bool main = rank == 0;
  // Only for a person watching a lone run: under axon-launch rank 0's stdout
  // is a pipe anyway, but mpirun hands ranks a terminal whose output ends up
  // in logs, where every \r redraw would be a line of noise.
  ProgressBar bar(main && n == 1 && world.backend().name() != "mpi" && isatty(STDOUT_FILENO));
  if (main) {
    std::printf("train: %zu %s, %zu samples, global batch %zu (%zu per rank), %s gradient sync, %s, "
                "%zu parameters\n", n, n == 1 ? "rank" : "ranks", cfg.samples, cfg.global_batch, local,
                cfg.sync == "overlapped" ? "overlapped" : "synchronous",
                cfg.compress == "bf16" ? "bf16 gradient compression" : "no gradient compression",
                [&] { std::size_t c = 0; for (auto* p : ddp.module_mut().parameters()) c += p->numel(); return c; }());
  }
  dist::Tensor x = dist::Tensor::zeros({local, kFeatures});
  std::vector<int> y(local);
  if (main && resumed > 0) {
    std::printf("train: resuming from %s after epoch %d\n", cfg.checkpoint.c_str(), resumed);
  }
  for (int epoch = resumed + 1; epoch <= cfg.epochs; ++epoch) {
    const auto start = std::chrono::steady_clock::now();
    const auto order = permutation(cfg.samples, cfg.seed * 1000003u + static_cast<std::uint64_t>(epoch));
    ddp.train();
    double loss_sum = 0.0, correct = 0.0;
    for (std::size_t step = 0; step < steps; ++step) {
      // This rank's slice of global batch `step`.
      for (std::size_t i = 0; i < local; ++i) {
        const std::size_t sample = order[step * cfg.global_batch + rank * local + i];
        std::copy_n(&data.x[sample * kFeatures], kFeatures, &x.data()[i * kFeatures]);
        y[i] = data.y[sample];
      }
      sgd.zero_grad();
      loss_sum += loss.forward(ddp.forward(x), y);
      correct += static_cast<double>(loss.correct());
      ddp.backward(loss.backward());
      ddp.sync_gradients();
      sgd.step();
      if (main) bar.show(epoch, step + 1, steps);
      // Halfway through the epoch, so that every rank is past the checkpoint
      // of the epoch before (rank 0 wrote it before this epoch's first step).
      if (epoch == cfg.die_in_epoch && static_cast<int>(rank) == cfg.die_rank && step == steps / 2 &&
          first_attempt()) {
        std::raise(SIGKILL);
      }
    }
    // Loss and accuracy over the whole epoch and every rank, in one all-reduce.
    std::vector<float> totals{static_cast<float>(loss_sum / static_cast<double>(steps)), static_cast<float>(correct)};
    world.backend().all_reduce(totals, dist::ReduceOp::Sum);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (main) {
      bar.clear();
      std::printf("epoch %d/%d  loss %.4f  accuracy %.2f%%  %.0f samples/s\n", epoch, cfg.epochs,
                  totals[0] / static_cast<float>(n),
                  100.0 * totals[1] / static_cast<double>(steps * cfg.global_batch),
                  static_cast<double>(steps * cfg.global_batch) / seconds);
      std::fflush(stdout);
      if (!cfg.checkpoint.empty()) save_checkpoint(cfg, epoch, ddp.module_mut().parameters(), sgd);
    }
  }

  if (main) {
    double sum = 0.0, abs_sum = 0.0;
    std::ofstream out;
    if (!cfg.checksum_file.empty()) {
      out.open(cfg.checksum_file);
      if (!out) throw dist::InvalidArgument("cannot write --checksum-file " + cfg.checksum_file +
                                                 ": " + std::strerror(errno));
      out.precision(9);
    }
    for (const auto& [name, p] : ddp.module_mut().named_parameters()) {
      for (float v : p->value().data()) {
        sum += v;
        abs_sum += std::abs(v);
        if (out.is_open()) out << v << '\n';
      }
    }
    std::printf("parameter checksum: sum %.6f  abs-sum %.6f\n", sum, abs_sum);
  }
  return 0;
}

}  // namespace

// "Value 0 not in range 0.000000 to 1.797693e+308" was CLI::PositiveNumber's
// word for 0: say what is wanted.
const CLI::Validator kAtLeastOne(
    [](std::string& input) -> std::string {
      try {
        std::size_t end = 0;
        if (std::stoll(input, &end) >= 1 && end == input.size()) return {};
      } catch (const std::exception&) {
      }
      return "must be a whole number, 1 or more (got " + input + ")";
    },
    "1 or more");

int main(int argc, char** argv) {
  Config cfg;
  CLI::App app{"Train an MLP classifier on synthetic Gaussian clusters with DistributedDataParallel"};
  app.add_option("--epochs", cfg.epochs, "Passes over the data")->capture_default_str()->check(kAtLeastOne);
  app.add_option("--samples", cfg.samples, "Samples in the synthetic set")->capture_default_str()->check(kAtLeastOne);
  app.add_option("--global-batch", cfg.global_batch, "Samples per step over all ranks (divisible by the world size)")
      ->capture_default_str()->check(kAtLeastOne);
  app.add_option("--lr", cfg.lr, "SGD learning rate")->capture_default_str();
  app.add_option("--momentum", cfg.momentum, "SGD momentum")->capture_default_str();
  app.add_option("--hidden", cfg.hidden, "Width of the two hidden layers")->capture_default_str()->check(kAtLeastOne);
  app.add_option("--seed", cfg.seed, "Seed of the data, the shuffle and the initial weights")->capture_default_str();
  app.add_option("--sync", cfg.sync, "Gradient sync strategy")->capture_default_str()->check(CLI::IsMember({"sync", "overlapped"}));
  app.add_option("--bucket-mb", cfg.bucket_mb, "DDP bucket capacity in MiB")->capture_default_str();
  app.add_option("--compress", cfg.compress, "Gradients travel as f32 (none) or bf16 (half the bytes)")
      ->capture_default_str()->check(CLI::IsMember({"none", "bf16"}));
  app.add_option("--threads", cfg.threads, "Compute threads per rank (0: AXON_THREADS_PER_RANK, else cores / LOCAL_WORLD_SIZE)")->capture_default_str();
  app.add_option("--checksum-file", cfg.checksum_file, "Write every final parameter, one per line, to PATH (rank 0)");
  app.add_option("--checkpoint", cfg.checkpoint,
                 "Save to PATH after every epoch (rank 0, atomically) and resume from PATH when it exists");
  app.add_option("--die-in-epoch", cfg.die_in_epoch,
                 "To try axon-launch --max-restarts: on the first attempt, rank --die-rank kills itself (SIGKILL) "
                 "halfway through this epoch (0: never)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--die-rank", cfg.die_rank, "The rank --die-in-epoch kills")->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    const nn::ComputeThreads threads(cfg.threads ? cfg.threads : nn::ComputeThreads::fair_share());
    const dist::World world = dist::World::init();
    return run(cfg, world);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train: %s\n", e.what());
    return 1;
  }
}
